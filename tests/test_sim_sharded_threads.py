"""The sharded simulator's blocks, run as threads over the in-process transport.

Each of P threads holds one block of the N agents (a :class:`ShardedSimBackend` on its
end of an :class:`InProcessWorld`); what they compute is compared with one process's
simulator. The launched runs (MPI, torch.distributed) are in ``test_sim_sharded.py``;
these cover many plans and sizes quickly, the narrow circulant path of ``_bands`` most.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim.backends._runtime.inprocess import InProcessWorld
from fogsim.backends._stacking import AgentValue, CallName
from fogsim.backends.sim._bands import BandPlan
from fogsim.backends.sim._sharded import ShardedSimBackend
from tests._threads import sharded


def circulants(n: int):
    """Narrow circulant topologies: both directions, one direction, uneven reach,
    per-agent weights and self weights."""
    rng = np.random.default_rng(n)
    yield "ring", T.ring_graph(n)
    yield "ring_right", T.ring_graph(n, style="right")
    yield "reach_3_back_1_ahead", T.Topology.circulant(n, [1, n - 3, n - 2, n - 1], 0.2, 0.2)
    k = 3
    w = rng.uniform(0.05, 0.3, size=(k, n))
    yield "per_agent", T.Topology.circulant(n, [1, 2, n - 1], w, 1 - w.sum(axis=0))  # rows sum to 1


def one_process(topo: T.Topology, x: np.ndarray, steps: int) -> np.ndarray:
    with fs.Context(backend="sim", size=len(x), topology=topo) as ctx:
        ctx.backend.set_topology(topo, is_weighted=True)
        for _ in range(steps):
            x = ctx.backend.neighbors.neighbor_allreduce(x)
    return x


@pytest.mark.parametrize("n", [7, 33, 50, 64])
@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_narrow_circulants_give_one_processs_rows_bit_for_bit(n, parts, dtype):
    x = np.random.default_rng(1).standard_normal((n, 3)).astype(dtype)
    for name, topo in circulants(n):
        want = one_process(topo, x, 3)

        def work(backend, topo=topo):
            backend.set_topology(topo, is_weighted=True)
            lo, hi = backend.block
            y = x[lo:hi]
            for _ in range(3):  # each result is the next input: the in-place path
                y = backend.neighbors.neighbor_allreduce(y)
            split = backend._comm.split(backend._state.static_plan, narrow=True)
            return lo, hi, y, isinstance(split, BandPlan)

        blocks = sharded(n, parts, work)
        for lo, hi, got, _banded in blocks:
            assert got.dtype == dtype
            np.testing.assert_array_equal(got, want[lo:hi], err_msg=f"{name} block {lo}..{hi}")
        reach = {"ring": 2, "ring_right": 1, "reach_3_back_1_ahead": 4, "per_agent": 3}[name]
        smallest = min(hi - lo for lo, hi, _, _ in blocks)
        assert all(b for *_, b in blocks) == (reach < smallest), name


def test_a_ring_block_receives_one_row_from_each_side_and_copies_nothing_in_a_loop():
    n, parts = 40, 4

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        lo, hi = backend.block
        x = np.arange(lo, hi, dtype=float)[:, None] * np.ones(5)
        y = backend.neighbors.neighbor_allreduce(x)
        z = backend.neighbors.neighbor_allreduce(y)
        band = backend._comm.split(backend._state.static_plan, narrow=True)
        # y sits at rows [1, 1 + b) of a buffer with one halo row each side: z used it
        return band.before, band.after, [(q, e - s) for q, s, e in band.recv], y.base.shape, z

    for rank, (before, after, recv, base_shape, _z) in enumerate(sharded(n, parts, work)):
        assert (before, after) == (1, 1)
        assert recv == [((rank - 1) % parts, 1), ((rank + 1) % parts, 1)]
        assert base_shape == (n // parts + 2, 5)


def test_wide_plans_and_per_call_weights_take_the_csr_split():
    n, parts = 32, 2
    x = np.random.default_rng(2).standard_normal((n, 2))
    want = one_process(T.exponential_two_graph(n), x, 2)

    def work(backend):
        backend.set_topology(T.exponential_two_graph(n))
        lo, hi = backend.block
        y = backend.neighbors.neighbor_allreduce(backend.neighbors.neighbor_allreduce(x[lo:hi]))
        return lo, hi, y, backend._comm.split(backend._state.static_plan, narrow=True)

    for lo, hi, y, split in sharded(n, parts, work):
        assert not isinstance(split, BandPlan)
        np.testing.assert_array_equal(y, want[lo:hi])


def test_a_result_kept_by_the_caller_is_never_overwritten():
    n, parts = 24, 2  # big enough rows for the buffer pool to recycle (1 MiB)
    m = 1 << 15

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        lo, hi = backend.block
        x = np.random.default_rng(lo).standard_normal((hi - lo, m))
        kept = [backend.neighbors.neighbor_allreduce(x)]
        copies = [kept[0].copy()]
        for _ in range(6):
            kept.append(backend.neighbors.neighbor_allreduce(kept[-1]))
            copies.append(kept[-1].copy())
        return all(np.array_equal(k, c) for k, c in zip(kept, copies, strict=True))

    assert all(sharded(n, parts, work))


def test_a_block_smaller_than_the_reach_and_more_processes_than_agents():
    n = 9
    x = np.random.default_rng(3).standard_normal((n, 2))
    topo = T.Topology.circulant(n, [1, 2, 3, n - 3, n - 2, n - 1], 1 / 7, 1 / 7)
    want = one_process(topo, x, 1)

    def work(backend):
        backend.set_topology(topo, is_weighted=True)
        lo, hi = backend.block
        return lo, hi, backend.neighbors.neighbor_allreduce(x[lo:hi])

    for lo, hi, y in sharded(n, 4, work):  # blocks of 2 and 3 agents, reach 3 each way
        np.testing.assert_array_equal(y, want[lo:hi])
    with pytest.raises(ValueError, match="cannot be split over 10 processes"):
        sharded(n, 10, lambda backend: None)


def test_shards_must_match_the_processes_launched():
    with pytest.raises(ValueError, match="shards=3 but 2 process"):
        sharded(8, 2, lambda backend: None, shards=3)


def test_a_dynamic_schedule_is_split_once_per_topology(monkeypatch):
    from fogsim.backends.sim import _shardcomm

    n, parts = 64, 2
    x = np.random.default_rng(4).standard_normal((n, 2))
    steps = [next(s) for s in [T.one_peer_exponential_two(n)] for _ in range(18)]  # 3 cycles
    with fs.Context(backend="sim", size=n) as ctx:
        want = x
        for step in steps:
            want = ctx.backend.neighbors.neighbor_allreduce(want, src_weights=step.weights)
    splits = []
    for name in ("band_plan", "shard_plan"):
        real = getattr(_shardcomm, name)
        monkeypatch.setattr(
            _shardcomm, name, lambda *a, real=real, name=name: splits.append(name) or real(*a)
        )

    def work(backend):
        backend.set_topology(T.exponential_two_graph(n))
        lo, hi = backend.block
        y = x[lo:hi]
        for step in steps:
            y = backend.neighbors.neighbor_allreduce(y, src_weights=step.weights)
        return lo, hi, y

    for lo, hi, y in sharded(n, parts, work):
        np.testing.assert_array_equal(y, want[lo:hi])
    distinct = len({id(step.weights) for step in steps})
    assert distinct == 6 and 0 < splits.count("band_plan") <= parts * distinct


def test_tensors_on_the_device_path_are_combined_there(monkeypatch):
    """With the device path forced on CPU tensors (no GPU here), neighbor averaging runs in
    torch on the block and its halo (staged through the host over this numpy transport),
    within 1e-12 of one process; the other ops go through host memory."""
    import torch

    from fogsim.backends.sim import _torchops

    monkeypatch.setattr(_torchops, "_forced", True)
    combined = []
    real = _torchops.combine
    monkeypatch.setattr(_torchops, "combine", lambda *a: combined.append(a[2].shape) or real(*a))
    n, parts = 30, 3
    x = torch.from_numpy(np.random.default_rng(5).standard_normal((n, 4)))
    topos = [T.ring_graph(n), T.exponential_two_graph(n)]
    with fs.Context(backend="sim", size=n) as ctx:
        want = []
        for topo in topos:
            ctx.backend.set_topology(topo)
            want.append(
                ctx.backend.neighbors.neighbor_allreduce(
                    ctx.backend.neighbors.neighbor_allreduce(x)
                )
            )
        want_mean = ctx.backend.collectives.allreduce(x)

    def work(backend):
        lo, hi = backend.block
        got = []
        for topo in topos:
            backend.set_topology(topo)
            got.append(
                backend.neighbors.neighbor_allreduce(backend.neighbors.neighbor_allreduce(x[lo:hi]))
            )
        return lo, hi, got, backend.collectives.allreduce(x[lo:hi])

    combined.clear()  # (the one-process reference took the device path too)
    for lo, hi, got, mean in sharded(n, parts, work):
        for g, w in zip(got, want, strict=True):
            assert isinstance(g, torch.Tensor) and g.dtype == torch.float64
            torch.testing.assert_close(g, w[lo:hi], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(mean, want_mean[lo:hi], rtol=1e-12, atol=1e-14)
    # in torch, on each block with its halo: 10 rows and a halo of 2 on the ring
    assert (12, 4) in combined and all(rows < n for rows, _ in combined)


def test_per_agent_weights_of_neither_size_are_refused_on_every_process():
    n, parts = 12, 3
    errors = []

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        lo, hi = backend.block
        try:  # 2 entries: neither the block's 4 nor the world's 12
            backend.neighbors.neighbor_allreduce(np.ones((hi - lo, 2)), self_weight=[0.5, 0.5])
        except ValueError as exc:
            errors.append(str(exc))

    sharded(n, parts, work)
    assert len(errors) == parts
    assert all("self_weight: the processes gave [2, 2, 2] entries" in e for e in errors)


def test_the_transport_is_opened_by_name_through_the_registry(monkeypatch):
    from fogsim import _settings, backends

    n, parts = 12, 3
    world = InProcessWorld(parts, timeout=20)
    opened = []

    def open_threads(settings):  # each block's thread is named for its rank
        opened.append(settings.shard_transport)
        return world.transport(int(threading.current_thread().name))

    monkeypatch.setitem(backends._TRANSPORTS, "threads", open_threads)
    assert {"mpi", "threads", "torch"} <= set(backends.available_transports())
    settings = _settings.Settings(shard_transport="threads")
    x = np.random.default_rng(5).standard_normal((n, 2))
    with fs.Context(backend="sim", size=n, topology=T.exponential_two_graph(n)) as ctx:
        want = ctx.backend.neighbors.neighbor_allreduce(x)
    results: list = [None] * parts
    errors: list = []

    def block(rank: int) -> None:
        try:
            backend = ShardedSimBackend(size=n, settings=settings)
            backend.set_topology(T.exponential_two_graph(n))
            lo, hi = backend.block
            results[rank] = lo, hi, backend.neighbors.neighbor_allreduce(x[lo:hi])
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=block, args=(r,), name=str(r)) for r in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    assert opened == ["threads"] * parts
    for lo, hi, got in results:
        np.testing.assert_array_equal(got, want[lo:hi])
    with pytest.raises(ValueError, match="unknown transport 'pigeons'; available: mpi, "):
        backends.open_transport("pigeons", settings)


def test_the_sharded_simulator_is_a_composition_of_its_own_parts():
    from fogsim.backends._parts import Capabilities, Collectives, Machines, Neighbors
    from fogsim.backends.sim import SimBackend

    assert not issubclass(ShardedSimBackend, SimBackend)
    assert ShardedSimBackend.capabilities == Capabilities(stacked=True, windows=False, cuda=True)
    assert SimBackend.capabilities == Capabilities(stacked=True, windows=True, cuda=True)

    def work(backend):
        parts = (backend.collectives, backend.neighbors, backend.machines)
        kinds = (Collectives, Neighbors, Machines)  # each part subclasses its protocol
        return [kind in type(p).__mro__ for p, kind in zip(parts, kinds, strict=True)]

    assert sharded(8, 2, work) == [[True] * 3] * 2
    with pytest.raises(NotImplementedError, match="win_create is not implemented in the sharded"):
        sharded(8, 2, lambda backend: backend.windows.win_create(np.zeros((4, 1)), "w", False))


# -- an op with no sharded form --------------------------------------------------------------
ROUTES = {  # a public op's route (as fogsim._api declares it) and its arguments
    "allreduce": (lambda w: w.collectives.allreduce, lambda x, n: (x, True, None)),
    "allreduce_sum": (lambda w: w.collectives.allreduce, lambda x, n: (x, False, None)),
    "broadcast": (lambda w: w.collectives.broadcast, lambda x, n: (x, 3, None)),
    "allgather": (lambda w: w.collectives.allgather, lambda x, n: (x, None)),
    "neighbor_allreduce": (lambda w: w.neighbors.neighbor_allreduce, lambda x, n: (x,)),
    "neighbor_allreduce_dicts": (
        lambda w: w.neighbors.neighbor_allreduce,
        lambda x, n: (x, 0.5, [{(i - 1) % n: 0.25, (i + 1) % n: 0.25} for i in range(n)]),
    ),
    "neighbor_allgather": (lambda w: w.neighbors.neighbor_allgather, lambda x, n: (x,)),
    "hierarchical": (lambda w: w.machines.hierarchical_neighbor_allreduce, lambda x, n: (x,)),
    "local_allreduce": (lambda w: w.machines.local_allreduce, lambda x, n: (x, True, None)),
    "decomposed": (
        lambda w: w.machines.decomposed_allreduce,
        lambda x, n: (x, True, None, None),
    ),
}


class _NoShardedForms(ShardedSimBackend):
    """A sharded world whose parts are the simulator's alone (what a new op meets)."""

    def __init__(self, *args, **kwargs):
        from fogsim.backends.sim._collectives import SimCollectives
        from fogsim.backends.sim._machines import SimMachines
        from fogsim.backends.sim._neighbors import SimNeighbors

        super().__init__(*args, **kwargs)
        self.collectives = SimCollectives(self._whole, self._comm.transport.barrier)
        self.neighbors = SimNeighbors(self._whole)
        self.machines = SimMachines(self._whole)


@pytest.mark.parametrize("parts", [2, 3])
def test_an_op_with_no_sharded_form_runs_gathered_with_one_processs_numbers(parts):
    """Each op, run through a part that has no sharded form of it, gives the block's rows
    of the one-process simulator, bit for bit, and counts the block's bytes sent."""
    n, local = 12, 3
    x = np.random.default_rng(5).standard_normal((n, 4))
    want, want_sent = {}, None
    with fs.Context(backend="sim", size=n, local_size=local) as ctx:
        ctx.backend.set_topology(T.ring_graph(n))
        for op, (route, args) in ROUTES.items():
            want[op] = ctx.backend.follow(route)(*args(x, n))
        want_sent = ctx.backend.bytes_sent()

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        lo, hi = backend.block
        got = {}
        for op, (route, args) in ROUTES.items():
            per_agent = args(x, n)
            block_args = [x[lo:hi], *per_agent[1:]]
            if op == "neighbor_allreduce_dicts":  # the block's own dicts, as fs.local builds them
                block_args[2] = per_agent[2][lo:hi]
            got[op] = backend.follow(route)(*block_args)
        return lo, hi, got, backend.bytes_sent()

    for lo, hi, got, sent in sharded(n, parts, work, local_size=local, cls=_NoShardedForms):
        for op, value in got.items():
            expected = want[op]
            if isinstance(expected, list):
                assert len(value) == hi - lo
                for a, b in zip(value, expected[lo:hi], strict=True):
                    np.testing.assert_array_equal(a, b, err_msg=op)
            else:
                np.testing.assert_array_equal(value, expected[lo:hi], err_msg=op)
        np.testing.assert_array_equal(sent, want_sent[lo:hi])


def test_an_op_with_a_sharded_form_runs_that_form():
    def work(backend):
        method = backend.follow(lambda w: w.neighbors.neighbor_allreduce)
        return method == backend.neighbors.neighbor_allreduce  # the bound sharded form itself

    assert sharded(8, 2, work) == [True, True]


def test_the_table_above_covers_every_declared_op_but_the_window_ops():
    """A new op joins ROUTES (and so the gathered check above) as it joins fogsim._api."""
    import fogsim  # noqa: F401 - declares every op
    from fogsim import _api, _api_windows  # noqa: F401
    from fogsim._routing import DECLARED_OPS

    class Reached:
        def __init__(self, part):
            self.part = part

        def __getattr__(self, method):
            return (self.part, method)

    class World:
        collectives = Reached("collectives")
        neighbors = Reached("neighbors")
        machines = Reached("machines")
        windows = Reached("windows")

    declared = {op.route(World()) for op in DECLARED_OPS}
    covered = {route(World()) for route, _ in ROUTES.values()}
    missing = {r for r in declared - covered if r[0] != "windows" and r[1] != "barrier"}
    assert not missing, f"ops with no case in ROUTES: {sorted(missing)}"


def test_an_op_with_no_sharded_form_that_calls_another_op_calls_the_simulators(monkeypatch):
    """A simulator op written over another op of its part (``self.neighbor_allreduce``) runs
    gathered on the simulator's own part, whose ``neighbor_allreduce`` takes the whole
    world, not on the sharded part, whose sharded form takes the block's rows."""
    from fogsim.backends.sim import _sharded
    from fogsim.backends.sim._neighbors import SimNeighbors

    def neighbor_allreduce_twice(self, x: AgentValue, name: CallName = None):
        return self.neighbor_allreduce(self.neighbor_allreduce(x))

    monkeypatch.setattr(SimNeighbors, "neighbor_allreduce_twice", neighbor_allreduce_twice, False)
    monkeypatch.setitem(_sharded._SIMULATOR_OPS, neighbor_allreduce_twice, SimNeighbors)
    n = 12
    x = np.random.default_rng(7).standard_normal((n, 3))
    with fs.Context(backend="sim", size=n, topology=T.ring_graph(n)) as ctx:
        want = ctx.backend.neighbors.neighbor_allreduce(ctx.backend.neighbors.neighbor_allreduce(x))

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        lo, hi = backend.block
        twice = backend.follow(lambda w: w.neighbors.neighbor_allreduce_twice)
        return lo, hi, twice(x[lo:hi])

    for lo, hi, got in sharded(n, 3, work):
        np.testing.assert_array_equal(got, want[lo:hi])
