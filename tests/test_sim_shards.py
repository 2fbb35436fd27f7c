"""Sharding a step's plan over P blocks: each block's rows bit for bit as one process's.

The plans come from fogsim's own topologies (circulant and general CSR, uniform and given
weights, per-agent self weights); each block combines its rows from its own values and the
halo rows the other blocks send, and the result is compared with ``apply_plan`` over all
agents with ``assert_array_equal``. N that P does not divide is included.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fogsim import topology as T
from fogsim.backends.sim._plan import CsrPlan, apply_plan, static_plan
from fogsim.backends.sim._shards import apply_shard, block_bounds, shard_plan


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
