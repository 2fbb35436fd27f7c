"""Sharding a step's plan over P blocks: each block's rows bit for bit as one process's.

The plans come from fogsim's own topologies (circulant and general CSR, uniform and given
weights, per-agent self weights); each block combines its rows from its own values and the
halo rows the other blocks send, and the result is compared with ``apply_plan`` over all
agents with ``assert_array_equal``. N that P does not divide is included. A circulant plan,
sharded from its offsets in block-sized time and memory, must give what its expanded
entries give; the overlapped combine, whose halo arrives only when waited for, must give
``apply_shard``'s rows.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from fogsim import topology as T
from fogsim.backends.sim._plan import CircPlan, CsrPlan, apply_plan, static_plan
from fogsim.backends.sim._shards import (
    MAX_RUNS,
    ShardPlan,
    apply_shard,
    block_bounds,
    combine_overlapped,
    exchange_into,
    shard_plan,
)
from fogsim.topology._circulant import make_circulant


def random_weights(n: int, seed: int) -> sp.csr_array:
    """A random directed graph with random positive weights, rows summing to 1."""
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, n)) < 4.0 / n) * rng.random((n, n))
    np.fill_diagonal(dense, rng.random(n) + 0.1)
    return sp.csr_array(dense / dense.sum(axis=1, keepdims=True))


def plans(n: int):
    yield "ring", static_plan(T.as_topology(T.ring_graph(n)), False)
    yield "exp2", static_plan(T.as_topology(T.exponential_two_graph(n)), False)
    yield "exp2 weighted", static_plan(T.as_topology(T.exponential_two_graph(n)), True)
    yield "random", static_plan(T.as_topology(random_weights(n, n)), True)
    yield "star", static_plan(T.as_topology(T.star_graph(n)), False)


@pytest.mark.parametrize("n", [50, 64, 7])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_every_block_gets_one_processs_rows_bit_for_bit(n, parts):
    x = np.random.default_rng(1).standard_normal((n, 3))
    for name, plan in plans(n):
        whole = apply_plan(plan, x, np.empty_like(x))
        shards = [shard_plan(plan, n, parts, me) for me in range(parts)]
        got = np.concatenate([apply_shard(s, x[s.lo : s.hi], x[s.halo]) for s in shards])
        np.testing.assert_array_equal(got, whole, err_msg=f"{name}, {parts} blocks")


@pytest.mark.parametrize("n,parts", [(50, 4), (64, 2), (33, 3)])
def test_what_a_block_sends_is_what_the_other_reads(n, parts):
    bounds = block_bounds(n, parts)
    for name, plan in plans(n):
        shards = [shard_plan(plan, n, parts, me) for me in range(parts)]
        for me, s in enumerate(shards):
            assert s.lo == bounds[me] and s.hi == bounds[me + 1]
            assert not np.isin(s.halo, np.arange(s.lo, s.hi)).any(), name
            assert np.all(np.diff(s.halo) > 0), name
            for q, (a, z) in s.recv.items():
                sent = shards[q].send[me] + shards[q].lo  # as agents
                np.testing.assert_array_equal(sent, s.halo[a:z], err_msg=name)
            for q in s.send:
                assert me in shards[q].recv, name
            assert sum(z - a for a, z in s.recv.values()) == len(s.halo)


def test_a_ring_block_reads_only_its_two_boundary_neighbours():
    n, parts = 1000, 4
    plan = static_plan(T.as_topology(T.ring_graph(n)), False)
    for me in range(parts):
        s = shard_plan(plan, n, parts, me)
        assert set(s.halo.tolist()) == {(s.lo - 1) % n, s.hi % n}
        assert sum(len(rows) for rows in s.send.values()) == 2


def test_per_agent_self_weights_and_an_empty_block_row():
    n, parts = 10, 3
    rng = np.random.default_rng(4)
    indptr = np.array([0, 2, 2, 3, 5, 5, 6, 8, 8, 9, 10], dtype=np.int64)
    indices = np.array([3, 9, 1, 0, 2, 8, 4, 5, 0, 1], dtype=np.int32)
    for i in range(n):  # ascending per row, as plans keep them
        indices[indptr[i] : indptr[i + 1]].sort()
    plan = CsrPlan(rng.random(n), indptr, indices, rng.random(len(indices)))
    x = rng.standard_normal((n, 2))
    whole = apply_plan(plan, x, np.empty_like(x))
    shards = [shard_plan(plan, n, parts, me) for me in range(parts)]
    got = np.concatenate([apply_shard(s, x[s.lo : s.hi], x[s.halo]) for s in shards])
    np.testing.assert_array_equal(got, whole)


def test_blocks_differ_by_at_most_one_agent_and_bad_splits_are_refused():
    assert block_bounds(10, 3).tolist() == [0, 4, 7, 10]
    assert block_bounds(8, 4).tolist() == [0, 2, 4, 6, 8]
    with pytest.raises(ValueError, match="3 agents cannot be split over 4"):
        block_bounds(3, 4)
    with pytest.raises(ValueError, match="at least 1"):
        block_bounds(3, 0)
    plan = static_plan(T.as_topology(T.ring_graph(8)), False)
    with pytest.raises(ValueError, match="process 4 is not one of the 4"):
        shard_plan(plan, 8, 4, 4)


# -- circulant plans: O(block) planning ---------------------------------------------------


def random_circulant(n: int, seed: int) -> CircPlan:
    """A circulant plan with random offsets, per-agent weights and per-agent self weights."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(0, min(n - 1, 9) + 1))
    offsets = np.sort(rng.choice(np.arange(1, n), k, replace=False))
    form = make_circulant(n, offsets, rng.random((k, n)) + 0.1, rng.random(n) + 0.1)
    return CircPlan(form, T.as_topology(T.ring_graph(n)))


def expanded(plan: CircPlan, n: int) -> CsrPlan:
    """The circulant plan as a CSR plan with every one of its n k entries, rows ascending."""
    f = plan.form
    k = len(f.offsets)
    rows = np.repeat(np.arange(n), k)
    cols = (rows + np.tile(f.offsets, n)) % n
    w = np.asarray(f.weights)
    data = w.T.ravel() if w.ndim == 2 else np.tile(w, n)
    order = np.lexsort((cols, rows))
    sw = np.broadcast_to(np.asarray(f.self_weight, dtype=np.float64), (n,)).copy()
    indptr = np.arange(n + 1, dtype=np.int64) * k
    return CsrPlan(sw, indptr, cols[order].astype(np.int32), data[order])


@pytest.mark.parametrize("n", [7, 33, 50, 64, 100])
@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
def test_a_circulant_plan_shards_as_its_entries_do(n, parts):
    # Sharded from its offsets, block by block, a circulant plan gives the same halo, sends,
    # local entries and runs as its n k entries sharded as a CSR plan.
    exp2 = static_plan(T.as_topology(T.exponential_two_graph(n)), True)
    for plan in [exp2, random_circulant(n, n + parts), random_circulant(n, 2 * n + parts)]:
        assert isinstance(plan, CircPlan)
        reference = expanded(plan, n)
        for me in range(parts):
            got, want = shard_plan(plan, n, parts, me), shard_plan(reference, n, parts, me)
            for field in dataclasses.fields(ShardPlan):
                a, b = getattr(got, field.name), getattr(want, field.name)
                if isinstance(a, dict):
                    assert list(a) == list(b), field.name
                    a, b = list(a.values()), list(b.values())
                np.testing.assert_equal(a, b, err_msg=field.name)
            assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int64


def test_circulant_planning_is_block_sized_in_memory():
    # 2 * 10^6 agents, 21 offsets: the whole plan's n k entries would take 8 n k = 336 MB
    # per int64 array; each process's share is b k entries of 12 bytes (index and weight).
    n, parts = 2_000_000, 4
    plan = static_plan(T.as_topology(T.exponential_two_graph(n)), False)
    assert isinstance(plan, CircPlan)
    k = len(plan.form.offsets)
    assert k == 21
    for me in (0, parts - 1):
        tracemalloc.start()
        try:
            shard = shard_plan(plan, n, parts, me)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        b, h = shard.size, len(shard.halo)
        assert peak < 14 * b * k + 40 * (b + h) + (1 << 20) < 8 * n * k, (peak, b, h)
        # (its speed is benchmarks/bench_shard_plan.py's: timings are no test's business)


# -- interior and boundary runs, the overlapped combine -----------------------------------


def test_runs_split_the_block_into_rows_that_read_the_halo_or_not():
    for n, parts in [(50, 3), (64, 4), (1000, 4)]:
        for name, plan in plans(n):
            for me in range(parts):
                s = shard_plan(plan, n, parts, me)
                runs = sorted(s.interior + s.boundary)
                assert runs[0][0] == 0 and runs[-1][1] == s.size, name
                assert all(z > a for a, z in runs), name
                assert all(x[1] == y[0] for x, y in zip(runs[:-1], runs[1:], strict=True)), name
                assert len(s.boundary) <= MAX_RUNS and len(s.interior) <= MAX_RUNS + 1
                for a, z in s.interior:  # interior rows read only the block
                    assert (s.indices[s.indptr[a] : s.indptr[z]] < s.size).all(), name
                reads = [
                    (s.indices[s.indptr[i] : s.indptr[i + 1]] >= s.size).any()
                    for i in range(s.size)
                ]
                marked = np.zeros(s.size, dtype=bool)
                for a, z in s.boundary:
                    marked[a:z] = True
                assert not (np.array(reads) & ~marked).any(), name
                if len(s.boundary) < MAX_RUNS:  # unmerged: exactly the rows reading the halo
                    np.testing.assert_array_equal(marked, reads, err_msg=name)


def test_a_ring_block_is_interior_but_for_its_two_ends():
    n, parts = 1000, 4
    plan = static_plan(T.as_topology(T.ring_graph(n)), False)
    s = shard_plan(plan, n, parts, 1)
    assert s.boundary == [(0, 1), (s.size - 1, s.size)]
    assert s.interior == [(1, s.size - 1)]


def test_many_boundary_runs_are_merged():
    # Every other row of the block reads the halo: the runs are merged down to MAX_RUNS.
    n, parts = 600, 2
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(np.arange(n) % 2)
    indices = np.array([(i + n // 2) % n for i in range(n) if i % 2], dtype=np.int32)
    plan = CsrPlan(np.full(n, 0.5), indptr, indices, np.full(len(indices), 0.5))
    s = shard_plan(plan, n, parts, 0)
    assert len(s.boundary) == MAX_RUNS
    x = np.random.default_rng(3).standard_normal((n, 2))
    want = apply_shard(s, x[s.lo : s.hi], x[s.halo])
    x_ext = np.ascontiguousarray(np.concatenate([x[s.lo : s.hi], x[s.halo]]))
    out = np.full_like(x_ext, np.nan)
    combine_overlapped(s, x_ext, out, ArrivingHalo(x_ext, s, x[s.halo]))
    np.testing.assert_array_equal(out[: s.size], want)


class ArrivingHalo:
    """A request whose halo lands in ``x_ext`` only when waited for, as a transfer's does."""

    def __init__(self, x_ext: np.ndarray, shard: ShardPlan, halo_rows: np.ndarray) -> None:
        self.x_ext, self.b, self.halo_rows = x_ext, shard.size, halo_rows
        self.waited = 0

    def wait(self) -> None:
        self.waited += 1
        self.x_ext[self.b :] = self.halo_rows


@pytest.mark.parametrize("n", [50, 64, 7])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_overlapped_combine_gives_apply_shards_rows(n, parts, dtype):
    x = np.random.default_rng(2).standard_normal((n, 3)).astype(dtype)
    for name, plan in [*plans(n), ("random circulant", random_circulant(n, 5))]:
        for me in range(parts):
            s = shard_plan(plan, n, parts, me)
            want = apply_shard(s, x[s.lo : s.hi], x[s.halo])
            x_ext = np.full((s.size + len(s.halo), 3), np.nan, dtype=dtype)
            x_ext[: s.size] = x[s.lo : s.hi]  # the halo rows are NaN until wait()
            out = np.full_like(x_ext, np.nan)
            request = ArrivingHalo(x_ext, s, x[s.halo])
            combine_overlapped(s, x_ext, out, request)
            assert request.waited == 1
            np.testing.assert_array_equal(out[: s.size], want, err_msg=f"{name}, {me}")


class LoopbackTransport:
    """One process's transport in a world of ``parts`` simulated in this process: sends are
    posted to a shared mailbox, receives filled from it on ``wait``."""

    def __init__(self, me: int, mailbox: dict) -> None:
        self.me, self.mailbox = me, mailbox

    def exchange(self, sends, recvs, tag):
        for buf, q in sends:
            self.mailbox[(self.me, q, tag)] = np.array(buf)
        me, mailbox = self.me, self.mailbox

        class Request:
            def wait(self) -> None:
                for buf, q in recvs:
                    buf[...] = mailbox.pop((q, me, tag))

        return Request()


@pytest.mark.parametrize("n,parts", [(50, 4), (64, 2), (33, 3)])
def test_exchange_into_fills_the_halo_rows_in_place(n, parts):
    x = np.random.default_rng(4).standard_normal((n, 2))
    for name, plan in plans(n):
        shards = [shard_plan(plan, n, parts, me) for me in range(parts)]
        mailbox: dict = {}
        buffers, requests = [], []
        for me, s in enumerate(shards):  # every process posts its sends, then all wait
            x_ext = np.zeros((s.size + len(s.halo), 2))
            x_ext[: s.size] = x[s.lo : s.hi]
            buffers.append(x_ext)
            requests.append(exchange_into(LoopbackTransport(me, mailbox), s, x_ext, tag=7))
        for s, x_ext, request in zip(shards, buffers, requests, strict=True):
            out = np.empty_like(x_ext)
            combine_overlapped(s, x_ext, out, request)
            np.testing.assert_array_equal(x_ext[s.size :], x[s.halo], err_msg=name)
            want = apply_shard(s, x[s.lo : s.hi], x[s.halo])
            np.testing.assert_array_equal(out[: s.size], want, err_msg=name)
        assert not mailbox, name
    with pytest.raises(ValueError, match="x_ext must be C-contiguous with"):
        exchange_into(LoopbackTransport(0, {}), shards[0], np.zeros((1, 2)))
