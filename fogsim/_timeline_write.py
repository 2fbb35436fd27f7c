"""One process's timeline file: :class:`Timeline` (see :mod:`fogsim.timeline`).

Recording appends to the compiled recorder (`fogsim._core`); batches of events are
formatted and written by a writer thread, and the file is valid JSON after every write.
:mod:`fogsim.timeline` starts and stops timelines and re-exports this class;
`fogsim._timeline_bluefog` writes BlueFog's layout as a subclass of it.
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

__all__ = ["Timeline"]

_TRAILER = b"\n]}\n"
_FLUSH_EVENTS = 100_000  # events buffered before they are written
_FLUSH_NS = 2_000_000_000  # ... or after this long (at the end of an op)


class Timeline:
    """One process's trace file (see :mod:`fogsim.timeline`).

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
