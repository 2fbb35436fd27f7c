"""The machine-level ops of the sharded simulator (see ``_sharded``): hierarchical
neighbor averaging and the machine-wide allreduce.

Blocks need not align with machines, so every machine's sum is computed by the process
holding the machine's first agent, its other agents' rows sent there (a split of the
"first agent reads its machine" pattern, like any step plan's), adding the rows in
local-rank order as one process does; then every process receives all M machine sums
(M rows: the hierarchical ops model tens to thousands of machines).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _arrays
from ..._arrays import wrap_like
from ._machines import SimMachines, check_average, check_call, stages
from ._plan import CsrPlan, apply_plan, plan_messages
from ._shardcomm import ShardComm
from ._sharded_ops import ShardedCollectives
from ._shards import TAG_MACHINE
from ._state import SimState

__all__ = ["ShardedMachines"]


class ShardedMachines(SimMachines):
    """The machine-level ops of the sharded simulator (see the module docstring); the
    decomposed allreduce is its ``collectives``' sum. What it inherits is the simulator's
    over the ``whole`` world (see :class:`~._sharded_ops.ShardedCollectives`)."""

    def __init__(
        self, whole: SimState, block: SimState, comm: ShardComm, collectives: ShardedCollectives
    ) -> None:
        super().__init__(whole)
        self._block = block
        self._comm = comm
        self._collectives = collectives
        self._members: CsrPlan | None = None  # each machine's first agent reads the others

    def _machine_totals(self, arr: np.ndarray) -> np.ndarray:
        """Every machine's sum ``(M, m)`` on every process, each added in local-rank order
        (as one process adds them) by the process holding the machine's first agent."""
        st, comm = self._block, self._comm
        k, n = st.local, st.n
        flat = np.ascontiguousarray(arr.reshape(st.rows, -1))
        if self._members is None:
            firsts = np.arange(0, n, k)
            indptr = np.zeros(n + 1, dtype=np.int64)
            indptr[firsts + 1] = k - 1
            indices = (firsts[:, None] + np.arange(1, k)).ravel().astype(np.int32)
            self._members = CsrPlan(np.zeros(n), np.cumsum(indptr), indices, np.ones(indices.size))
        shard = comm.shard(self._members)
        ext, request = comm.with_halo(flat, shard)
        request.wait()
        owned = [(-(-a // k), -(-z // k)) for a, z in comm.blocks()]  # machines by first agent
        c0, c1 = owned[comm.me]
        rows = np.arange(c0, c1) * k - st.first
        totals = np.empty((n // k, flat.shape[1]), dtype=flat.dtype)
        mine = totals[c0:c1]
        mine[...] = ext[rows]
        for j in range(k - 1):
            mine += ext[shard.indices[shard.indptr[rows] + j]]
        comm.all_to_all(mine, [totals[a:z] for a, z in owned], TAG_MACHINE)
        return totals

    def _machine_rows(self, per_machine: np.ndarray, arr: np.ndarray) -> np.ndarray:
        """The block's rows of a per-machine ``(M, m)`` value, shaped like ``arr``."""
        st = self._block
        out = st.pool.empty(arr.shape, per_machine.dtype)
        machine = np.arange(st.first, st.first + st.rows) // st.local
        out.reshape(st.rows, -1)[...] = per_machine[machine]
        return out

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_machine_weights: Any = None,
        dst_machine_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        check_call(name, enable_topo_check)
        st, world_arg = self._block, self._comm.world_arg
        src, dst = src_machine_weights, dst_machine_weights
        arr, kind = st.stacked(x, "hierarchical_neighbor_allreduce", averaging=True)
        machines, k = st.n // st.local, st.local
        plan = st.machine_step_plan(
            world_arg(self_weight, "self_weight"),
            world_arg(src, "src_machine_weights"),
            world_arg(dst, "dst_machine_weights"),
        )
        st.sent.add(arr, st.machine_sends(plan, src, dst))
        means = self._machine_totals(arr)
        np.divide(means, k, out=means)
        mixed = np.empty_like(means)
        if means.shape[1]:
            apply_plan(plan, means, mixed)
        if st.cost is not None:
            st.charge(
                "hierarchical_neighbor_allreduce",
                arr,
                machine_topology=plan_messages(plan, machines),
            )
        return wrap_like(self._machine_rows(mixed, arr), kind)

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        """Return every agent the sum (or average) over its machine's agents, charged to
        the cost meter as one process charges it."""
        _arrays.check_name(name)
        check_average(average)
        st = self._block
        arr, kind = st.stacked(x, "allreduce", averaging=average, adds=True)
        totals = self._machine_totals(arr)
        if average:
            totals = totals / st.local
        if st.cost is not None:
            st.charge("local_allreduce", arr, local_size=st.local)
        return wrap_like(self._machine_rows(totals, arr), kind)

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        factors = stages(self._block, factors)
        # sharded, the stages are one sum (1e-12 of the staged one); the cost model is charged
        # for the decomposition
        return self._collectives.reduced(x, average, name, algorithm="decomposed", factors=factors)
