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
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _arrays, _context, _settings
from .._arrays import wrap_like
from ..backends._base import OneAgentEach, launched_size
from ..backends._parts import Capabilities, Collectives, Machines, Neighbors
from ..backends.sim import SimBackend
from ..topology import Topology
from ._collect import (
    agree,
    arrays,
    check_alike,
    label,
    per_agent_weights,
    rows,
    same_topology,
    self_weights,
    stack,
)
from ._windows import SpmdWindowOps
from ._world import Execute, World

__all__ = ["SpmdBackend"]


def _key(value: Any) -> Any:
    """A hashable stand-in of an argument, for comparing agents' arguments."""
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


class _Agent:
    """What an SPMD part needs: the run's world and this agent's rank."""

    __slots__ = ("world", "rank")

    def __init__(self, world: World, rank: int) -> None:
        self.world = world
        self.rank = rank

    def meet(self, op: str, args: Any, execute: Execute) -> Any:
        return self.world.meet(self.rank, op, args, execute)


class SpmdCollectives(Collectives):
    """One agent's collectives: each a rendezvous that runs the simulator's op once."""

    def __init__(self, agent: _Agent) -> None:
        self._agent = agent

    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        _arrays.check_name(name)
        return self._agent.meet(label("allreduce", name), (x, average), _allreduce)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        _arrays.check_name(name)
        return self._agent.meet(label("allgather", name), x, _allgather)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        _arrays.check_name(name)
        return self._agent.meet(label("broadcast", name), (x, root_rank), _broadcast)

    def barrier(self) -> None:
        self._agent.meet("barrier", None, _barrier)


class SpmdNeighbors(Neighbors):
    """One agent's neighbor ops: each a rendezvous that runs the simulator's op once."""

    def __init__(self, agent: _Agent) -> None:
        self._agent = agent

    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        _arrays.check_name(name)
        args = (x, self_weight, src_weights, dst_weights, enable_topo_check)
        return self._agent.meet(label("neighbor_allreduce", name), args, _neighbor_allreduce)

    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        _arrays.check_name(name)
        args = (x, src_ranks, dst_ranks)
        return self._agent.meet(label("neighbor_allgather", name), args, _neighbor_allgather)


class SpmdMachines(Machines):
    """One agent's machine-level ops: each a rendezvous that runs the simulator's op once."""

    def __init__(self, agent: _Agent) -> None:
        self._agent = agent

    def check(self, op: str) -> None:
        self._agent.world.sim.machines.check(op)

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_machine_weights: Any,
        dst_machine_weights: Any,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any:
        _arrays.check_name(name)
        args = (x, self_weight, src_machine_weights, dst_machine_weights, enable_topo_check)
        op = label("hierarchical_neighbor_allreduce", name)
        return self._agent.meet(op, args, _hierarchical_neighbor_allreduce)

    def local_allreduce(self, x: Any, average: bool, name: str | None) -> Any:
        _arrays.check_name(name)
        op = label("allreduce(is_hierarchical_local=True)", name)
        return self._agent.meet(op, (x, average), _local_allreduce)

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        _arrays.check_name(name)
        op = label("allreduce(algorithm='decomposed')", name)
        return self._agent.meet(op, (x, average, factors), _decomposed_allreduce)


class SpmdBackend(OneAgentEach):
    """One agent of an SPMD run (see the module docstring).

    Created by ``fogsim.init()`` inside an agent thread of :func:`fogsim.spmd.run`
    (registered as backend ``"spmd"``); elsewhere it refuses to start. Its window ops are
    its ``windows`` part, a :class:`SpmdWindowOps` meeting the other agents the same way, as
    do its other parts (:class:`SpmdCollectives`, :class:`SpmdNeighbors`,
    :class:`SpmdMachines`).
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
        super().__init__()
        agent = _context.spmd_agent()
        if agent is None:
            raise ValueError(
                "backend 'spmd' runs per-agent code as the threads of fogsim.spmd.run(main, "
                "size=N) or fogsim.spmd.run_path(script, size=N); it cannot start on its own"
            )
        self._agent = agent
        self._world: World = agent.world
        self._rank: int = agent.rank
        self._n: int = self._world.size
        # the run's count wins over init(size=), as a launcher's does
        launched_size(size, self._n, self._rank, f"the SPMD run ({self._n} threads)")
        agent_parts = _Agent(self._world, self._rank)
        self.collectives = SpmdCollectives(agent_parts)
        self.neighbors = SpmdNeighbors(agent_parts)
        self.machines = SpmdMachines(agent_parts)
        self.windows = SpmdWindowOps(self._world, self._rank)
        self._meet("init", local_size, _init)

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
    def global_view(self, x: Any) -> Any:
        return self._meet("global_view", x, _global_view)

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        if options.get("seed") is None:  # the run's seed, as the simulator takes init's
            ctx = self._agent.context
            options["seed"] = None if ctx is None else ctx.seed
        self._meet("set_asynchrony", (activation, options), _set_asynchrony)


# -- what runs once per rendezvous (the last agent to arrive runs it, see World.meet) ---------
def _init(world: World, local_sizes: Sequence[Any]) -> list[None]:
    """A fresh simulator for the run (every agent called ``fogsim.init()``)."""
    local_size = agree("init", [_key(v) for v in local_sizes], "local_size")
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
    is_weighted = agree("set_topology", [_key(w) for w in weighted], "is_weighted")
    topo = same_topology("set_topology", topologies, "topology", world.size, original=True)
    world.sim.set_topology(topo, is_weighted)
    return [None] * world.size


def _set_machine_topology(world: World, args: Sequence[Any]) -> list[None]:
    topologies, weighted = zip(*args, strict=True)
    op = "set_machine_topology"
    is_weighted = agree(op, [_key(w) for w in weighted], "is_weighted")
    machines = world.sim.machine_size()
    topo = same_topology(
        op, topologies, "machine topology", machines, original=True, check_size=False
    )
    world.sim.set_machine_topology(topo, is_weighted)
    return [None] * world.size


def _allreduce(world: World, args: Sequence[Any]) -> list[Any]:
    xs, averages = zip(*args, strict=True)
    average = agree("allreduce", [_key(a) for a in averages], "average")
    stacked, kinds = stack("allreduce", xs)
    return rows(world.sim.collectives.allreduce(stacked, average), kinds)


def _local_allreduce(world: World, args: Sequence[Any]) -> list[Any]:
    xs, averages = zip(*args, strict=True)
    average = agree("allreduce", [_key(a) for a in averages], "average")
    stacked, kinds = stack("allreduce", xs)
    return rows(world.sim.machines.local_allreduce(stacked, average, None), kinds)


def _decomposed_allreduce(world: World, args: Sequence[Any]) -> list[Any]:
    xs, averages, factors = zip(*args, strict=True)
    average = agree("allreduce", [_key(a) for a in averages], "average")
    agree("allreduce", [_key(f) for f in factors], "factors")
    stacked, kinds = stack("allreduce", xs)
    return rows(world.sim.machines.decomposed_allreduce(stacked, average, None, factors[0]), kinds)


def _broadcast(world: World, args: Sequence[Any]) -> list[Any]:
    xs, roots = zip(*args, strict=True)
    root = agree("broadcast", [_key(r) for r in roots], "root_rank")
    stacked, kinds = stack("broadcast", xs)
    return rows(world.sim.collectives.broadcast(stacked, root), kinds)


def _allgather(world: World, xs: Sequence[Any]) -> list[Any]:
    arrs, kinds = arrays("allgather", xs)
    arrs = [a.reshape(1) if a.ndim == 0 else a for a in arrs]
    check_alike(
        "allgather",
        arrs,
        shape_of=lambda a: a.shape[1:],
        what="dtype and shape beyond the first dimension",
    )
    if len({a.shape for a in arrs}) == 1:
        return rows(world.sim.collectives.allgather(np.stack(arrs)), kinds)
    return rows(world.sim.collectives.allgather(arrs), kinds)  # first dimensions differ


def _global_view(world: World, xs: Sequence[Any]) -> list[Any]:
    stacked, kinds = stack("global_view", xs)
    return [wrap_like(stacked.copy(), k) for k in kinds]


def _weights(
    op: str, args: Sequence[Any], n: int, machine: bool = False
) -> tuple[np.ndarray, list[Any], Any, Any, Any, bool]:
    """The stacked values and weights of a neighbor_allreduce (or hierarchical) call."""
    xs, sws, srcs, dsts, checks = zip(*args, strict=True)
    src_name, dst_name = (
        ("src_machine_weights", "dst_machine_weights")
        if machine
        else ("src_weights", "dst_weights")
    )
    check = agree(op, [_key(c) for c in checks], "enable_topo_check")
    stacked, kinds = stack(op, xs)
    sw = self_weights(op, sws)
    src = per_agent_weights(op, srcs, src_name, n)
    dst = per_agent_weights(op, dsts, dst_name, n)
    return stacked, kinds, sw, src, dst, check


def _neighbor_allreduce(world: World, args: Sequence[Any]) -> list[Any]:
    stacked, kinds, sw, src, dst, check = _weights("neighbor_allreduce", args, world.size)
    return rows(world.sim.neighbors.neighbor_allreduce(stacked, sw, src, dst, check), kinds)


def _hierarchical_neighbor_allreduce(world: World, args: Sequence[Any]) -> list[Any]:
    op = "hierarchical_neighbor_allreduce"
    machines = world.sim.machine_size()
    stacked, kinds, sw, src, dst, check = _weights(op, args, machines, machine=True)
    out = world.sim.machines.hierarchical_neighbor_allreduce(stacked, sw, src, dst, check, None)
    return rows(out, kinds)


def _neighbor_allgather(world: World, args: Sequence[Any]) -> list[Any]:
    op = "neighbor_allgather"
    xs, srcs, dsts = zip(*args, strict=True)
    stacked, kinds = stack(op, xs)
    src = per_agent_weights(op, srcs, "src_ranks", world.size, allow_matrix=False)
    dst = per_agent_weights(op, dsts, "dst_ranks", world.size, allow_matrix=False)
    return rows(world.sim.neighbors.neighbor_allgather(stacked, src, dst), kinds)


def _barrier(world: World, args: Sequence[Any]) -> list[None]:
    world.sim.collectives.barrier()
    return [None] * world.size


def _set_asynchrony(world: World, args: Sequence[Any]) -> list[None]:
    keys = [repr((a, sorted((k, _key(v)) for k, v in o.items()))) for a, o in args]
    agree("set_asynchrony", keys, "(activation, options)")
    activation, options = args[0]
    world.sim.set_asynchrony(activation, **options)
    return [None] * world.size
