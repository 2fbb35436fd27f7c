"""The explicit world state: one :class:`Context` per ``init()``.

A context owns the backend instance (which holds the topology and everything derived from
it) and the seed. The only module-level state is the pointer to the current context; a
``with ctx:`` block makes ``ctx`` current for the running thread only, so tests can keep
several simulated worlds side by side and per-agent threads can each see their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import _settings, _weightcheck
from . import timeline as _timeline
from ._handles import Handle
from .backends import Backend, create_backend

if TYPE_CHECKING:
    from ._types import TopologyLike
    from .topology import Topology


__all__ = ["Context", "OpClock", "current", "method_of", "pop_to", "push", "set_current"]

_current: Context | None = None

#: How many ``with ctx:`` blocks are open, in all threads together. While none is, every
#: thread's current context is ``_current``, and the ops read it without asking the thread.
_entered = 0
_entered_lock = threading.Lock()


class SpmdAgent(Protocol):
    """What ``init()``, ``shutdown()`` and the SPMD backend ask of a :mod:`fogsim.spmd` agent."""

    world: Any  # the run's shared rendezvous (fogsim.spmd.World)
    rank: int
    context: Context | None  # this agent's view of the world, once init() ran

    def init(
        self,
        backend: str | None,
        size: int | None,
        topology: Any,
        seed: int | None,
        local_size: int | None,
    ) -> Context: ...

    def shutdown(self) -> None: ...


class OpClock(Protocol):
    """What the world asks of a running :mod:`fogsim.clock` (:attr:`Context.clock`)."""

    def started(self, run: Callable[[], Any], op: str, name: str | None) -> Handle:
        """Run ``run`` (an op of a world whose ops do not overlap) as a nonblocking op: the
        clocks wait for it only when the returned handle is waited on."""
        ...


class _ThreadState(threading.local):
    """Per thread: the stack of contexts made current by ``with ctx:`` blocks."""

    def __init__(self) -> None:
        self.stack: list[Context] = []
        self.spmd_agent: SpmdAgent | None = None  # fogsim.spmd: the agent this thread runs, if any


_thread = _ThreadState()


class Context:
    """One fogsim world: a backend, its topology, and the seed.

    Parameters are those of :func:`fogsim.init`. Creating a context does not make it
    current; :func:`fogsim.init` does, and so does ``with ctx:`` for the block.
    """

    def __init__(
        self,
        backend: str | None = None,
        size: int | None = None,
        topology: TopologyLike | None = None,
        seed: int | None = None,
        *,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        shards: int | str | None = None,
    ) -> None:
        self.settings = _settings.load() if settings is None else settings
        _weightcheck.configure(self.settings.check_weights)
        name = backend if backend is not None else self.settings.backend
        if name is None:
            name = "torch" if self.settings.torchrun else "mpi" if self.settings.launched else "sim"
        if not isinstance(name, str):
            raise TypeError(f"backend must be a string such as 'sim', got {type(name).__name__}")
        if seed is None:
            seed = self.settings.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        if seed is not None and seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.seed: int | None = None if seed is None else int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.agent_rng: Any = None  # fogsim.rng(): this agent's generator(s), made on first use
        options: dict[str, Any] = {
            "size": size,
            "local_size": local_size if local_size is not None else self.settings.local_size,
            "settings": self.settings,
        }
        parts = self._shards(name.lower(), shards)
        if parts > 1:  # the simulator split over processes: a backend of its own
            self.backend: Backend = create_backend("sim-sharded", shards=parts, **options)
        else:
            self.backend = create_backend(name.lower(), **options)
        try:  # a topology refused on every rank: the world it would have had goes too
            self.backend.set_topology(self._default_topology() if topology is None else topology)
        except BaseException:
            self.backend.close()
            raise
        self._closed = False
        #: the world's fogsim.clock while one runs, and where it writes its trace (see
        #: fogsim.clock.start)
        self.clock: OpClock | None = None
        self.clock_trace: str | None = None
        # the part methods the public ops' routes reached in this world, by route (see
        # method_of): a world's parts are fixed when it is made
        self.methods: dict[Callable[[Backend], Callable[..., Any]], Callable[..., Any]] = {}

    def _shards(self, name: str, shards: int | str | None) -> int:
        """Return the number of processes the simulation is split over (1: not split).

        ``None`` (a :class:`Context` made by hand): ``FOGSIM_SHARDS``, else 1. ``"auto"``
        (:func:`fogsim.init`): ``FOGSIM_SHARDS``, else the processes a launcher started.
        """
        if shards is None or shards == "auto":
            settings = self.settings
            if settings.shards is not None or shards is None:
                shards = settings.shards or 1
            elif settings.torchrun and settings.torch_world_size is not None:
                shards = settings.torch_world_size
            else:
                shards = settings.launcher_size or 1
            return int(shards) if name == "sim" else 1
        if isinstance(shards, bool) or not isinstance(shards, int | np.integer):
            raise TypeError(f"shards must be an integer, got {type(shards).__name__}")
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        if shards > 1 and name != "sim":
            raise ValueError(
                f"shards={shards} splits a simulation over processes: it needs backend='sim', "
                f"not {name!r}"
            )
        return int(shards)

    def _default_topology(self) -> Topology:
        from .topology import exponential_two_graph

        return exponential_two_graph(self.backend.size())

    @property
    def is_simulated(self) -> bool:
        """Whether this world is the simulator (agents stacked in this process: all of them,
        or one block of them when sharded), as its backend declares."""
        return self.backend.capabilities.stacked

    def simulator(self, feature: str) -> Any:
        """Return this world's simulator backend, for the simulator-only ``feature``.

        Fault injection, the cost model, modelled asynchrony's inspection and agent-level
        window inspection need all agents in one process; they reach the simulator here,
        and under any other backend get a ``ValueError`` that names ``feature`` and the
        backend this world runs on.
        """
        if not self.is_simulated:
            raise ValueError(
                f"{feature} is for the simulator (init(backend='sim'), or fogrun --sim); this "
                f"world runs on the {self.backend.name} backend, whose processes communicate "
                "for real"
            )
        return self.backend

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """Release the backend's resources; the context cannot be used afterwards."""
        if not self._closed:
            self._closed = True
            self.methods.clear()
            self.backend.close()

    def __enter__(self) -> Context:
        push(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        pop_to(len(_thread.stack) - 1)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"size={self.backend.size_int}"
        return f"<fogsim.Context backend={self.backend.name!r} {state}>"


def current() -> Context:
    """Return the context of the running thread, else the one made by ``init()``."""
    if _entered:  # some thread has a ``with ctx:`` block open: this one may
        stack = _thread.stack  # no getattr default, no exception
        ctx = stack[-1] if stack else _current
    else:
        ctx = _current
    if ctx is None or ctx._closed:
        raise RuntimeError("fogsim is not initialized: call fogsim.init() first")
    return ctx


def push(ctx: Context) -> None:
    """Make ``ctx`` the running thread's current context until :func:`pop_to` drops it."""
    global _entered
    _thread.stack.append(ctx)
    with _entered_lock:
        _entered += 1


def pop_to(depth: int) -> None:
    """Drop the running thread's current contexts above the first ``depth``."""
    global _entered
    stack = _thread.stack
    dropped = max(len(stack) - depth, 0)
    del stack[depth:]
    with _entered_lock:
        _entered -= dropped


def method_of(route: Callable[[Backend], Callable[..., Any]]) -> Callable[..., Any]:
    """Return the part method that ``route`` reaches in the current world.

    The public ops follow their routes here (see `fogsim._routing`, which reads
    :attr:`Context.methods` first); a world's parts are fixed when it is made, so each
    route is followed once per world and kept.
    """
    ctx = current()
    method = ctx.methods.get(route)
    if method is None:
        method = ctx.methods[route] = ctx.backend.follow(route)
    return method


def peek() -> Context | None:
    """Return the current context, or None when there is none (no error)."""
    try:
        return current()
    except RuntimeError:
        return None


def spmd_agent() -> SpmdAgent | None:
    """Return the :mod:`fogsim.spmd` agent the running thread runs (None outside SPMD mode).

    ``init()`` and ``shutdown()`` in an agent thread start and close that agent's own view
    of the run instead of a world of their own.
    """
    return _thread.spmd_agent


def set_spmd_agent(agent: SpmdAgent | None) -> None:
    """Mark the running thread as running ``agent`` of an SPMD run (None: no longer)."""
    _thread.spmd_agent = agent


def set_current(ctx: Context | None) -> None:
    """Make ``ctx`` the process-wide current context (``None`` clears it)."""
    global _current
    _current = ctx


def _timeline_world() -> tuple[Any, int | None]:
    """What :func:`fogsim.timeline.start` records for: this process's ranks, and its shard."""
    backend = current().backend
    return backend.rank(), backend.shard_index()


_timeline.set_world_reader(_timeline_world)
