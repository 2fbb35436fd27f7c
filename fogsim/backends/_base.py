"""The interface every backend implements; the public API dispatches to it.

A backend instance *is* one world: it knows its size and ranks, holds the topology, and
runs the ops. The simulator (``sim``) holds all agents with values stacked along a leading
axis; the distributed runtimes hold one agent per process. Method signatures are those of
the public functions in :mod:`fogsim`, so a script runs unchanged on any backend.
"""

from __future__ import annotations

import abc
import numbers
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .. import _weightcheck
from .._jit import check_axes, compiled
from ..topology import Topology, as_topology
from ._parts import Capabilities, Collectives, Machines, Neighbors
from ._windows import NoWindows, WindowPart

if TYPE_CHECKING:
    from .._types import ArrayLike, TopologyLike

__all__ = ["Backend", "NoWindows", "OneAgentEach", "WindowPart", "check_rank", "launched_size"]


def launched_size(size: Any, n: int, rank: int, launcher: str) -> None:
    """Apply the rule for ``init(size=)`` under a launcher: the launcher's count wins.

    ``size`` (None, or what ``init`` was given) is checked like the simulator's; when it
    differs from the ``n`` processes or threads that ``launcher`` started, rank 0 prints a
    one-line notice to stderr and the run goes on with ``n``. So a script that calls
    ``init(size=8)`` simulates 8 agents and runs unchanged under ``fogrun -np 4``.
    """
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise TypeError(f"size must be an integer, got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    if size != n and rank == 0:
        print(
            f"fogsim: init(size={size}) ignored: {launcher} started {n} agents; size= "
            "sets the number of simulated agents only",
            file=sys.stderr,
            flush=True,
        )


def check_rank(value: object, n: int, argname: str) -> int:
    """Return ``value`` as a rank of a world of ``n`` agents, or raise naming ``argname``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer rank, got {type(value).__name__}")
    rank = int(value)
    if not 0 <= rank < n:
        raise ValueError(f"{argname}={value} is out of range for {n} agents")
    return rank


class Backend(abc.ABC):
    """Base class of the backends (see the module docstring)."""

    #: Registered name, e.g. ``"sim"``.
    name: ClassVar[str]

    #: What this world can do (see :class:`~fogsim.backends.Capabilities`).
    capabilities: ClassVar[Capabilities]

    #: The parts that run the ops (see :mod:`fogsim.backends`), each built by the
    #: backend's constructor from what it needs; ``windows`` is ``NoWindows`` where the
    #: runtime has none.
    collectives: Collectives
    neighbors: Neighbors
    machines: Machines
    windows: WindowPart

    def __init__(self) -> None:
        self.windows = NoWindows(self.name)
        self._topology: Topology | None = None
        self._is_weighted = False
        self._machine_topology: Topology | None = None  # default made on first use
        self._machine_weighted = False

    # -- world ----------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def size_int(self) -> int:
        """Number of agents as a Python int."""

    @abc.abstractmethod
    def size(self) -> int:
        """Return the number of agents."""

    @abc.abstractmethod
    def rank(self) -> Any:
        """Return this agent's rank (all ranks, stacked, in simulation)."""

    @abc.abstractmethod
    def local_size(self) -> int:
        """Return the number of agents on this machine."""

    @abc.abstractmethod
    def local_rank(self) -> Any:
        """Return the rank within the machine (stacked in simulation)."""

    def shard_index(self) -> int | None:
        """This process's shard of a world split over processes (None: not split)."""
        return None

    def follow(self, route: Callable[[Backend], Callable[..., Any]]) -> Callable[..., Any]:
        """Return what runs the op that ``route`` reaches (a public op's route, see
        ``fogsim._routing``) in this world: the part method itself, ``route(self)``.

        A world whose parts are not where its agents' calls meet overrides this: an SPMD
        agent's ops meet the other agents and run the simulator's once; the sharded
        simulator runs the simulator's op on the gathered world where it has no sharded
        form of it. The public ops follow each route once per world and keep the result.
        """
        return route(self)

    def check_rank(self, value: object, argname: str) -> int:
        """Return ``value`` as a rank in range, or raise naming ``argname``."""
        return check_rank(value, self.size_int, argname)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources held by the backend."""

    def bytes_sent(self, reset: bool = False) -> Any:
        """Return the bytes this world's agents sent in the neighbor ops (see
        :func:`fogsim.bytes_sent`); ``reset``: count from zero again."""
        raise NotImplementedError(f"backend {self.name!r} does not count bytes sent")

    # -- topology -------------------------------------------------------------------------
    def set_topology(self, topology: TopologyLike, is_weighted: bool = False) -> None:
        """Validate and install ``topology``; then let the backend derive what it needs."""
        if not isinstance(is_weighted, bool):
            raise TypeError(f"is_weighted must be a bool, got {type(is_weighted).__name__}")
        windows = self.windows.win_names()
        if windows:
            raise ValueError(
                f"set_topology: windows {windows} exist; a window's buffers follow the "
                "topology it was created on, so win_free() them first"
            )
        if callable(topology) and not isinstance(topology, Topology):
            topology = topology(self.size_int)
        topo = as_topology(topology, size=self.size_int, argname="topology")
        old = self._topology, self._is_weighted
        self._topology, self._is_weighted = topo, is_weighted
        try:
            self._on_topology()
        except BaseException:  # refused (e.g. the ranks disagree): keep the agreed one
            self._topology, self._is_weighted = old
            raise
        if is_weighted:  # after the agreement: the same on every rank
            self._check_weights(
                "set_topology", topo, old, "_topology", "_is_weighted", self._on_topology
            )

    def _check_weights(
        self,
        op: str,
        topo: Topology,
        old: tuple[Topology | None, bool],
        topology_attr: str,
        weighted_attr: str,
        on_change: Callable[[], None],
    ) -> None:
        """Check a weighted topology just set; under FOGSIM_CHECK_WEIGHTS=error, put the old
        one (``old``: topology, is_weighted) back before the ValueError goes on."""
        if not _weightcheck.enabled():
            return
        try:
            _weightcheck.check_topology(op, topo)
        except ValueError:
            setattr(self, topology_attr, old[0])
            setattr(self, weighted_attr, old[1])
            if old[0] is not None:
                on_change()
            raise

    def _on_topology(self) -> None:  # noqa: B027 - optional hook
        """Derive backend state from the new topology (communicators, cached plans)."""

    def load_topology(self) -> Topology:
        """Return the topology in use."""
        assert self._topology is not None
        return self._topology

    def is_topology_weighted(self) -> bool:
        """Return whether ``set_topology`` was asked to use the topology's weights."""
        return self._is_weighted

    @abc.abstractmethod
    def in_neighbor_ranks(self) -> Any:
        """Return the ranks this agent receives from (per agent in simulation)."""

    @abc.abstractmethod
    def out_neighbor_ranks(self) -> Any:
        """Return the ranks this agent sends to (per agent in simulation)."""

    # -- machines -------------------------------------------------------------------------
    # Machine m holds ranks m * local_size .. (m + 1) * local_size - 1; every machine holds
    # the same number of agents (the machines part's ``check`` raises otherwise).
    def machine_size(self) -> int:
        """Return the number of machines."""
        self.machines.check("machine_size")
        return self.size_int // self.local_size()

    def machine_rank(self) -> Any:
        """Return this agent's machine (stacked in simulation)."""
        self.machines.check("machine_rank")
        return self.rank() // self.local_size()

    def set_machine_topology(self, topology: TopologyLike, is_weighted: bool = False) -> None:
        """Validate and install the topology among machines (for the hierarchical ops)."""
        if not isinstance(is_weighted, bool):
            raise TypeError(f"is_weighted must be a bool, got {type(is_weighted).__name__}")
        machines = self.machine_size()
        if callable(topology) and not isinstance(topology, Topology):
            topology = topology(machines)
        topo = as_topology(topology, argname="machine topology")
        if topo.size != machines:
            raise ValueError(
                f"the machine topology has {topo.size} nodes but there are {machines} machines "
                f"({self.size_int} agents, local_size {self.local_size()})"
            )
        old = self._machine_topology, self._machine_weighted
        self._machine_topology, self._machine_weighted = topo, is_weighted
        try:
            self._on_machine_topology()
        except BaseException:  # refused: keep the agreed one
            self._machine_topology, self._machine_weighted = old
            raise
        if is_weighted:
            self._check_weights(
                "set_machine_topology",
                topo,
                old,
                "_machine_topology",
                "_machine_weighted",
                self._on_machine_topology,
            )

    def _on_machine_topology(self) -> None:  # noqa: B027 - optional hook
        """Derive backend state from the new machine topology."""

    def load_machine_topology(self) -> Topology:
        """Return the machine topology (exponential-2 over the machines unless set)."""
        if self._machine_topology is None:
            from ..topology import exponential_two_graph

            self.set_machine_topology(exponential_two_graph)
        assert self._machine_topology is not None
        return self._machine_topology

    def is_machine_topology_weighted(self) -> bool:
        """Return whether the hierarchical ops use the machine topology's own weights."""
        return self._machine_weighted

    def in_neighbor_machine_ranks(self) -> Any:
        """Return the machines this agent's machine receives from (per agent in simulation)."""
        return self.load_machine_topology().in_neighbors(int(self.machine_rank()))

    def out_neighbor_machine_ranks(self) -> Any:
        """Return the machines this agent's machine sends to (per agent in simulation)."""
        return self.load_machine_topology().out_neighbors(int(self.machine_rank()))

    # -- agent-local data -----------------------------------------------------------------
    @abc.abstractmethod
    def local(self, fn: Callable[[int], Any], jit: bool = False) -> Any:
        """Return the agent-local value ``fn(rank)`` (stacked over agents in simulation);
        ``jit``: compiled with numba (see `fogsim._jit`)."""

    @abc.abstractmethod
    def vmap(
        self,
        fn: Callable[..., Any],
        in_axes: int | None | Sequence[int | None] = 0,
        jit: bool = False,
    ) -> Callable[..., Any]:
        """Return ``fn`` applied per agent (over the stacked axis in simulation);
        ``jit``: compiled with numba (see `fogsim._jit`)."""

    @abc.abstractmethod
    def is_main_process(self) -> bool:
        """Return whether this process should print and write files for the job."""

    @abc.abstractmethod
    def global_view(self, x: ArrayLike) -> Any:
        """Return every agent's ``x`` stacked along a new leading axis, on every agent."""

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        """Model asynchrony (simulators); real runtimes check the arguments, then ignore them.

        Their processes are asynchronous already.
        """
        from .._asynchrony import Asynchrony

        Asynchrony(self.size_int, activation, **options)


class OneAgentEach(Backend):
    """Base class of the backends whose processes (or threads) are one agent each (MPI,
    torch, SPMD): ``size``, ``rank``, ``local``, ``vmap`` and ``is_main_process`` from the
    world's ``size`` and this agent's ``rank``, which a subclass's constructor passes."""

    def __init__(self, size: int, rank: int) -> None:
        super().__init__()
        self._n = size
        self._rank = rank

    @property
    def size_int(self) -> int:
        return self._n

    def size(self) -> int:
        return self._n

    def rank(self) -> int:
        return self._rank

    def local(self, fn: Callable[[int], Any], jit: bool = False) -> Any:
        if not callable(fn):
            raise TypeError(f"local() takes a function of the rank, got {type(fn).__name__}")
        if jit:
            return compiled(fn, "local").call(self._rank)
        return fn(self._rank)

    def vmap(
        self,
        fn: Callable[..., Any],
        in_axes: int | None | Sequence[int | None] = 0,
        jit: bool = False,
    ) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"vmap() takes a function, got {type(fn).__name__}")
        if not jit:
            return fn
        jitted = compiled(fn, "vmap")

        def one_agent(*args: Any) -> Any:
            check_axes(in_axes, len(args))
            return jitted.call(*args)

        one_agent.__wrapped__ = fn  # type: ignore[attr-defined]
        one_agent.__doc__ = fn.__doc__
        return one_agent

    def is_main_process(self) -> bool:
        return self._rank == 0
