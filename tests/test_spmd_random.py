# ruff: noqa: NPY002  (numpy's legacy global functions are what this file tests)
"""Per-agent randomness: SPMD agents draw what MPI ranks draw; ``fogsim.rng()`` in every mode.

The references are computed independently of the code under test: numpy's with a
``np.random.RandomState(seed)`` of its own, torch's with a ``torch.Generator`` passed
explicitly, ``fs.rng()``'s with ``np.random.default_rng([seed, rank])``, and the MPI ranks
are separate processes.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

import fogsim as fs
import fogsim.spmd as spmd
from tests import _jobs


@pytest.fixture(autouse=True)
def _no_world_left():
    yield
    fs.shutdown()


def _numpy_draws(rs):
    """The same draws from ``rs`` (a RandomState) or from ``np.random``'s functions."""
    draws = [
        rs.rand(3),
        rs.randn(2),
        rs.randint(0, 1000, 4),
        rs.random_sample(2),
        rs.normal(1.0, 2.0, 3),
        rs.uniform(-1, 1, 2),
        rs.choice(10, 3),
        rs.permutation(6),
        rs.standard_normal(2),
        rs.random(2),
    ]
    x = np.arange(5)
    rs.shuffle(x)
    return [*draws, x]


# -- numpy ------------------------------------------------------------------------------------
def test_numpy_seeded_agents_draw_what_a_process_seeded_alike_draws():
    n = 4

    def main():
        r = fs.rank()
        np.random.seed(r)
        out = []
        for step in range(n):  # the agents draw in turns, each between the others' draws
            if step == r:
                out += _numpy_draws(np.random)
            fs.barrier()
        return out

    results = spmd.run(main, size=n)
    for r, draws in enumerate(results):
        expected = _numpy_draws(np.random.RandomState(r))
        assert len(draws) == len(expected)
        for got, want in zip(draws, expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_numpy_agents_drawing_at_once_do_not_disturb_each_other():
    n, rounds = 4, 50

    def main():
        np.random.seed(100 + fs.rank())
        out = []
        for _ in range(rounds):
            out.append(np.random.randn(8))
            fs.barrier()
        return np.concatenate(out)

    results = spmd.run(main, size=n)
    for r, got in enumerate(results):
        np.testing.assert_array_equal(got, np.random.RandomState(100 + r).randn(rounds * 8))


def test_numpy_state_functions_and_the_global_random_state_are_per_agent():
    def main():
        np.random.seed(fs.rank())
        state = np.random.get_state()
        first = np.random.rand(2)
        np.random.set_state(state)
        again = np.random.rand(2)
        np.random.seed(fs.rank())  # the global RandomState, as check_random_state(None) gives
        return first, again, np.random.mtrand._rand.standard_normal(3), np.random.sample(2)

    for r, (first, again, rvs, sample) in enumerate(spmd.run(main, size=3)):
        rs = np.random.RandomState(r)
        np.testing.assert_array_equal(first, rs.rand(2))
        np.testing.assert_array_equal(again, first)
        rs = np.random.RandomState(r)
        np.testing.assert_array_equal(rvs, rs.standard_normal(3))
        np.testing.assert_array_equal(sample, rs.random_sample(2))


def test_the_calling_threads_numpy_state_is_untouched_and_everything_restored():
    originals = {name: getattr(np.random, name) for name in ("rand", "seed", "shuffle")}
    global_rand = np.random.mtrand._rand
    np.random.seed(12345)
    before = np.random.get_state()[1].copy()

    def main():
        np.random.seed(fs.rank())
        return np.random.rand(4)

    spmd.run(main, size=4)
    np.testing.assert_array_equal(np.random.get_state()[1], before)
    np.testing.assert_array_equal(np.random.rand(3), np.random.RandomState(12345).rand(3))
    assert np.random.mtrand._rand is global_rand
    for name, value in originals.items():
        assert getattr(np.random, name) == value, name


def test_everything_is_restored_when_an_agent_fails():
    global_rand = np.random.mtrand._rand
    manual_seed = torch.manual_seed

    def main():
        np.random.seed(fs.rank())
        if fs.rank() == 1:
            raise ValueError("agent 1 fails")
        fs.barrier()

    with pytest.raises(ValueError, match="agent 1 fails"):
        spmd.run(main, size=3)
    assert np.random.mtrand._rand is global_rand and torch.manual_seed is manual_seed
    assert "uniform_" not in vars(torch.Tensor)


def test_an_unseeded_agent_does_not_draw_from_a_seeded_ones_state():
    def main():
        if fs.rank() == 0:
            np.random.seed(0)
            draws = np.random.rand(4)
        fs.barrier()
        if fs.rank() == 1:
            draws = np.random.rand(4)
        return draws

    seeded, unseeded = spmd.run(main, size=2)
    shared = np.random.RandomState(0).rand(8)  # one generator for both would give these
    np.testing.assert_array_equal(seeded, shared[:4])
    assert not np.any(np.isin(unseeded, shared))


def test_threads_outside_the_agents_keep_the_global_state():
    seen = {}
    started = threading.Event()

    def outside():  # a thread of the caller drawing while the agents run
        started.wait(30)
        seen["state"] = np.random.get_state()[1][:4].copy()

    np.random.seed(7)
    expected = np.random.get_state()[1][:4].copy()
    thread = threading.Thread(target=outside)
    thread.start()

    def main():
        np.random.seed(fs.rank())
        if fs.rank() == 0:
            started.set()
            thread.join(30)
        fs.barrier()

    spmd.run(main, size=2)
    np.testing.assert_array_equal(seen["state"], expected)


# -- torch ------------------------------------------------------------------------------------
def _torch_reference(seed):
    """Draws of a process that ran ``torch.manual_seed(seed)``, through an explicit Generator."""
    g = torch.Generator().manual_seed(seed)
    draws = [
        torch.rand(3, generator=g),
        torch.randn(2, generator=g),
        torch.randint(0, 100, (4,), generator=g),
        torch.randperm(6, generator=g),
        torch.normal(0.0, 1.0, (2,), generator=g),
    ]
    weight, bias = torch.empty(3, 4), torch.empty(3)
    torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=g)  # nn.Linear's init
    bias.uniform_(-1 / math.sqrt(4), 1 / math.sqrt(4), generator=g)
    return [*draws, weight, bias, torch.rand(2, generator=g)]


def _torch_draws():
    draws = [
        torch.rand(3),
        torch.randn(2),
        torch.randint(0, 100, (4,)),
        torch.randperm(6),
        torch.normal(0.0, 1.0, (2,)),
    ]
    layer = torch.nn.Linear(4, 3)
    return [*draws, layer.weight.detach(), layer.bias.detach(), torch.rand(2)]


def test_torch_seeded_agents_draw_what_a_process_seeded_alike_draws():
    n = 4
    before = torch.get_rng_state()

    def main():
        r = fs.rank()
        torch.manual_seed(r)
        assert torch.initial_seed() == r
        out = []
        for step in range(n):
            if step == r:
                out += _torch_draws()
            fs.barrier()
        return out

    results = spmd.run(main, size=n)
    assert torch.equal(torch.get_rng_state(), before)
    for r, draws in enumerate(results):
        for k, (got, want) in enumerate(zip(draws, _torch_reference(r), strict=True)):
            assert torch.equal(got, want), (r, k)


def test_torch_agents_drawing_at_once_and_state_functions():
    rounds = 30

    def main():
        torch.manual_seed(50 + fs.rank())
        out = []
        for _ in range(rounds):
            out.append(torch.randn(5))
            out.append(torch.nn.functional.dropout(torch.ones(6), p=0.5))
            fs.barrier()
        state = torch.get_rng_state()
        a = torch.rand(3)
        torch.set_rng_state(state)
        with torch.random.fork_rng():
            torch.rand(10)
        return out, a, torch.rand(3)

    for r, (draws, a, again) in enumerate(spmd.run(main, size=3)):
        with torch.random.fork_rng():  # the reference, in the calling thread's own generator
            torch.manual_seed(50 + r)
            for k in range(rounds):
                assert torch.equal(draws[2 * k], torch.randn(5)), (r, k)
                assert torch.equal(
                    draws[2 * k + 1], torch.nn.functional.dropout(torch.ones(6), p=0.5)
                )
            assert torch.equal(a, torch.rand(3)) and torch.equal(again, a)


# -- fs.rng() ---------------------------------------------------------------------------------
def test_rng_in_simulation_stacks_every_agents_generator():
    fs.init(size=5, seed=3)
    first, second = fs.rng().standard_normal((2, 3)), fs.rng().integers(0, 100, 4)
    assert first.shape == (5, 2, 3) and second.shape == (5, 4)
    for r in range(5):
        g = np.random.default_rng([3, r])
        np.testing.assert_array_equal(first[r], g.standard_normal((2, 3)))
        np.testing.assert_array_equal(second[r], g.integers(0, 100, 4))
    assert len(fs.rng()) == 5 and isinstance(fs.rng()[2], np.random.Generator)
    with pytest.raises(AttributeError, match="shuffle"):
        fs.rng().shuffle(np.arange(3))


def test_rng_restarts_with_init_and_defaults_to_seed_0():
    fs.init(size=2)
    a = fs.rng().random(3)
    np.testing.assert_array_equal(a[1], np.random.default_rng([0, 1]).random(3))
    fs.shutdown()
    fs.init(size=2)
    np.testing.assert_array_equal(fs.rng().random(3), a)


def test_rng_of_spmd_agents_equals_the_simulated_rows():
    def main():
        return fs.rng().standard_normal(4), fs.rng().random()

    results = spmd.run(main, size=4, seed=9)
    with fs.Context(backend="sim", size=4, seed=9) as ctx:
        normal, uniform = fs.rng().standard_normal(4), fs.rng().random()
    ctx.close()
    assert isinstance(uniform, np.ndarray) and uniform.shape == (4,)
    for r, (got_normal, got_uniform) in enumerate(results):
        np.testing.assert_array_equal(got_normal, normal[r])
        assert got_uniform == uniform[r]


# -- draw for draw against MPI ----------------------------------------------------------------
SCRIPT = """
import sys
import numpy as np
import torch
import fogsim as fs

fs.init(seed=11)
r = fs.rank()
np.random.seed(r)
draws = {"np_rand": np.random.rand(4), "np_randn": np.random.randn(3),
         "np_randint": np.random.randint(0, 1000, 5), "np_perm": np.random.permutation(7)}
fs.barrier()
torch.manual_seed(r)
layer = torch.nn.Linear(3, 2)
draws.update(torch_rand=torch.rand(3).numpy(), torch_randn=torch.randn(3).numpy(),
             torch_perm=torch.randperm(5).numpy(), torch_weight=layer.weight.detach().numpy(),
             torch_bias=layer.bias.detach().numpy())
fs.barrier()
draws.update(rng_normal=fs.rng().standard_normal(4), rng_integers=fs.rng().integers(0, 99, 3))
np.savez(f"{sys.argv[1]}/{r}.npz", **draws)
"""


def _per_rank(folder, n):
    return [dict(np.load(folder / f"{r}.npz")) for r in range(n)]


def test_spmd_and_mpi_ranks_draw_the_same_numbers(tmp_path):
    n = 4
    mpi_dir, spmd_dir = tmp_path / "mpi", tmp_path / "spmd"
    mpi_dir.mkdir()
    spmd_dir.mkdir()
    _jobs.fogrun_script(tmp_path, SCRIPT, n, str(mpi_dir)).check()
    _jobs.fogrun_script(tmp_path, SCRIPT, n, str(spmd_dir), options=("--spmd",)).check()
    mpi, spmd_draws = _per_rank(mpi_dir, n), _per_rank(spmd_dir, n)
    for r in range(n):
        assert mpi[r].keys() == spmd_draws[r].keys()
        for key in mpi[r]:
            np.testing.assert_array_equal(spmd_draws[r][key], mpi[r][key], err_msg=f"{key} {r}")
        np.testing.assert_array_equal(mpi[r]["np_rand"], np.random.RandomState(r).rand(4))
    fs.init(size=n, seed=11)
    normal, integers = fs.rng().standard_normal(4), fs.rng().integers(0, 99, 3)
    for r in range(n):
        np.testing.assert_array_equal(normal[r], mpi[r]["rng_normal"])
        np.testing.assert_array_equal(integers[r], mpi[r]["rng_integers"])
    assert len({mpi[r]["torch_rand"].tobytes() for r in range(n)}) == n
