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

import atexit
import contextlib
import json
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

# Reading timelines back lives in _timeline_read; its functions are this module's too.
from ._timeline_read import load as load
from ._timeline_read import main as main
from ._timeline_read import plot_gantt as plot_gantt
from ._timeline_read import summarize as summarize

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

_TRAILER = b"\n]}\n"
_FLUSH_EVENTS = 100_000  # events buffered before they are written
_FLUSH_NS = 2_000_000_000  # ... or after this long (at the end of an op)


class Timeline:
    """One process's trace file (see the module docstring).

    ``pids``: the process tracks this process writes for (its rank, or the simulated
    agents shown); every span is recorded on each of them. Recording an event appends a
    tuple to a list; events are formatted and written in batches. Ops and user
    activities are begin/end ("B"/"E") pairs; the phases inside ops are complete ("X")
    events, one each, nested in time inside their op.
    """

    def __init__(self, path: str, pids: list[int], label: str = "rank") -> None:
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.path = path
        self.pids = list(pids)
        from . import _core  # compiled recording and formatting (numpy-free twins otherwise)

        self._clock = _core.trace_now_ns
        self._rec = _core.TraceRecorder()  # the events, (ph, tid, ns, name, args/duration)
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(b'{"displayTimeUnit": "ms", "traceEvents": [\n')
        self._body_end = self._file.tell()
        self._first = True
        self._lock = threading.Lock()  # the recorder's events, the tracks, the batches' order
        self._file_lock = threading.Lock()  # the file: the writer thread or flush()
        self._t0 = self._clock()
        self._rec.last_flush = self._t0
        self._rec.offset = 0  # modelled minus measured time so far (simulation), ns
        self._tids: dict[str, int] = {}
        self._quoted: dict[str, str] = {}  # JSON-quoted span names
        self._open: dict[int, list[str]] = {}  # names of the spans begin() opened, by tid
        self._rec.timeline, self._rec.tids = self, self._tids
        self._batches: queue.Queue[bytes | None] = queue.Queue()  # for the writer thread
        self._writer: threading.Thread | None = None
        self._write_error: BaseException | None = None
        # see the comment below tid()
        # a context manager per op span; BlueFogTimeline puts its own in (another class)
        self.op: Callable[[str, str], contextlib.AbstractContextManager[None]] = self._rec.op
        self.phase, self.since = self._rec.phase, self._rec.since
        self.op_begin, self.op_end = self._rec.op_begin, self._rec.op_end
        self.clock_ns = _core.trace_now_ns
        self.closed = False
        for pid in self.pids:
            self._emit_json(
                {
                    "name": "process_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": 0,
                    "args": {"name": f"{label} {pid}"},
                }
            )
        self.flush()
        atexit.register(self.close)

    # -- clock and tracks -----------------------------------------------------------------
    def now(self) -> float:
        """Microseconds since the timeline started (plus any modelled shift)."""
        return (self._clock() - self._t0 + self._rec.offset) / 1e3

    def shift(self, microseconds: float) -> None:
        """Move this process's clock on (a modelled duration longer than the measured one)."""
        self._rec.offset += round(microseconds * 1e3)

    def tid(self, track: str) -> int:
        """The thread track of ``track`` (a tensor or op name), named on first use."""
        tid = self._tids.get(track)
        if tid is None:
            with self._lock:
                tid = self._tids.setdefault(track, len(self._tids) + 1)
                for pid in self.pids:
                    self._emit_json(
                        {
                            "name": "thread_name",
                            "ph": "M",
                            "pid": pid,
                            "tid": tid,
                            "args": {"name": track},
                        }
                    )
        return tid

    def _ns(self, ts: float | None) -> int:
        if ts is None:
            return self._clock() + self._rec.offset
        return self._t0 + round(ts * 1e3)

    # -- events ---------------------------------------------------------------------------
    def begin(
        self, name: str, track: str, args: dict[str, Any] | None = None, ts: float | None = None
    ) -> None:
        """Open span ``name`` on ``track`` (closed by :meth:`end` on the same track).

        ``ts``: microseconds on this timeline's clock (default: now).
        """
        tid = self._tids.get(track) or self.tid(track)
        self._rec.append("B", tid, self._ns(ts), name, args)
        self._rec.move(tid, 1)
        self._open.setdefault(tid, []).append(name)

    def end(self, track: str, ts: float | None = None) -> None:
        """Close the innermost open span on ``track``."""
        tid = self._tids.get(track) or self.tid(track)
        if not self._rec.depth(tid):
            raise ValueError(f"timeline: no open activity on {track!r} to end")
        t = self._ns(ts)
        self._rec.append("E", tid, t, None, None)
        self._rec.move(tid, -1)
        opened = self._open.get(tid)
        if opened:
            opened.pop()
        if len(self._rec) >= _FLUSH_EVENTS or t - self._rec.last_flush > _FLUSH_NS:
            self.flush_soon()

    @contextlib.contextmanager
    def span(self, name: str, track: str, args: dict[str, Any] | None = None) -> Iterator[None]:
        """Record the block as span ``name`` on ``track``."""
        self.begin(name, track, args)
        try:
            yield
        finally:
            self.end(track)

    def innermost(self, track: str) -> str | None:
        """The name of the innermost span opened with :meth:`begin` still open on ``track``."""
        opened = self._open.get(self._tids.get(track, -1))
        return opened[-1] if opened else None

    # op(name, track) and phase(name), the recording calls, are the recorder's (compiled),
    # bound in __init__:
    #   op(name, track): record an op as span ``name`` on ``track`` (``with``); its phases
    #     nest inside it;
    #   phase(name): record the ``with`` block as phase ``name`` of the op running in this
    #     thread;
    #   since(name, start): record phase ``name`` of that op from ``start`` (clock_ns())
    #     to now, and return now: the hot paths' form, without an object or a ``with``;
    #   op_begin(name, track) -> tid, then op_end(tid) in a ``finally``: op()'s span
    #     without an object or a ``with``, for the hottest API calls (0.2 us less).

    def current_track(self) -> str:
        """The track of the op running in this thread (``"fogsim"`` outside ops)."""
        tid = self._rec.current_tid()
        if tid is None:
            return "fogsim"
        return next(track for track, t in self._tids.items() if t == tid)

    def modelled(self, name: str, seconds: float, started: float) -> None:
        """Record phase ``name`` of the running op lasting the modelled ``seconds``.

        It starts at ``started`` (microseconds on this clock); the clock moves on by the
        modelled time minus the time measured since then.
        """
        measured = self.now() - started
        tid = self._rec.current_tid()
        tid = self.tid("fogsim") if tid is None else tid
        self._rec.append("X", tid, self._ns(started), name, round(seconds * 1e9))
        self.shift(seconds * 1e6 - measured)

    # -- file -----------------------------------------------------------------------------
    def _emit_json(self, event: dict[str, Any]) -> None:
        self._rec.append("J", 0, 0, json.dumps(event, separators=(",", ":")), None)

    def flush(self) -> None:
        """Format the recorded events and write them; return once the file holds them
        (it stays valid JSON)."""
        with self._lock:  # no batch can be formatted and queued in between: file order
            text = self._format()
            if self._writer is not None:
                self._start_writer()  # (gone in a forked child: batches would wait forever)
            self._batches.join()  # the batches formatted before these, first
            if text:
                self._write(text)
        self._raise_write_error()

    def flush_soon(self) -> None:
        """Format the recorded events now and have the writer thread write them (the
        periodic flush of the instrumented calls)."""
        with self._lock:
            text = self._format()
            if not text:
                return
            self._start_writer()
            self._batches.put(text)

    def _start_writer(self) -> None:
        """Start the writer thread unless it runs."""
        if self._writer is None or not self._writer.is_alive():
            self._writer = threading.Thread(
                target=self._write_batches, daemon=True, name="fogsim-timeline-writer"
            )
            self._writer.start()

    def _format(self) -> bytes:
        if self.closed:
            return b""
        text = self._rec.format(self._t0, self.pids, self._quoted)
        self._rec.last_flush = self._clock()
        return text

    def _write_batches(self) -> None:
        while True:
            text = self._batches.get()
            try:
                if text is None:
                    return
                self._write(text)
            except BaseException as exc:  # e.g. the disk is full: raised by flush()/close()
                self._write_error = exc
            finally:
                self._batches.task_done()

    def _write(self, text: bytes) -> None:
        with self._file_lock:
            self._file.seek(self._body_end)
            if not self._first:
                self._file.write(b",\n")
            self._first = False
            self._file.write(text)
            self._body_end = self._file.tell()
            self._file.write(_TRAILER)  # valid JSON after every write
            self._file.truncate()
            self._file.flush()

    def _raise_write_error(self) -> None:
        error, self._write_error = self._write_error, None
        if error is not None:
            raise OSError(f"timeline: writing {self.path} failed: {error}") from error

    def close(self) -> None:
        """Close every open span, write the events and close the file (idempotent)."""
        if self.closed:
            return
        t = self._clock() + self._rec.offset
        for tid, depth in self._rec.open_tracks().items():
            for _ in range(depth):
                self._rec.append("E", tid, t, None, None)
            self._rec.move(tid, -depth)
        try:
            self.flush()
        finally:
            if self._writer is not None:
                self._batches.put(None)
                self._writer.join()
                self._writer = None
            with self._lock:
                self.closed = True
                self._file.close()
            atexit.unregister(self.close)


def _bluefog_kind() -> type[Timeline]:
    from ._timeline_bluefog import BlueFogTimeline  # imports this module: here, not at the top

    return BlueFogTimeline


def start(prefix: str, max_agents: int = 32, bluefog: bool = False) -> Timeline:
    """Start recording for the current fogsim world; return the :class:`Timeline`.

    Distributed, this rank writes ``PREFIX<rank>.json``; in simulation ``PREFIX.json`` with
    tracks for the first ``max_agents`` agents (sharded over P processes, process p writes
    ``PREFIX-shard<p>.json`` for the first agents of its block). A running timeline is
    stopped first.
    ``bluefog``: write BlueFog's layout (see the module docstring).
    """
    import numpy as np

    import fogsim as fs

    global active
    if not isinstance(prefix, str | os.PathLike) or not str(prefix):
        raise TypeError(f"timeline prefix must be a non-empty path, got {prefix!r}")
    if isinstance(max_agents, bool) or not isinstance(max_agents, int) or max_agents < 1:
        raise ValueError(f"max_agents must be a positive integer, got {max_agents!r}")
    if not isinstance(bluefog, bool):
        raise TypeError(f"bluefog must be a bool, got {type(bluefog).__name__}")
    stop()
    rank = fs.rank()
    kind = _bluefog_kind() if bluefog else Timeline
    if np.ndim(rank):  # simulation: every agent in this process, or a block of them
        agents = [int(r) for r in rank[:max_agents]]
        backend = fs._context.current().backend
        shard = getattr(backend, "shard", None)  # this process's index when sharded
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
        tl = (_bluefog_kind() if bluefog else Timeline)(f"{prefix}{rank}.json", [rank], "rank")
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
