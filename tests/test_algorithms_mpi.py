"""fogsim.algorithms under fogrun: the simulator's numbers, and the theory holds under MPI.

This file is also the job both modes run: from the repository root, ``fogrun [--sim] -np N
python -m tests.test_algorithms_mpi OUT.npz`` runs every algorithm once, and the main
process saves every agent's final value and the metrics. The tests compare the two modes and
check the MPI results against numpy references.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests import _jobs
from tests.test_algorithms import hub_digraph, random_push_schedule


def job(out: str) -> None:
    """Run every algorithm on the world fogrun made; save the results on the main process."""
    import fogsim as fs
    from fogsim import algorithms as A
    from fogsim import topology as T

    fs.init(topology=T.exponential_two_graph)
    n = fs.size()
    data = np.random.default_rng(0).standard_normal((n, 3))
    x0 = fs.local(lambda r: data[r])
    problem = A.LeastSquares.random(10, 3, seed=0)
    runs = {
        "consensus": lambda: A.consensus(x0, 20),
        "consensus_one_peer": lambda: A.consensus(x0, 8, T.one_peer_exponential_two(n)),
        "push_sum": lambda: A.push_sum(x0, 50, A.push_weights(hub_digraph(n))),
        "dgd_atc": lambda: A.dgd(problem, 0.02, 50, progress=True),
        "dgd_awc": lambda: A.dgd(
            problem, 0.02, 50, form="awc", schedule=T.one_peer_exponential_two(n)
        ),
        "exact_diffusion": lambda: A.exact_diffusion(problem, 0.03, 160, schedule=T.ring_graph(n)),
        "gradient_tracking": lambda: A.gradient_tracking(problem, 0.03, 160),
        "push_diging": lambda: A.push_diging(problem, 0.03, 160, random_push_schedule(n, 0)),
        "diffusion_lms": lambda: A.diffusion_lms(A.MovingTarget(3, batch=2, seed=1), 0.05, 60),
    }
    saved = {
        "solution": fs.global_view(problem.solution()),
        "lipschitz": np.array(problem.lipschitz()),
    }
    for name, run in runs.items():
        result = run()
        saved[f"{name}.x"] = fs.global_view(result.x)
        for key, values in result.history.items():
            saved[f"{name}.{key}"] = values
    tracked = A.gradient_tracking(problem, 0.03, 5).history["distance"]
    everywhere = fs.global_view(fs.local(lambda r: tracked))  # the same on every agent
    saved["same_history_everywhere"] = np.array(bool(np.all(everywhere == everywhere[0])))
    try:  # every rank holds the same matrix, so every rank refuses it
        A.push_sum(x0, 2, np.full((n, n), 1.0 / n) + np.eye(n))
    except ValueError as exc:
        message = str(exc)
    else:
        message = "no error"
    named = "topology_or_schedule: the weights are not column-stochastic" in message
    refused = fs.global_view(fs.local(lambda r: float(named)))
    saved["refused_everywhere"] = np.array(bool(np.all(refused)))
    if fs.is_main_process():
        np.savez(out, **saved)
    fs.shutdown()


def fogrun(tmp_path: Path, mode: list[str], n: int) -> dict[str, np.ndarray]:
    out = tmp_path / f"algorithms-{'sim' if mode else 'mpi'}-{n}.npz"
    run = _jobs.fogrun(
        n, "-m", "tests.test_algorithms_mpi", str(out), options=tuple(mode), timeout=120
    ).check()
    assert run.stderr.count("| 0/50 [") == 1  # one progress bar: the main process's
    with np.load(out) as saved:
        return dict(saved)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    _jobs.environment.require_mpiexec()
    tmp = tmp_path_factory.mktemp("algorithms")
    cache: dict[tuple[str, int], dict] = {}

    def get(mode: str, n: int) -> dict[str, np.ndarray]:
        if (mode, n) not in cache:
            cache[mode, n] = fogrun(tmp, ["--sim"] if mode == "sim" else [], n)
        return cache[mode, n]

    return get


def least_squares_optimum(n: int) -> np.ndarray:
    """The optimum from the data agent r draws (the same in every mode), by numpy lstsq."""
    import fogsim as fs
    from fogsim import algorithms as A

    with fs.Context(backend="sim", size=n) as world:
        problem = A.LeastSquares.random(10, 3, seed=0)
    world.close()
    return np.linalg.lstsq(problem.A.reshape(-1, 3), problem.b.reshape(-1), rcond=None)[0]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [3, 4])
def test_mpi_gives_the_simulators_numbers(results, n):
    simulated, distributed = results("sim", n), results("mpi", n)
    assert set(simulated) == set(distributed)
    for key in simulated:
        np.testing.assert_allclose(
            distributed[key], simulated[key], rtol=1e-12, atol=1e-14, err_msg=key
        )
    assert distributed["consensus.x"].shape == (n, 3)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [3, 4])
def test_mpi_results_agree_with_theory(results, n):
    got = results("mpi", n)
    x_star = least_squares_optimum(n)
    np.testing.assert_allclose(got["solution"], np.broadcast_to(x_star, (n, 3)), atol=1e-12)
    for name in ("exact_diffusion", "gradient_tracking", "push_diging"):
        assert np.abs(got[f"{name}.x"] - x_star).max() < 1e-10, name
        assert got[f"{name}.distance"][-1] < 1e-10, name
    assert got["dgd_atc.distance"][-1] > 1e-4  # DGD's bias
    assert got["push_sum.distance"][-1] < 1e-12
    if n & (n - 1) == 0:  # one-peer exponential-2: exact after log2(n) steps
        assert got["consensus_one_peer.distance"][-1] < 1e-15
    assert bool(got["refused_everywhere"])
    assert bool(got["same_history_everywhere"])


if __name__ == "__main__":
    job(sys.argv[1])
