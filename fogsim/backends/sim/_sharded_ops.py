"""The collectives and neighbor ops of the sharded simulator (see ``_sharded``).

Each process holds one block of the agents' rows (:class:`~._shardcomm.ShardComm` moves
rows among them): a neighbor step combines the block with the halo rows it reads, an
allreduce adds the blocks' partial sums in process order, a broadcast sends the root's
row from the process holding it, an allgather sends every block to every process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _arrays
from ..._arrays import wrap_like
from ...topology import Topology
from .._base import check_rank
from . import _torchops
from ._collectives import SimCollectives, allgathered
from ._machines import check_average, check_call
from ._neighbors import SimNeighbors, by_receiver
from ._plan import CsrPlan, plan_messages
from ._shardcomm import ShardComm
from ._sharded_device import device_combine
from ._shards import TAG_GATHER, block_of
from ._state import SimState

__all__ = ["ShardedCollectives", "ShardedNeighbors"]


class ShardedCollectives(SimCollectives):
    """The collectives of the sharded simulator (see the module docstring). Tensors on
    other devices go through host memory.

    Its own methods are the sharded forms of the simulator's, over this process's
    ``block`` of the agents; what it inherits is the simulator's over the ``whole`` world,
    which :class:`~._sharded.ShardedSimBackend` runs on the gathered world
    (:mod:`._gathered`) for an op with no sharded form.
    """

    def __init__(self, whole: SimState, block: SimState, comm: ShardComm) -> None:
        super().__init__(whole, comm.transport.barrier)
        self._block = block
        self._comm = comm

    def _sum(self, arr: np.ndarray) -> np.ndarray:
        """Return the sum over all N agents of ``arr`` (blocks summed, then added by process)."""
        comm = self._comm
        part = arr.sum(axis=0, dtype=arr.dtype)
        # rows of a 2-d array: buffers even for per-agent scalars, whose 0-d parts would
        # be read-only numpy scalars
        parts = np.empty((comm.parts, part.size), dtype=arr.dtype)
        parts[comm.me] = part.ravel()
        comm.all_to_all(parts[comm.me], list(parts), TAG_GATHER)
        total = parts[0].copy()
        for q in range(1, comm.parts):
            total += parts[q]
        whole: np.ndarray = total.reshape(part.shape)
        return whole

    def reduced(self, x: Any, average: Any, name: Any, **info: Any) -> Any:
        """The average (or sum) over all N agents of ``x``, on every agent; ``info`` goes
        to the cost model."""
        _arrays.check_name(name)
        check_average(average)
        st = self._block
        arr, kind = st.stacked(x, "allreduce", averaging=average, adds=True)
        total = self._sum(arr)
        out = st.pool.empty(arr.shape, arr.dtype)
        out[...] = total / st.n if average else total
        st.charge("allreduce", arr, **info)
        return wrap_like(out, kind)

    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.reduced(x, average, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        _arrays.check_name(name)
        st, comm = self._block, self._comm
        root = check_rank(root_rank, st.n, "root_rank")
        arr, kind = st.stacked(x, "broadcast", averaging=False)
        owner = int(block_of(np.array([root]), comm.bounds)[0])
        row = np.empty((1, *arr.shape[1:]), dtype=arr.dtype)
        others = [q for q in range(comm.parts) if q != comm.me]
        if comm.me == owner:
            row[0] = arr[root - st.first]
            comm.transport.exchange([(row, q) for q in others], [], TAG_GATHER).wait()
        else:
            comm.transport.exchange([], [(row, owner)], TAG_GATHER).wait()
        out = st.pool.empty(arr.shape, arr.dtype)
        out[...] = row[0]
        st.charge("broadcast", arr)
        return wrap_like(out, kind)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        _arrays.check_name(name)
        st = self._block
        if isinstance(x, list | tuple) and len(x) == st.rows and not _arrays.is_literal(x):
            return self._allgather_values(x)
        arr, kind = st.stacked(x, "allgather", averaging=False)
        whole = self._comm.gather_blocks(np.ascontiguousarray(arr))
        return allgathered(st, whole, kind, arr)

    def _allgather_values(self, values: Any) -> Any:
        """allgather of one value per agent given as a sequence (sizes may differ)."""
        st = self._block
        parts = [_arrays.to_numpy(v, f"x[{i}]") for i, v in enumerate(values)]
        arrays = [np.atleast_1d(a) for a, _ in parts]
        everyone = [a for block in self._comm.gather_json(arrays, "allgather") for a in block]
        shapes = {a.shape for a in everyone}
        trailing = {s[1:] for s in shapes}
        if len(trailing) > 1:
            raise ValueError(
                f"allgather: agents' values differ beyond the first dimension: {sorted(trailing)}"
            )
        if len(shapes) == 1:  # alike on every process: the stacked form, as one process has
            arr, kind = st.stacked(values, "allgather", averaging=False)
            whole = np.concatenate(everyone).reshape(st.n, *arr.shape[1:])
            return allgathered(st, whole, kind, arr)
        whole = np.concatenate(everyone)
        return [wrap_like(whole.copy(), k) for _, k in parts]

    def barrier(self) -> None:
        """Block until every process of the sharded simulation has reached the barrier."""
        self._comm.transport.barrier()


class ShardedNeighbors(SimNeighbors):
    """The neighbor ops of the sharded simulator (see the module docstring): the halo
    rows move, and the block's rows come out bit for bit as one process computes them.
    What it inherits is the simulator's over the ``whole`` world (see
    :class:`ShardedCollectives`)."""

    def __init__(self, whole: SimState, block: SimState, comm: ShardComm) -> None:
        super().__init__(whole)
        self._block = block
        self._comm = comm
        self._gather_plan: tuple[Topology, CsrPlan] | None = None

    def _world_weights(self, self_weight: Any, src: Any, dst: Any) -> tuple[Any, Any, Any]:
        """The world's per-agent weight arguments (block-sized ones gathered)."""
        world_arg = self._comm.world_arg
        return (
            world_arg(self_weight, "self_weight"),
            world_arg(src, "src_weights"),
            world_arg(dst, "dst_weights"),
        )

    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        check_call(name, enable_topo_check)
        st, op = self._block, "neighbor_allreduce"
        if _torchops.takes(x):
            t, dtype = _torchops.stacked(st, x, op, averaging=True)
            plan = st.step_plan(*self._world_weights(self_weight, src_weights, dst_weights))
            st.sent.add_tensor(t, st.step_sends(plan, src_weights, dst_weights))
            return device_combine(st, self._comm, plan, t, dtype)
        arr, kind = st.stacked(x, op, averaging=True)
        plan = st.step_plan(*self._world_weights(self_weight, src_weights, dst_weights))
        st.sent.add(arr, st.step_sends(plan, src_weights, dst_weights))
        flat = np.ascontiguousarray(arr.reshape(st.rows, -1))
        out = self._comm.combine(plan, flat) if flat.shape[1] else np.empty_like(flat)
        if st.cost is not None:
            st.charge(op, arr, topology=plan_messages(plan, st.n))
        return wrap_like(out.reshape(arr.shape), kind)

    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        _arrays.check_name(name)
        st, comm = self._block, self._comm
        arr, kind = st.stacked(x, "neighbor_allgather", averaging=False)
        if (src_ranks is None) != (dst_ranks is None):  # before any process gathers
            raise ValueError("neighbor_allgather needs both src_ranks and dst_ranks, or neither")
        if src_ranks is None:
            plan = self._static_gather_plan()
        else:
            src = comm.world_arg(src_ranks, "src_ranks")
            senders = st.senders(src, comm.world_arg(dst_ranks, "dst_ranks"))
            plan = _pattern_plan(*senders, st.n)
        st.sent.add(arr, st.sent.gather(plan.indices, st.n))
        per_agent = arr[:, None] if arr.ndim == 1 else arr
        flat = np.ascontiguousarray(per_agent.reshape(st.rows, -1))
        shard = comm.shard(plan)
        ext, request = comm.with_halo(flat, shard)
        request.wait()
        indptr = shard.indptr[: st.rows + 1]
        gathered = ext[shard.indices[: indptr[-1]]].reshape(-1, *per_agent.shape[1:])
        if st.cost is not None:  # every process charges the whole world's messages
            messages = self.gather_messages(st, plan.indptr, plan.indices)
            st.charge("neighbor_allgather", arr, topology=messages)
        return by_receiver(gathered, indptr, np.diff(plan.indptr), st.rows, kind)

    def _static_gather_plan(self) -> CsrPlan:
        topo = self._block.topology
        if self._gather_plan is None or self._gather_plan[0] is not topo:
            indptr, indices, _ = topo.offdiag_csr()
            self._gather_plan = (topo, _pattern_plan(indptr, indices, self._block.n))
        return self._gather_plan[1]


def _pattern_plan(indptr: np.ndarray, indices: np.ndarray, n: int) -> CsrPlan:
    """A plan whose entries are the edges of a pattern (what neighbor_allgather reads)."""
    return CsrPlan(np.zeros(n), indptr, indices, np.ones(len(indices)))
