"""The simulator's machine-level ops: hierarchical neighbor averaging, the machine-local
allreduce and the decomposed allreduce.

Machine m holds agents ``m * k .. (m + 1) * k - 1`` (``k`` = local_size, which the world
checked divides n): a machine's rows are one slice of the stacked array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import _arrays
from ..._arrays import wrap_like
from .._decomposed import check_factors, default_factors, staged_sum
from .._parts import Machines
from .._stacking import AgentSelfWeight, AgentValue, CallName, MachineWeights
from . import _torchops
from ._plan import apply_plan, plan_messages
from ._state import SimState

__all__ = ["SimMachines", "check_average", "check_call", "stages"]


def check_call(name: Any, enable_topo_check: Any) -> None:
    """The checks of a neighbor op's ``name`` and ``enable_topo_check``."""
    _arrays.check_name(name)
    if not isinstance(enable_topo_check, bool):
        raise TypeError("enable_topo_check must be a bool")


def check_average(average: Any) -> None:
    """Raise a TypeError unless ``average`` is a bool."""
    if not isinstance(average, bool):
        raise TypeError(f"average must be a bool, got {type(average).__name__}")


def stages(state: SimState, factors: tuple[int, ...] | None) -> tuple[int, ...]:
    """Return the decomposed allreduce's stages: ``factors`` checked, or the default ones."""
    if factors is None:
        return default_factors(state.n, state.local)
    return check_factors(factors, state.n)


class SimMachines(Machines):
    """The machine-level ops of all ``n`` agents stacked in this process (see the module
    docstring)."""

    def __init__(self, state: SimState) -> None:
        self._state = state

    def check(self, op: str) -> None:
        """Every simulated machine holds ``local_size`` agents: nothing to refuse."""

    def _machine_mean(self, arr: np.ndarray) -> np.ndarray:
        """Each machine's average, its agents summed in local-rank order, ``(M, ...)``."""
        st = self._state
        k = st.local
        grid = arr.reshape(st.n // k, k, *arr.shape[1:])
        total = grid[:, 0].copy()
        for j in range(1, k):
            total += grid[:, j]
        mean: np.ndarray = np.divide(total, k, out=total)
        return mean

    def hierarchical_neighbor_allreduce(
        self,
        x: AgentValue,
        self_weight: AgentSelfWeight = None,
        src_machine_weights: MachineWeights = None,
        dst_machine_weights: MachineWeights = None,
        enable_topo_check: bool = True,
        name: CallName = None,
    ) -> Any:
        check_call(name, enable_topo_check)
        st, op = self._state, "hierarchical_neighbor_allreduce"
        src, dst = src_machine_weights, dst_machine_weights
        if _torchops.takes(x):
            t, dtype = _torchops.stacked(st, x, op, averaging=True)
            plan = st.machine_step_plan(self_weight, src, dst)
            st.sent.add_tensor(t, st.machine_sends(plan, src, dst))
            return _torchops.hierarchical_neighbor_allreduce(st, t, dtype, plan)
        arr, kind = st.stacked(x, op, averaging=True)
        machines, k = st.n // st.local, st.local
        plan = st.machine_step_plan(self_weight, src, dst)
        st.sent.add(arr, st.machine_sends(plan, src, dst))
        mean = np.ascontiguousarray(self._machine_mean(arr).reshape(machines, -1))
        mixed = np.empty_like(mean)
        if mean.shape[1]:
            apply_plan(plan, mean, mixed)
        out = st.pool.empty(arr.shape, arr.dtype)
        out.reshape(machines, k, -1)[...] = mixed[:, None, :]
        if st.cost is not None:
            st.charge(op, arr, machine_topology=plan_messages(plan, machines))
        return wrap_like(out, kind)

    def local_allreduce(self, x: AgentValue, average: bool = True, name: CallName = None) -> Any:
        """Return every agent the sum (or average) over its machine's agents; the cost
        meter is charged a ``local_allreduce`` among ``local_size`` agents per machine."""
        _arrays.check_name(name)
        check_average(average)
        st = self._state
        if _torchops.takes(x):
            return _torchops.local_allreduce(st, x, average)
        arr, kind = st.stacked(x, "allreduce", averaging=average, adds=True)
        k = st.local
        grid = arr.reshape(st.n // k, k, *arr.shape[1:])
        total = grid.sum(axis=1, dtype=arr.dtype)
        out = st.pool.empty(arr.shape, arr.dtype)
        out.reshape(grid.shape)[...] = (total / k if average else total)[:, None]
        if st.cost is not None:
            st.charge("local_allreduce", arr, local_size=k)
        return wrap_like(out, kind)

    def decomposed_allreduce(
        self, x: AgentValue, average: bool, name: CallName, factors: tuple[int, ...] | None
    ) -> Any:
        _arrays.check_name(name)
        check_average(average)
        st = self._state
        factors = stages(st, factors)
        arr, kind = st.stacked(x, "allreduce", averaging=average, adds=True)
        total = staged_sum(arr, factors)
        out = st.pool.empty(arr.shape, arr.dtype)
        out[...] = total / st.n if average else total
        st.charge("allreduce", arr, algorithm="decomposed", factors=factors)
        return wrap_like(out, kind)
