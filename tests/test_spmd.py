"""SPMD mode: per-agent code as N threads, each op a rendezvous run by the simulator.

Every op is checked against the stacked simulator doing the same op (bit for bit) and a
numpy reference; the op bodies of tests/dual_cases.py, written per agent for MPI, run
unchanged in SPMD mode too.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fogsim as fs
import fogsim.spmd as spmd
from fogsim import _context
from fogsim import topology as T
from fogsim.spmd import SpmdAborted, SpmdError, SpmdTimeout
from tests import dual_cases

SIZES = [1, 4, 16]


def _data(n, shape=(3,), dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


def _stacked(n, fn, topology=T.exponential_two_graph, **kwargs):
    """``fn()`` in a private simulated world of n agents (the stacked reference)."""
    with fs.Context(backend="sim", size=n, topology=topology, **kwargs) as world:
        result = fn()
    world.close()
    return result


def _rows(results):
    return np.stack([np.asarray(r) for r in results])


@pytest.fixture(autouse=True)
def _no_world_left():
    yield
    fs.shutdown()


# -- the op bodies shared with the MPI tests ------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("case", dual_cases.CASES)
def test_dual_cases_run_unchanged(case, n):
    spmd.run(getattr(dual_cases, case), size=n, timeout=60)


# -- each op against the stacked simulator ----------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_agents_see_their_own_rank_and_neighbors(n):
    def main():
        ranks = fs.rank(), fs.size(), fs.local_rank()
        return (
            *ranks,
            fs.in_neighbor_ranks(),
            fs.out_neighbor_ranks(),
            fs.is_main_process(),
            fs.local(lambda r: 10 * r),
        )

    topo = T.exponential_two_graph(n)
    for r, (rank, size, local_rank, ins, outs, main_process, local) in enumerate(
        spmd.run(main, size=n)
    ):
        assert type(rank) is int and rank == r and size == n and local_rank == r
        assert ins == topo.in_neighbors(r) and outs == topo.out_neighbors(r)
        assert all(type(j) is int for j in ins)
        assert main_process == (r == 0) and local == 10 * r


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("blocking", [True, False])
def test_collectives_equal_the_stacked_simulator(n, blocking):
    data = _data(n, (2, 3))
    ints = np.arange(n * 3).reshape(n, 3)

    def call(op, *args, **kwargs):
        if blocking:
            return getattr(fs, op)(*args, **kwargs)
        return fs.wait(getattr(fs, op + "_nonblocking")(*args, **kwargs))

    def main():
        r = fs.rank()
        return {
            "mean": call("allreduce", data[r]),
            "sum": call("allreduce", ints[r], average=False),
            "scalar": call("allreduce", float(r), average=False),
            "bcast": call("broadcast", data[r], n - 1),
            "gather": call("allgather", data[r]),
            "nar": call("neighbor_allreduce", data[r]),
            "nag": call("neighbor_allgather", data[r]),
        }

    got = spmd.run(main, size=n)

    def stacked():
        return {
            "mean": fs.allreduce(data),
            "sum": fs.allreduce(ints, average=False),
            "scalar": fs.allreduce(np.arange(n, dtype=float), average=False),
            "bcast": fs.broadcast(data, n - 1),
            "gather": fs.allgather(data),
            "nar": fs.neighbor_allreduce(data),
            "nag": fs.neighbor_allgather(data),
        }

    ref = _stacked(n, stacked)
    for key, want in ref.items():
        rows = _rows([g[key] for g in got])
        assert rows.dtype == np.asarray(want).dtype, key
        np.testing.assert_array_equal(rows, want, err_msg=key)
    np.testing.assert_allclose(
        _rows([g["mean"] for g in got]), np.broadcast_to(data.mean(axis=0), (n, 2, 3)), rtol=1e-12
    )
    assert all(np.ndim(g["scalar"]) == 0 and g["scalar"] == n * (n - 1) / 2 for g in got)
    W = T.exponential_two_graph(n).uniform().to_dense()
    np.testing.assert_allclose(
        _rows([g["nar"] for g in got]), np.einsum("ij,jkl->ikl", W, data), rtol=1e-12
    )


@pytest.mark.parametrize("n", SIZES)
def test_dynamic_neighbor_allreduce_with_per_agent_weights(n):
    rng = np.random.default_rng(n)
    A = (rng.random((n, n)) < 0.5) & ~np.eye(n, dtype=bool)
    R, S, sw = rng.random((n, n)) * A, rng.random((n, n)) * A, rng.random(n)
    src = [{int(j): float(R[i, j]) for j in np.flatnonzero(A[i])} for i in range(n)]
    dst = [{int(i): float(S[i, j]) for i in np.flatnonzero(A[:, j])} for j in range(n)]
    data = _data(n, (4,), np.float32)

    def main():
        r = fs.rank()
        push_pull = fs.neighbor_allreduce(
            data[r], self_weight=sw[r], src_weights=src[r], dst_weights=dst[r], check_weights=False
        )  # random
        schedule = T.one_peer_exponential_two(n)  # each agent its own generator
        one_peer = fs.neighbor_allreduce(data[r], src_weights=next(schedule).weights)
        return push_pull, one_peer

    got = spmd.run(main, size=n)
    ref = _stacked(
        n,
        lambda: (
            fs.neighbor_allreduce(
                data, self_weight=sw, src_weights=src, dst_weights=dst, check_weights=False
            ),
            fs.neighbor_allreduce(data, src_weights=next(T.one_peer_exponential_two(n)).weights),
        ),
    )
    for k in range(2):
        rows = _rows([g[k] for g in got])
        assert rows.dtype == np.float32
        np.testing.assert_array_equal(rows, ref[k])
    want = np.einsum("ij,jk->ik", np.diag(sw) + R * S, data.astype(np.float64))
    np.testing.assert_allclose(_rows([g[0] for g in got]), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [4, 16])
def test_torch_tensors_come_back_as_tensors_of_their_dtype(n):
    torch = pytest.importorskip("torch")
    data = _data(n, (3,), np.float32)

    def main():
        r = fs.rank()
        x = torch.from_numpy(data[r].copy())
        h = fs.neighbor_allreduce_nonblocking(x)
        return fs.wait(h), fs.allreduce(x.double(), average=False), fs.allgather(x)

    got = spmd.run(main, size=n)
    ref = _stacked(n, lambda: (fs.neighbor_allreduce(torch.from_numpy(data)), fs.allgather(data)))
    for r, (nar, total, gathered) in enumerate(got):
        assert isinstance(nar, torch.Tensor) and nar.dtype == torch.float32
        assert isinstance(total, torch.Tensor) and total.dtype == torch.float64
        assert torch.equal(nar, ref[0][r])
        np.testing.assert_allclose(total.numpy(), data.astype(np.float64).sum(axis=0))
        np.testing.assert_array_equal(gathered.numpy(), ref[1][r])


def test_machine_level_ops_equal_the_stacked_simulator():
    n, k = 8, 2
    data = _data(n, (2,))

    def main():
        fs.init(local_size=k)
        r = fs.rank()
        assert fs.machine_rank() == r // k and fs.machine_size() == n // k
        return (
            fs.hierarchical_neighbor_allreduce(data[r]),
            fs.allreduce(data[r], is_hierarchical_local=True),
            fs.allreduce(data[r], algorithm="decomposed"),
        )

    got = spmd.run(main, size=n)
    ref = _stacked(
        n,
        lambda: (
            fs.hierarchical_neighbor_allreduce(data),
            fs.allreduce(data, is_hierarchical_local=True),
            fs.allreduce(data, algorithm="decomposed"),
        ),
        local_size=k,
    )
    for j in range(3):
        np.testing.assert_array_equal(_rows([g[j] for g in got]), ref[j])


# -- an algorithm gives the same numbers at every size ----------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_gradient_descent_equals_the_stacked_simulator(n):
    targets = _data(n, (5,), seed=4)

    def per_agent():
        fs.init(topology=T.ring_graph)
        x = np.zeros(5)
        for _ in range(20):
            x = fs.neighbor_allreduce(x - 0.1 * (x - targets[fs.rank()]))
        return x

    def stacked():
        x = np.zeros((n, 5))
        for _ in range(20):
            x = fs.neighbor_allreduce(x - 0.1 * (x - targets))
        return x

    got = _rows(spmd.run(per_agent, size=n))
    np.testing.assert_array_equal(got, _stacked(n, stacked, topology=T.ring_graph))
    assert np.abs(got - targets.mean(axis=0)).max() < 1.0  # it did move towards the average


# -- windows -------------------------------------------------------------------------------
@pytest.mark.parametrize("n", SIZES)
def test_push_sum_with_win_accumulate_conserves_mass(n):
    data = _data(n, (3,), seed=7)
    topo = T.exponential_two_graph(n)

    def main():
        r = fs.rank()
        fs.set_win_ops_with_associated_p(True)
        x = data[r].copy()
        fs.win_create(x, "ps", zero_init=True)
        share = 1.0 / (len(fs.out_neighbor_ranks()) + 1)
        dst = dict.fromkeys(fs.out_neighbor_ranks(), share)
        masses = []
        for _ in range(30):
            fs.win_accumulate(x, "ps", self_weight=share, dst_weights=dst, require_mutex=True)
            fs.win_update_then_collect("ps")  # returns x, updated in place
            p = fs.win_associated_p("ps")
            masses.append(fs.allreduce(np.array([p]), average=False)[0])
        fs.win_free("ps")
        return x / p, masses, x

    got = spmd.run(main, size=n)
    for estimate, masses, _ in got:
        np.testing.assert_allclose(masses, n, rtol=1e-12)
        np.testing.assert_allclose(estimate, data.mean(axis=0), rtol=1e-5, atol=1e-8)

    def stacked():
        fs.set_win_ops_with_associated_p(True)
        x = data.copy()
        fs.win_create(x, "ps", zero_init=True)
        share = np.array([1.0 / (len(topo.out_neighbors(i)) + 1) for i in range(n)])
        dst = [dict.fromkeys(topo.out_neighbors(i), share[i]) for i in range(n)]
        for _ in range(30):
            fs.win_accumulate(x, "ps", self_weight=share, dst_weights=dst)
            fs.win_update_then_collect("ps")
        return x

    np.testing.assert_array_equal(_rows([g[2] for g in got]), _stacked(n, stacked))


@pytest.mark.parametrize("n", [4, 16])
def test_window_ops_update_registered_tensors_in_place(n):
    torch = pytest.importorskip("torch")
    data = _data(n, (2,), seed=2)

    def main():
        r = fs.rank()
        x = torch.from_numpy(data[r].copy())
        fs.win_create(x, "w")
        x.mul_(2.0)  # changed in place after create: the next ops see it, as under MPI
        fs.win_put(x, "w", self_weight=0.5)  # x *= 0.5 in place
        after_put = x.clone()
        versions = fs.get_win_version("w")
        out = fs.win_update("w")
        assert out is x  # the registered tensor itself, updated in place
        cloned = fs.win_update("w", clone=True)
        assert cloned is not x and isinstance(cloned, torch.Tensor)
        fs.win_get("w", src_weights={j: 2.0 for j in fs.in_neighbor_ranks()})
        got = fs.win_update(
            "w", self_weight=0.0, neighbor_weights=dict.fromkeys(fs.in_neighbor_ranks(), 1.0)
        )
        fs.win_free()
        return after_put, versions, x.clone(), got.clone()

    got = spmd.run(main, size=n)
    W = T.exponential_two_graph(n).uniform().to_dense()
    A = (W > 0) & ~np.eye(n, dtype=bool)
    for r, (after_put, versions, _, _) in enumerate(got):
        np.testing.assert_array_equal(after_put.numpy(), data[r])
        assert versions == {int(j): 1 for j in np.flatnonzero(A[r])}
    # after the put every buffer holds the neighbor's 2x and x is back to data: the update
    updated = np.diag(W)[:, None] * data + (W - np.diag(np.diag(W))) @ (2 * data)
    np.testing.assert_allclose(_rows([g[2].numpy() for g in got]), (A * 2.0) @ updated)

    def stacked():
        x = torch.from_numpy(data.copy())
        fs.win_create(x, "w")
        x.mul_(2.0)
        fs.win_put(x, "w", self_weight=0.5)
        fs.win_update("w")
        fs.win_get("w", src_weights=[{int(j): 2.0 for j in np.flatnonzero(A[i])} for i in range(n)])
        return fs.win_update(
            "w",
            self_weight=np.zeros(n),
            neighbor_weights=[{int(j): 1.0 for j in np.flatnonzero(A[i])} for i in range(n)],
        ).clone()

    np.testing.assert_array_equal(_rows([g[3].numpy() for g in got]), _stacked(n, stacked))


def test_win_put_of_an_unregistered_array_scales_it_in_place():
    n = 4

    def main():
        r = fs.rank()
        x = np.full(2, float(r))
        fs.win_create(x, "w", zero_init=True)
        other = np.full(2, 10.0 + r)
        fs.win_put(other, "w", self_weight=0.5)
        result = fs.win_update(
            "w", self_weight=0.0, neighbor_weights=dict.fromkeys(fs.in_neighbor_ranks(), 1.0)
        )
        return other, x.copy(), result.copy()

    topo = T.exponential_two_graph(n)
    for r, (other, x, result) in enumerate(spmd.run(main, size=n)):
        np.testing.assert_array_equal(other, np.full(2, (10.0 + r) / 2))
        want = sum(10.0 + j for j in topo.in_neighbors(r))
        np.testing.assert_array_equal(x, np.full(2, want))
        np.testing.assert_array_equal(result, x)


# -- errors --------------------------------------------------------------------------------
def test_agents_calling_different_ops_get_a_value_error_naming_them():
    def main():
        x = np.ones(2)
        if fs.rank() % 2 == 0:
            return fs.neighbor_allreduce(x)
        return fs.allreduce(x)

    with pytest.raises(
        ValueError,
        match=r"agents 0, 2 called neighbor_allreduce but agents "
        r"1, 3 called allreduce",
    ) as info:
        spmd.run(main, size=4)
    assert "raised by agent 0 of 4" in "".join(info.value.__notes__)


def test_every_agent_gets_the_error_and_may_go_on():
    seen = {}

    def main():
        r = fs.rank()
        try:
            fs.allreduce(np.ones(3), name=f"step-{r == 1}")
        except ValueError as exc:
            seen[r] = str(exc)
        try:
            fs.allreduce(np.ones(4 if r == 2 else 3))
        except ValueError as exc:
            seen[r, "shape"] = str(exc)
        return fs.allreduce(np.full(2, float(r)), average=False)

    got = spmd.run(main, size=3)
    assert all(np.array_equal(g, [3.0, 3.0]) for g in got)
    assert "agents 0, 2 called allreduce(name='step-False') but agent 1 called " in seen[0]
    assert seen[0] == seen[1] == seen[2]
    assert "agents 0, 1 passed float64 (3,) but agent 2 passed float64 (4,)" in seen[1, "shape"]


def test_mismatched_topologies_are_refused():
    def main():
        fs.set_topology(T.ring_graph if fs.rank() != 2 else T.star_graph)

    with pytest.raises(
        ValueError,
        match=r"set_topology: every agent must pass the same "
        r"topology, but agents 0, 1, 3 passed topology A but "
        r"agent 2 passed topology B",
    ):
        spmd.run(main, size=4)


def test_an_agent_exception_stops_the_others_and_is_reraised_with_its_rank():
    caught = {}

    def main():
        r = fs.rank()
        fs.barrier()
        if r == 2:
            raise ZeroDivisionError("agent two gave up")
        try:
            for _ in range(1000):
                fs.allreduce(np.ones(1))
        except SpmdAborted as exc:
            caught[r] = exc
            raise

    with pytest.raises(ZeroDivisionError, match="agent two gave up") as info:
        spmd.run(main, size=4, timeout=30)
    assert "fogsim.spmd: raised by agent 2 of 4" in info.value.__notes__
    assert sorted(caught) == [0, 1, 3]
    assert all(
        e.rank == 2 and "agent 2 raised ZeroDivisionError" in str(e) for e in caught.values()
    )


def test_an_agent_that_returns_early_ends_the_wait_of_the_others():
    def main():
        if fs.rank() == 3:
            time.sleep(0.2)  # the others are waiting by now
            return "done"
        fs.allreduce(np.ones(2))

    # Ended by agent 3's return, not by the (far longer) rendezvous timeout, a hang guard.
    with pytest.raises(
        SpmdError,
        match=r"agent 3 finished while agents 0, 1, 2 wait in "
        r"allreduce",
    ) as info:
        spmd.run(main, size=4, timeout=120)
    assert not isinstance(info.value, SpmdTimeout), info.value


def test_a_stalled_rendezvous_times_out():
    def main():
        if fs.rank() == 1:
            time.sleep(1.0)
        fs.barrier()

    with pytest.raises(SpmdTimeout, match=r"waited 0.2 s in barrier for agent 1"):
        spmd.run(main, size=3, timeout=0.2)


def test_the_default_timeout_is_the_stall_timeout(monkeypatch):
    def main():
        if fs.rank() == 0:
            time.sleep(0.6)
        fs.barrier()
        return fs.rank()

    monkeypatch.setenv("FOGSIM_STALL_TIMEOUT", "0.2")
    with pytest.raises(SpmdTimeout, match=r"waited 0.2 s in barrier for agent 0.*STALL"):
        spmd.run(main, size=2)
    assert spmd.run(main, size=2, timeout=0) == [0, 1]  # 0: no limit


def test_init_inside_an_agent_attaches_to_the_run():
    outside = fs.init(size=5)

    def main():
        ctx = fs.init()
        assert _context.current() is ctx and ctx.backend.name == "spmd"
        fs.init(topology=T.ring_graph)
        ring = fs.in_neighbor_ranks()
        fs.shutdown()
        assert not fs.is_initialized()
        fs.init()  # again: the run's default topology
        assert fs.init(size=8).backend.size() == 4  # the run's count wins
        with pytest.raises(TypeError, match="size must be an integer"):
            fs.init(size=8.0)
        with pytest.raises(ValueError, match="backend='sim'"):
            fs.init(backend="sim")
        return ring, fs.in_neighbor_ranks()

    got = spmd.run(main, size=4)
    assert [g[0] for g in got] == [T.ring_graph(4).in_neighbors(r) for r in range(4)]
    assert [g[1] for g in got] == [T.exponential_two_graph(4).in_neighbors(r) for r in range(4)]
    assert _context.current() is outside and fs.size() == 5  # the caller's world is untouched


def test_the_spmd_backend_refuses_to_start_outside_a_run():
    with pytest.raises(ValueError, match="fogsim.spmd.run"):
        fs.init(backend="spmd")


def test_run_checks_its_arguments():
    with pytest.raises(TypeError, match="main must be a function"):
        spmd.run(42, size=2)
    with pytest.raises(ValueError, match="size must be >= 1"):
        spmd.run(lambda: None, size=0)
    with pytest.raises(ValueError, match="timeout must be a number of seconds >= 0"):
        spmd.run(lambda: None, size=2, timeout=-1)
    assert spmd.run(lambda a, b: (fs.rank(), a + b), 1, 2, size=3) == [(0, 3), (1, 3), (2, 3)]


def test_threads_are_gone_after_a_run():
    before = threading.active_count()
    spmd.run(fs.barrier, size=8)
    assert threading.active_count() == before


# -- scripts -------------------------------------------------------------------------------
SCRIPT = """
import sys
import numpy as np
import fogsim as fs

def main():
    fs.init()
    x = np.full(2, float(fs.rank()) * float(sys.argv[1]))
    return fs.neighbor_allreduce(x)

if __name__ == "__main__":
    result = main()
"""


def test_run_path_runs_a_script_as_main_on_every_agent(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    namespaces = spmd.run_path(path, size=4, argv=["3"])
    got = _rows([ns["result"] for ns in namespaces])
    x = 3.0 * np.repeat(np.arange(4.0)[:, None], 2, axis=1)
    np.testing.assert_array_equal(got, _stacked(4, lambda: fs.neighbor_allreduce(x)))
    assert all(ns["__name__"] == "__main__" and ns["__file__"] == str(path) for ns in namespaces)
