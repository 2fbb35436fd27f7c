"""The machine-level ops of the sharded simulator (see ``_sharded``): hierarchical
neighbor averaging and the machine-wide allreduce.

Blocks need not align with machines, so every machine's sum is computed by the process
holding the machine's first agent, its other agents' rows sent there (a split of the
"first agent reads its machine" pattern, like any step plan's), adding the rows in
local-rank order as one process does; then every process receives all M machine sums
(M rows: the hierarchical ops model tens to thousands of machines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _arrays
from ..._arrays import wrap_like
from ...topology import Topology
from ._plan import CsrPlan, Plan, apply_plan, plan_messages
from ._sent import SentBytes
from ._shards import TAG_MACHINE, ShardPlan

__all__ = ["ShardedMachines"]


class ShardedMachines:
    """The machine-level ops, for :class:`~._sharded.ShardedSimBackend` (a mixin: the
    attributes below are the backend's)."""

    _n: int
    _rows: int
    _first: int
    _local: int
    _me: int
    _members: CsrPlan | None
    _machine_plan: Any
    _machine_plan_of: Topology | None
    _machine_weighted: bool
    _cost: Any
    _pool: Any
    sent: SentBytes

    if TYPE_CHECKING:  # the backend's methods this part uses (stubs would shadow them)

        def _blocks(self) -> list[tuple[int, int]]: ...
        def _shard(self, plan: Plan) -> ShardPlan: ...
        def _with_halo(self, flat: np.ndarray, shard: ShardPlan) -> tuple[np.ndarray, Any]: ...
        def _all_to_all(self, mine: np.ndarray, parts: list[np.ndarray], tag: int) -> None: ...
        def _world_arg(self, value: Any, argname: str) -> Any: ...
        def _stacked(self, x: Any, op: str, averaging: bool, adds: bool | None = None) -> Any: ...
        def _charge(self, op: str, arr: np.ndarray, **info: Any) -> None: ...
        def rank(self) -> np.ndarray: ...
        def _machine_step_plan(self, self_weight: Any, src: Any, dst: Any) -> Any: ...
        def _machine_sends(self, plan: Any, src: Any, dst: Any) -> np.ndarray: ...

    # -- machine level --------------------------------------------------------------------
    def _machine_totals(self, arr: np.ndarray) -> np.ndarray:
        """Every machine's sum ``(M, m)`` on every process, each added in local-rank order
        (as one process adds them) by the process holding the machine's first agent."""
        k, n = self._local, self._n
        flat = np.ascontiguousarray(arr.reshape(self._rows, -1))
        if self._members is None:
            firsts = np.arange(0, n, k)
            indptr = np.zeros(n + 1, dtype=np.int64)
            indptr[firsts + 1] = k - 1
            indices = (firsts[:, None] + np.arange(1, k)).ravel().astype(np.int32)
            self._members = CsrPlan(np.zeros(n), np.cumsum(indptr), indices, np.ones(indices.size))
        shard = self._shard(self._members)
        ext, request = self._with_halo(flat, shard)
        request.wait()
        owned = [(-(-a // k), -(-z // k)) for a, z in self._blocks()]  # machines by first agent
        c0, c1 = owned[self._me]
        rows = np.arange(c0, c1) * k - self._first
        totals = np.empty((n // k, flat.shape[1]), dtype=flat.dtype)
        mine = totals[c0:c1]
        mine[...] = ext[rows]
        for j in range(k - 1):
            mine += ext[shard.indices[shard.indptr[rows] + j]]
        self._all_to_all(mine, [totals[a:z] for a, z in owned], TAG_MACHINE)
        return totals

    def _machine_rows(self, per_machine: np.ndarray, arr: np.ndarray) -> np.ndarray:
        """The block's rows of a per-machine ``(M, m)`` value, shaped like ``arr``."""
        out = self._pool.empty(arr.shape, per_machine.dtype)
        out.reshape(self._rows, -1)[...] = per_machine[self.rank() // self._local]
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
        _arrays.check_name(name)
        if not isinstance(enable_topo_check, bool):
            raise TypeError("enable_topo_check must be a bool")
        op = "hierarchical_neighbor_allreduce"
        arr, kind = self._stacked(x, op, averaging=True)
        machines, k = self._n // self._local, self._local
        plan = self._machine_step_plan(
            self._world_arg(self_weight, "self_weight"),
            self._world_arg(src_machine_weights, "src_machine_weights"),
            self._world_arg(dst_machine_weights, "dst_machine_weights"),
        )
        self.sent.add(arr, self._machine_sends(plan, src_machine_weights, dst_machine_weights))
        means = self._machine_totals(arr)
        np.divide(means, k, out=means)
        mixed = np.empty_like(means)
        if means.shape[1]:
            apply_plan(plan, means, mixed)
        if self._cost is not None:
            self._charge(op, arr, machine_topology=plan_messages(plan, machines))
        return wrap_like(self._machine_rows(mixed, arr), kind)

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        totals = self._machine_totals(arr)
        if average:
            totals = totals / self._local
        return wrap_like(self._machine_rows(totals, arr), kind)
