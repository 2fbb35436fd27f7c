"""The fish-school demo: its proximity graph and weights, its estimator and behaviours, its
reproducibility, its errors, and the example in both modes (fogrun --sim and fogrun)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import fogsim as fs
from fogsim import topology as T
from fogsim.demos import fish_school as fish
from tests import _jobs, environment
from tests.example_output import table

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "examples" / "fish_school.py"


@pytest.fixture(autouse=True)
def no_world():
    """Each test starts and ends without a current fogsim world."""
    fs.shutdown()
    yield
    fs.shutdown()


@pytest.fixture(scope="module")
def encircle():
    return fish.simulate(n=80, steps=100, mode="encircle", predator="still", seed=3)


@pytest.fixture(scope="module")
def escape():
    return fish.simulate(n=80, steps=60, mode="escape", seed=3)


# -- the proximity graph ----------------------------------------------------------------
def brute_force_pairs(points: np.ndarray, radius: float) -> set[tuple[int, int]]:
    d = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    i, j = np.nonzero(np.triu(d <= radius, k=1))
    return set(zip(i.tolist(), j.tolist(), strict=True))


@pytest.mark.parametrize("radius", [0.05, 0.15, 0.4, 2.0])
def test_neighbors_are_exactly_the_pairs_within_the_radius(radius):
    points = np.random.default_rng(7).random((90, 2))
    i, j, d = fish.proximity_pairs(points, radius)
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == brute_force_pairs(points, radius)
    assert np.all(i < j) and len(set(zip(i, j, strict=True))) == i.size
    np.testing.assert_allclose(d, np.linalg.norm(points[i] - points[j], axis=1), rtol=1e-15)


def test_weights_are_symmetric_doubly_stochastic_metropolis_hastings():
    n, radius = 90, 0.15
    points = np.random.default_rng(8).random((n, 2))
    i, j, _ = fish.proximity_pairs(points, radius)
    W = fish.metropolis_hastings(n, i, j).to_dense()
    np.testing.assert_array_equal(W, W.T)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-14)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-14)
    assert (W >= 0).all()
    # The pattern is the proximity graph plus self loops ...
    pairs = brute_force_pairs(points, radius)
    offdiag = {(a, b) for a, b in zip(*np.nonzero(W), strict=True) if a < b}
    assert offdiag == pairs
    assert (np.diag(W) > 0).all()
    # ... the weights are 1 / (1 + max(d_i, d_j)), as fogsim.topology's rule gives them.
    degree = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    np.testing.assert_allclose(W[i, j], 1.0 / (1.0 + np.maximum(degree[i], degree[j])))
    adjacency = sp.csr_array((np.ones(i.size), (i, j)), shape=(n, n))
    reference = T.metropolis_hastings_weights(adjacency).to_dense()
    np.testing.assert_allclose(W, reference, rtol=0, atol=1e-15)
    assert T.is_doubly_stochastic(fish.metropolis_hastings(n, i, j))


def test_isolated_fish_keep_their_own_value():
    W = fish.metropolis_hastings(3, np.array([0]), np.array([1])).to_dense()
    np.testing.assert_array_equal(W, [[0.5, 0.5, 0], [0.5, 0.5, 0], [0, 0, 1]])


# -- the estimator and the behaviours ---------------------------------------------------
def test_diffusion_error_decreases_towards_the_noise_floor(encircle):
    errors, late = encircle.errors, slice(-40, None)
    diffusion, alone = errors[late].mean(), encircle.errors_alone[late].mean()
    floor = encircle.errors_central[late].mean()
    assert errors[0] == encircle.errors_alone[0]  # step 0: every fish has its own fix only
    assert errors[0] > errors[1] > diffusion
    assert diffusion < 0.3 * errors[0]
    assert diffusion < 0.6 * alone  # neighbors help ...
    assert floor < diffusion  # ... and a fusion center hearing every fish does better still


def test_exact_fixes_give_exact_estimates():
    run = fish.simulate(n=30, steps=20, noise=0.0, predator="still", mode="encircle")
    np.testing.assert_allclose(run.estimates, np.zeros_like(run.estimates), atol=1e-12)
    assert run.errors.max() < 1e-12


def test_noise_floor_scales_with_the_noise():
    late = {}
    for noise in (0.5, 2.0):
        run = fish.simulate(n=60, steps=60, noise=noise, predator="still", mode="encircle")
        late[noise] = run.errors[-30:].mean()
    assert 3.0 < late[2.0] / late[0.5] < 6.0  # about 4: the floor is proportional to the noise


def test_escape_increases_the_distance_to_the_predator(escape):
    distance = escape.predator_distance()
    assert distance[-10:].mean() > 2.5 * distance[0]
    assert escape.modes == ["escape"] * 61


def test_encircle_keeps_the_school_near_the_ring_radius(encircle):
    ring = encircle.params["ring_radius"]
    distance = encircle.predator_distance()
    assert abs(distance[-40:].mean() - ring) < 0.2 * ring
    assert np.ptp(distance[-40:]) < 0.1 * ring  # it stays there


def test_mode_switch_turns_encircling_into_escape():
    run = fish.simulate(n=60, steps=80, mode="encircle", switch_step=50, predator="still")
    assert run.modes[:50] == ["encircle"] * 50 and run.modes[50:] == ["escape"] * 31
    distance = run.predator_distance()
    assert distance[-1] > 1.5 * distance[50]


def test_predator_paths():
    for path in fish.PREDATOR_PATHS:
        track = fish.predator_path(path, 40, speed=0.3, size=10.0)
        assert track.shape == (41, 2)
        step = np.linalg.norm(np.diff(track, axis=0), axis=1)
        np.testing.assert_allclose(step, 0.0 if path == "still" else 0.3, rtol=1e-3, atol=1e-12)
    custom = fish.predator_path(lambda k: (k, -k), 3)
    np.testing.assert_array_equal(custom, [[0, 0], [1, -1], [2, -2], [3, -3]])


# -- reproducibility and worlds ---------------------------------------------------------
def test_same_seed_same_run_other_seed_other_run():
    a = fish.simulate(n=40, steps=30, seed=5)
    b = fish.simulate(n=40, steps=30, seed=5)
    c = fish.simulate(n=40, steps=30, seed=6)
    np.testing.assert_array_equal(a.trajectories(), b.trajectories())
    np.testing.assert_array_equal(a.errors, b.errors)
    assert not np.allclose(a.positions, c.positions)


def test_runs_in_the_current_world_or_a_private_one():
    private = fish.simulate(n=24, steps=15, seed=2)
    assert not fs.is_initialized()  # the private world is gone
    fs.init(size=24, topology=T.ring_graph)
    current = fish.simulate(steps=15, seed=2)
    np.testing.assert_array_equal(current.trajectories(), private.trajectories())
    other = fish.simulate(n=10, steps=3)  # another size: a private world again
    assert other.n == 10 and fs.size() == 24
    assert fs.load_topology() == T.ring_graph(24)  # the user's world is untouched


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 0}, ValueError, "n must be >= 1"),
        ({"n": -3}, ValueError, "n must be >= 1"),
        ({"n": 2.5}, TypeError, "n must be an integer"),
        ({"n": 5, "radius": 0.0}, ValueError, "radius must be finite and > 0"),
        ({"n": 5, "radius": -1.0}, ValueError, "radius must be finite and > 0"),
        ({"n": 5, "radius": float("nan")}, ValueError, "radius must be finite and > 0, got nan"),
        ({"n": 5, "mode": "flee"}, ValueError, "mode must be one of"),
        ({"n": 5, "predator": "zigzag"}, ValueError, "predator must be one of"),
        ({"n": 5, "steps": -1}, ValueError, "steps must be >= 0"),
        ({"n": 5, "noise": -0.1}, ValueError, "noise must be finite and >= 0"),
        ({"n": 5, "speed": 2.0, "max_speed": 1.0}, ValueError, "max_speed"),
        ({"n": 5, "step_size": 0.0}, ValueError, r"step_size must be in \(0, 1\]"),
        ({}, ValueError, "give n"),
    ],
)
def test_bad_input_is_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        fish.simulate(**kwargs)


def test_bad_proximity_input_is_refused():
    with pytest.raises(ValueError, match="radius must be finite and > 0, got 0.0"):
        fish.proximity_pairs(np.zeros((3, 2)), 0.0)
    with pytest.raises(ValueError, match=r"positions must be an \(n, 2\) array, got shape \(3,"):
        fish.proximity_pairs(np.zeros((3, 3)), 1.0)


# -- pictures and the example -----------------------------------------------------------
def load_example():
    return environment.load_example("fish_school")


def test_example_writes_gif_plot_and_trajectories(tmp_path, capsys):
    gif, png, npy = tmp_path / "school.gif", tmp_path / "error.png", tmp_path / "run.npy"
    run = load_example().main(
        [
            "--size",
            "25",
            "--steps",
            "12",
            "--mode",
            "encircle",
            "--every",
            "3",
            "--gif",
            str(gif),
            "--plot",
            str(png),
            "--save",
            str(npy),
        ]
    )
    assert "25 fish, 12 steps, encircle" in capsys.readouterr().out
    assert gif.stat().st_size > 0 and png.stat().st_size > 0
    from PIL import Image

    with Image.open(gif) as im:
        assert im.format == "GIF" and im.n_frames == 5  # steps 0, 3, 6, 9, 12
    np.testing.assert_array_equal(np.load(npy), run.trajectories())
    assert np.load(npy).shape == (13, 25, 6)


def fogrun(tmp_path: Path, mode: list[str], n: int, extra: list[str]) -> np.ndarray:
    out = tmp_path / f"fish-{'sim' if mode else 'mpi'}-{n}.npy"
    run = _jobs.fogrun(
        n, str(EXAMPLE), "--save", str(out), *extra, options=tuple(mode), timeout=120
    ).check()
    assert run.stdout.count(f"{n} fish, ") == 1, "the report must be printed once per job"
    assert table(run.stdout).last.startswith(f"at step {extra[1]} the fish's shared")
    return np.load(out)


@pytest.mark.mpi
def test_example_same_trajectories_simulated_and_under_mpi(tmp_path):
    extra = ["--steps", "30", "--mode", "encircle", "--switch-step", "15", "--seed", "4"]
    simulated = fogrun(tmp_path, ["--sim"], 4, extra)
    distributed = fogrun(tmp_path, [], 4, extra)
    assert simulated.shape == (31, 4, 6)
    np.testing.assert_allclose(distributed, simulated, rtol=0, atol=1e-10)
