"""The backend of one SPMD agent: its own rank and values; every op a rendezvous.

Each agent thread of :func:`fogsim.spmd.run` holds one :class:`SpmdBackend`, so the public
functions see what an MPI rank sees: ``rank()`` is an int, ``in_neighbor_ranks()`` this
agent's list, ops take and return this agent's own array or tensor. Every op meets the
other agents (:meth:`fogsim.spmd._world.World.meet`); the last to arrive stacks all the
agents' arguments and runs the op once on the simulator of size N, whose numbers equal the
MPI runtime's, and agent ``i`` gets row ``i`` back as the type it passed in. Queries
(ranks, neighbors, window versions) read the simulator without a rendezvous: no op runs
while any agent is outside one.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _context, _settings
from .._arrays import wrap_like
from ..backends._base import OneAgentEach, launched_size
from ..backends._parts import Capabilities
from ..backends.sim import SimBackend
from ..topology import Topology
from ._collect import agree, same_topology, stack
from ._relay import key, relay
from ._windows import SpmdWindowOps
from ._world import Execute, World

if TYPE_CHECKING:
    from .._types import ArrayLike
    from ..backends import Backend

__all__ = ["SpmdBackend"]


class SpmdBackend(OneAgentEach):
    """One agent of an SPMD run (see the module docstring).

    Created by ``fogsim.init()`` inside an agent thread of :func:`fogsim.spmd.run`
    (registered as backend ``"spmd"``); elsewhere it refuses to start. Its window ops are
    its ``windows`` part, a :class:`SpmdWindowOps` meeting the other agents; every other op
    is the run's simulator's (its ``collectives``, ``neighbors`` and ``machines`` are the
    simulator's parts), which an agent reaches through :meth:`follow`: a rendezvous that
    stacks the agents' arguments and runs it once (``_relay``).
    """

    name = "spmd"
    capabilities = Capabilities(stacked=False, windows=True)
    windows: SpmdWindowOps

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
    ) -> None:
        agent = _context.spmd_agent()
        if agent is None:
            raise ValueError(
                "backend 'spmd' runs per-agent code as the threads of fogsim.spmd.run(main, "
                "size=N) or fogsim.spmd.run_path(script, size=N); it cannot start on its own"
            )
        super().__init__(agent.world.size, agent.rank)
        self._agent = agent
        self._world: World = agent.world
        # the run's count wins over init(size=), as a launcher's does
        launched_size(size, self._n, self._rank, f"the SPMD run ({self._n} threads)")
        self.windows = SpmdWindowOps(self._world, self._rank)
        self._meet("init", local_size, _init)
        sim = self._sim  # its parts run every op but the window ops, once for all agents
        self.collectives, self.neighbors, self.machines = (
            sim.collectives,
            sim.neighbors,
            sim.machines,
        )

    def follow(self, route: Callable[[Backend], Callable[..., Any]]) -> Callable[..., Any]:
        """An op meets the other agents and runs the simulator's once (``_relay``); the
        window ops are this agent's own part's (:class:`SpmdWindowOps`)."""
        method = route(self)
        if getattr(method, "__self__", None) is self.windows:
            return method
        return relay(self._world, self._rank, route)

    def _meet(self, op: str, args: Any, execute: Execute) -> Any:
        return self._world.meet(self._rank, op, args, execute)

    @property
    def _sim(self) -> SimBackend:
        sim: SimBackend = self._world.sim
        return sim

    # -- world ----------------------------------------------------------------------------
    def local_size(self) -> int:
        return self._sim.local_size()

    def local_rank(self) -> int:
        return self._rank % self._sim.local_size()

    # -- topology -------------------------------------------------------------------------
    def set_topology(self, topology: Any, is_weighted: bool = False) -> None:
        self._meet("set_topology", (topology, is_weighted), _set_topology)

    def load_topology(self) -> Topology:
        return self._sim.load_topology()

    def is_topology_weighted(self) -> bool:
        return self._sim.is_topology_weighted()

    def in_neighbor_ranks(self) -> list[int]:
        return self._sim.load_topology().in_neighbors(self._rank)

    def out_neighbor_ranks(self) -> list[int]:
        return self._sim.load_topology().out_neighbors(self._rank)

    # -- machines -------------------------------------------------------------------------
    def set_machine_topology(self, topology: Any, is_weighted: bool = False) -> None:
        self._meet("set_machine_topology", (topology, is_weighted), _set_machine_topology)

    def load_machine_topology(self) -> Topology:
        return self._sim.load_machine_topology()

    def is_machine_topology_weighted(self) -> bool:
        return self._sim.is_machine_topology_weighted()

    def bytes_sent(self, reset: bool = False) -> int:
        # read outside a rendezvous: no op runs while this agent is outside one
        counts = self._sim.sent.counts
        sent = int(counts[self._rank])
        if reset:
            counts[self._rank] = 0
        return sent

    # -- agent-local data -----------------------------------------------------------------
    def global_view(self, x: ArrayLike) -> Any:
        return self._meet("global_view", x, _global_view)

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        if options.get("seed") is None:  # the run's seed, as the simulator takes init's
            ctx = self._agent.context
            options["seed"] = None if ctx is None else ctx.seed
        self._meet("set_asynchrony", (activation, options), _set_asynchrony)


# -- what runs once per rendezvous (the last agent to arrive runs it, see World.meet) ---------
def _init(world: World, local_sizes: Sequence[Any]) -> list[None]:
    """A fresh simulator for the run (every agent called ``fogsim.init()``)."""
    local_size = agree("init", [key(v) for v in local_sizes], "local_size")
    if local_size is None:
        local_size = world.local_size
    elif isinstance(local_size, bool) or not isinstance(local_size, numbers.Integral):
        raise TypeError(f"local_size must be an integer, got {type(local_size).__name__}")
    sim = SimBackend(size=world.size, local_size=local_size, settings=world.settings)
    if world.sim is not None:
        world.sim.close()
    world.sim = sim
    world.windows.clear()
    return [None] * world.size


def _set_topology(world: World, args: Sequence[Any]) -> list[None]:
    topologies, weighted = zip(*args, strict=True)
    is_weighted = agree("set_topology", [key(w) for w in weighted], "is_weighted")
    topo = same_topology("set_topology", topologies, "topology", world.size, original=True)
    world.sim.set_topology(topo, is_weighted)
    return [None] * world.size


def _set_machine_topology(world: World, args: Sequence[Any]) -> list[None]:
    topologies, weighted = zip(*args, strict=True)
    op = "set_machine_topology"
    is_weighted = agree(op, [key(w) for w in weighted], "is_weighted")
    machines = world.sim.machine_size()
    topo = same_topology(
        op, topologies, "machine topology", machines, original=True, check_size=False
    )
    world.sim.set_machine_topology(topo, is_weighted)
    return [None] * world.size


def _global_view(world: World, xs: Sequence[Any]) -> list[Any]:
    stacked, kinds = stack("global_view", xs)
    return [wrap_like(stacked.copy(), k) for k in kinds]


def _set_asynchrony(world: World, args: Sequence[Any]) -> list[None]:
    keys = [repr((a, sorted((k, key(v)) for k, v in o.items()))) for a, o in args]
    agree("set_asynchrony", keys, "(activation, options)")
    activation, options = args[0]
    world.sim.set_asynchrony(activation, **options)
    return [None] * world.size
