"""Chrome-trace timeline: where each agent's time goes, op by op and phase by phase.

Start it with ``fogrun --timeline-filename PREFIX``, ``FOGSIM_TIMELINE=PREFIX`` (read by
:func:`fogsim.init`) or :func:`start`; stop it with :func:`stop` or ``fogsim.shutdown()``.
Each process writes one JSON document in Chrome's trace-event format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open:

* distributed, rank r writes ``PREFIX<r>.json`` with ``pid = r``;
* in simulation the one process writes ``PREFIX.json`` with one process track per agent
  (``pid = agent``, the first ``max_agents`` agents), so the layout is that of the merged
  files of a distributed run.

Inside a process, each tensor name (or op, for unnamed calls) has its own thread track.
An op is a span (``NEIGHBOR_ALLREDUCE``, ``ENQUEUE_NEIGHBOR_ALLREDUCE``, ``WAIT``,
``WIN_PUT`` ...) with nested phases: ``NEGOTIATE`` (the ranks' agreement on shapes and
senders), ``COMMUNICATE``, ``COMPUTE_AVERAGE``, and for fused nonblocking calls
``ALLOCATE`` (the batch's buffers), ``FUSION_COPY_IN`` (packing the tensors),
``COMMUNICATE`` and ``FUSION_COPY_OUT`` (averaging each tensor out of the received batch),
the last two inside the ``WAIT`` that completes the batch. The MPI and torch runtimes
record the same phases. User code adds its own spans with :func:`timeline_start_activity` /
:func:`timeline_end_activity` or :func:`timeline_context`; the :mod:`fogsim.optim`
wrappers add ``FORWARD``, ``BACKWARD`` and ``STEP``.

In simulation with a cost model attached (:func:`fogsim.hierarchy.attach_cost_model`) the
``COMMUNICATE`` spans last the modelled time and the clock moves on by it, so the trace
shows what the run would take on the modelled network; otherwise measured times.

The file is valid JSON at every flush (the closing brackets are rewritten after each
batch of events), so a job that dies still leaves a readable trace; it is closed at
:func:`stop`, at ``shutdown()`` and at interpreter exit. Events are formatted in batches
(every 100,000 events or 2 s) and a writer thread writes them, so the instrumented calls
do not wait for the disk. When no timeline runs, the instrumented code checks one module
attribute and does nothing else.

:func:`summarize` (``python -m fogsim.timeline summarize PREFIX``, or ``fogsim timeline
summarize PREFIX``) prints the time per phase per rank and can draw a Gantt chart.

BlueFog's layout (``start(prefix, bluefog=True)``, what ``BLUEFOG_TIMELINE`` starts through
:mod:`fogsim.compat.bluefog`) is described in ``fogsim._timeline_bluefog``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._timeline_bluefog import BlueFogTimeline

# Reading timelines back lives in _timeline_read, writing one in _timeline_write; their
# functions and class are this module's too.
from ._timeline_read import load as load
from ._timeline_read import main as main
from ._timeline_read import plot_gantt as plot_gantt
from ._timeline_read import summarize as summarize
from ._timeline_write import Timeline as Timeline

__all__ = [
    "Timeline",
    "is_active",
    "load",
    "phase",
    "plot_gantt",
    "running",
    "start",
    "stop",
    "summarize",
    "timeline_context",
    "timeline_end_activity",
    "timeline_start_activity",
]

#: The running timeline of this process, or None (read by the instrumented code).
active: Timeline | None = None

#: What a world shows :func:`start`: ``(rank, shard)``, the ranks of this process (an int,
#: or the stacked agents' ranks in simulation) and, in a sharded simulation, its index
#: among the processes (else None).
WorldReader = Callable[[], tuple[Any, int | None]]
_world: WorldReader | None = None


def set_world_reader(reader: WorldReader) -> None:
    """Read the current world with ``reader`` in :func:`start` (set by `fogsim._context`,
    which holds the world and sits above the code this module instruments)."""
    global _world
    _world = reader


def start(prefix: str, max_agents: int = 32, bluefog: bool = False) -> Timeline:
    """Start recording for the current fogsim world; return the :class:`Timeline`.

    Distributed, this rank writes ``PREFIX<rank>.json``; in simulation ``PREFIX.json`` with
    tracks for the first ``max_agents`` agents (sharded over P processes, process p writes
    ``PREFIX-shard<p>.json`` for the first agents of its block). A running timeline is
    stopped first.
    ``bluefog``: write BlueFog's layout (see the module docstring).
    """
    import numpy as np

    global active
    if not isinstance(prefix, str | os.PathLike) or not str(prefix):
        raise TypeError(f"timeline prefix must be a non-empty path, got {prefix!r}")
    if isinstance(max_agents, bool) or not isinstance(max_agents, int) or max_agents < 1:
        raise ValueError(f"max_agents must be a positive integer, got {max_agents!r}")
    if not isinstance(bluefog, bool):
        raise TypeError(f"bluefog must be a bool, got {type(bluefog).__name__}")
    stop()
    if _world is None:  # fogsim._context is not even imported: no world was ever made
        raise RuntimeError("fogsim is not initialized: call fogsim.init() first")
    rank, shard = _world()
    kind = BlueFogTimeline if bluefog else Timeline
    if np.ndim(rank):  # simulation: every agent in this process, or a block of them
        agents = [int(r) for r in rank[:max_agents]]
        name = f"{prefix}.json" if shard is None else f"{prefix}-shard{shard}.json"
        active = kind(name, agents, "agent")
    else:
        active = kind(f"{prefix}{int(rank)}.json", [int(rank)], "rank")
    return active


def stop() -> None:
    """Close the running timeline, if any."""
    global active
    if active is not None:
        active.close()
        active = None


class _AgentTimelines:
    """The running timeline of an SPMD run (:mod:`fogsim.spmd`): every agent thread records
    into its own :class:`Timeline` (``PREFIX<rank>.json``, as an MPI rank would); this object
    hands each thread's calls to that thread's timeline."""

    def __init__(self) -> None:
        self._mine = threading.local()
        self._open: dict[int, Timeline] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mine.timeline, name)

    def start(self, prefix: str, rank: int, bluefog: bool = False) -> Timeline:
        tl = (BlueFogTimeline if bluefog else Timeline)(f"{prefix}{rank}.json", [rank], "rank")
        with self._lock:
            old = self._open.pop(rank, None)
            self._open[rank] = self._mine.timeline = tl
        if old is not None:
            old.close()
        return tl

    def stop(self, rank: int) -> bool:
        """Close ``rank``'s timeline; return whether every agent's is closed."""
        with self._lock:
            tl = self._open.pop(rank, None)
            done = not self._open
        if tl is not None:
            tl.close()
        return done

    def close(self) -> None:
        with self._lock:
            timelines, self._open = list(self._open.values()), {}
        for tl in timelines:
            tl.close()


def start_agent(prefix: str, rank: int, bluefog: bool = False) -> Timeline:
    """Start recording for the SPMD agent running in this thread (``PREFIX<rank>.json``).

    The agents of one run share one :data:`active` object that hands each thread's calls
    to its own timeline (see :mod:`fogsim.spmd`). ``bluefog``: as in :func:`start`.
    """
    global active
    with _agents_lock:
        agents: Timeline | _AgentTimelines | None = active
        if not isinstance(agents, _AgentTimelines):
            stop()
            agents = _AgentTimelines()
            # A proxy, not a Timeline: it hands each agent thread's calls to its own Timeline.
            active = agents  # type: ignore[assignment]
    return agents.start(prefix, rank, bluefog)


def stop_agent(rank: int) -> None:
    """Close the timeline of SPMD agent ``rank``; the last one closed ends the recording."""
    global active
    with _agents_lock:
        agents = active
        if isinstance(agents, _AgentTimelines) and agents.stop(rank):
            active = None


_agents_lock = threading.Lock()


def is_active() -> bool:
    """Return whether a timeline is recording."""
    return active is not None


def running() -> Timeline | None:
    """Return the recording timeline, or None (for work that finishes later, such as a
    fused batch, to look up when it does)."""
    return active


def begin_activity(track: str, name: str) -> None:
    """Open span ``name`` on ``track`` if a timeline runs (for library hooks)."""
    tl = active
    if tl is not None:
        tl.begin(name, track)


def end_activity(track: str, name: str) -> None:
    """Close span ``name`` if it is the innermost one open on ``track`` (library hooks)."""
    tl = active
    if tl is not None and tl.innermost(track) == name:
        tl.end(track)


_NO_PHASE = contextlib.nullcontext()


def phase(name: str) -> contextlib.AbstractContextManager[None]:
    """Record the block as phase ``name`` of the running op (nothing when no timeline)."""
    tl = active
    return _NO_PHASE if tl is None else tl.phase(name)


# -- user activities (BlueFog's names) -----------------------------------------------------
def timeline_start_activity(tensor_name: str, activity_name: str) -> bool:
    """Open span ``activity_name`` on the track of ``tensor_name``; False when no timeline."""
    if active is None:
        return False
    _check_names(tensor_name=tensor_name, activity_name=activity_name)
    active.begin(activity_name, tensor_name)
    return True


def timeline_end_activity(tensor_name: str) -> bool:
    """Close the innermost activity on the track of ``tensor_name``; False when no timeline."""
    if active is None:
        return False
    _check_names(tensor_name=tensor_name)
    active.end(tensor_name)
    return True


@contextlib.contextmanager
def timeline_context(tensor_name: str, activity_name: str) -> Iterator[None]:
    """Record the ``with`` block as ``activity_name`` on the track of ``tensor_name``."""
    started = timeline_start_activity(tensor_name, activity_name)
    try:
        yield
    finally:
        if started and active is not None:
            active.end(tensor_name)


def _check_names(**names: Any) -> None:
    for arg, name in names.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"timeline {arg} must be a non-empty string, got {name!r}")
