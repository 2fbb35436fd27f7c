"""The world of a simulation: agents' values stacked along a leading axis in this process.

:class:`StackedWorld` is what the one-process simulator (:class:`~._backend.SimBackend`)
and the sharded one (:class:`~._sharded.ShardedSimBackend`) have in common as worlds: the
size and ranks of the agents this process stacks (all n, or one block), ``local`` and
``vmap`` over them, the neighbor ranks, the bytes sent, the cost model. Each of them
composes its own parts (collectives, neighbor ops, machine ops, windows) over one
:class:`~._state.SimState`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import _settings
from ..._jit import check_axes, compiled
from .._base import Backend
from ._sent import SentBytes
from ._stack import stack_outputs
from ._state import CostMeter, FaultModel, SimState, positive_int

__all__ = ["StackedWorld", "world_size"]


def world_size(
    size: int | None, local_size: int | None, settings: _settings.Settings
) -> tuple[int, int]:
    """Return the simulated world's ``(n, local_size)``, checked (``size`` None: the
    settings' size, else the default)."""
    if size is None:
        size = settings.size or _settings.DEFAULT_SIM_SIZE
    n = positive_int(size, "size")
    local = n if local_size is None else positive_int(local_size, "local_size")
    if n % local:
        raise ValueError(
            f"local_size={local} does not divide size={n}: simulated machines "
            "must all hold the same number of agents"
        )
    return n, local


class StackedWorld(Backend):
    """A world whose agents' values this process stacks (see the module docstring), in
    ``state``: the :class:`SimState` that a subclass's parts share (its constructor builds
    them over it)."""

    def __init__(self, state: SimState) -> None:
        super().__init__()
        self._state = state

    # -- world ----------------------------------------------------------------------------
    @property
    def size_int(self) -> int:
        return self._state.n

    def size(self) -> int:
        return self._state.n

    def rank(self) -> np.ndarray:
        st = self._state
        return np.arange(st.first, st.first + st.rows)

    def local_size(self) -> int:
        return self._state.local

    def local_rank(self) -> np.ndarray:
        return self.rank() % self._state.local

    @property
    def sent(self) -> SentBytes:
        """The bytes each stacked agent sent in the neighbor ops."""
        return self._state.sent

    def bytes_sent(self, reset: bool = False) -> np.ndarray:
        """Return each stacked agent's bytes sent in the neighbor ops (int64 per agent)."""
        return self._state.sent.read(reset)

    def _agents(self) -> range:
        """The ranks of the agents this process stacks."""
        st = self._state
        return range(st.first, st.first + st.rows)

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        self._state.on_topology(self.load_topology(), self._is_weighted)

    def _on_machine_topology(self) -> None:
        topo = self._machine_topology
        assert topo is not None
        self._state.on_machine_topology(topo, self._machine_weighted)

    def in_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.in_neighbors(i) for i in self._agents()]

    def out_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.out_neighbors(i) for i in self._agents()]

    def in_neighbor_machine_ranks(self) -> list[list[int]]:
        topo, k = self.load_machine_topology(), self._state.local
        return [topo.in_neighbors(i // k) for i in self._agents()]

    def out_neighbor_machine_ranks(self) -> list[list[int]]:
        topo, k = self.load_machine_topology(), self._state.local
        return [topo.out_neighbors(i // k) for i in self._agents()]

    # -- agent-local data -----------------------------------------------------------------
    def local(self, fn: Callable[[int], Any], jit: bool = False) -> Any:
        if not callable(fn):
            raise TypeError(f"local() takes a function of the rank, got {type(fn).__name__}")
        st = self._state
        first, rows = st.first, st.rows
        if jit:
            value = compiled(fn, "local").local_stacked(rows, first)
        else:
            value = stack_outputs([fn(r) for r in range(first, first + rows)])
        for part in value if isinstance(value, tuple) else (value,):
            if hasattr(part, "shape") and len(part.shape):  # an array or a tensor
                st.shapes.made(part)
        return value

    def vmap(
        self,
        fn: Callable[..., Any],
        in_axes: int | None | Sequence[int | None] = 0,
        jit: bool = False,
    ) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"vmap() takes a function, got {type(fn).__name__}")
        n = self._state.rows
        jitted = compiled(fn, "vmap") if jit else None

        def per_agent(*args: Any) -> Any:
            axes = check_axes(in_axes, len(args))
            if jitted is not None:
                return jitted.stacked(n, args, axes)
            for k, (a, ax) in enumerate(zip(args, axes, strict=True)):
                if ax == 0 and len(a) != n:
                    raise ValueError(
                        f"argument {k} has {len(a)} entries on its agent axis, expected {n}"
                    )
            return stack_outputs(
                [
                    fn(*[a[i] if ax == 0 else a for a, ax in zip(args, axes, strict=True)])
                    for i in range(n)
                ]
            )

        per_agent.__wrapped__ = fn  # type: ignore[attr-defined]
        per_agent.__doc__ = fn.__doc__
        return per_agent

    # -- fault injection (fogsim.faults), modelled communication time -----------------------
    @property
    def faults(self) -> FaultModel | None:
        """The :class:`fogsim.faults.Faults` applied to neighbor averaging, or None."""
        return self._state.faults

    def set_faults(self, faults: FaultModel | None) -> None:
        """Apply ``faults`` to every neighbor_allreduce from now on (None: no faults)."""
        self._state.faults = faults

    def attach_cost_model(self, meter: CostMeter | None) -> None:
        """Charge every communication op to ``meter`` (None: stop); see fogsim.hierarchy."""
        self._state.cost = meter
