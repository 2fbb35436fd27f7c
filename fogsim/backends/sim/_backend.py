"""The vectorized simulator: all n agents in one process, values stacked on axis 0.

Agent i's value is ``x[i]``; every op runs once for all agents, and a neighbor
allreduce is one weight-matrix product ``X <- W X`` run by the kernels of
:mod:`fogsim._core` (no Python loop over agents on the per-step path).

The world is composed of parts over one :class:`~._state.SimState`: its collectives
(:class:`~._collectives.SimCollectives`), neighbor ops (:class:`~._neighbors.SimNeighbors`),
machine ops (:class:`~._machines.SimMachines`) and window ops
(:class:`~._windows.SimWindowOps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ... import _settings
from ..._arrays import wrap_like
from .._parts import Capabilities
from . import _torchops
from ._collectives import SimCollectives
from ._machines import SimMachines
from ._neighbors import SimNeighbors
from ._state import CostMeter, SimState
from ._window import SimWindow
from ._windows import MessageClock, SimWindowOps
from ._world import StackedWorld, world_size

if TYPE_CHECKING:
    from ..._types import ArrayLike

__all__ = ["SimBackend"]


class SimBackend(StackedWorld):
    """Simulate ``size`` agents in this process (see the module docstring).

    A tensor on a device other than the CPU stays there: the collectives and neighbor ops
    combine it with torch on its device (``_torchops``; injected faults copy it to the
    host). The window ops and the model of asynchrony, its ``windows`` part (a
    ``SimWindowOps``), and the decomposed allreduce take host values only.
    """

    name = "sim"
    capabilities: ClassVar[Capabilities] = Capabilities(stacked=True, windows=True, cuda=True)
    collectives: SimCollectives
    neighbors: SimNeighbors
    machines: SimMachines
    windows: SimWindowOps

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
    ) -> None:
        n, local = world_size(size, local_size, settings or _settings.Settings())
        state = SimState(
            n,
            local,
            n,
            0,
            held=f"but the world has {n} agents; stack one value per agent (see fogsim.local)",
            host_staging=False,
            machine_topology=self.load_machine_topology,
        )
        super().__init__(state)
        self.windows = SimWindowOps(n)
        self.collectives = SimCollectives(state, self.windows.barrier)
        self.neighbors = SimNeighbors(state)
        self.machines = SimMachines(state)

    def attach_cost_model(self, meter: CostMeter | None) -> None:
        """Charge every communication op to ``meter`` (None: stop); a clock (a
        ``MessageClock``: :class:`fogsim.clock.Clock`) also times the window
        ops' messages."""
        super().attach_cost_model(meter)
        self.windows.attach_clock(meter if isinstance(meter, MessageClock) else None)

    def close(self) -> None:
        self.windows.close()
        self._state.close()

    def _on_topology(self) -> None:
        super()._on_topology()
        self.windows.on_topology(self.load_topology(), self._is_weighted)

    def is_main_process(self) -> bool:
        return True

    def global_view(self, x: ArrayLike) -> Any:
        value: Any = x  # an array, a tensor (on its device), a number or a list
        if _torchops.takes(value):
            return _torchops.global_view(self._state, value)
        arr, kind = self._state.stacked(value, "global_view", averaging=False)
        return wrap_like(arr.copy(), kind)

    # -- window inspection, modelled asynchrony -------------------------------------------
    def window(self, name: str) -> SimWindow:
        """Return the window ``name``'s state, for every agent (read-only views)."""
        return self.windows.window(name)

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        """Model asynchrony from now on (see :func:`fogsim.set_asynchrony`).

        Without a seed, a fixed default (:func:`fogsim.set_asynchrony` passes the world's,
        ``init(seed=...)``, when it has one).
        """
        self.windows.set_asynchrony(activation, **options)
