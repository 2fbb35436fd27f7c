"""Pure Python twins of ``_trace.pyx``: the timeline's clock, recorder, spans and formatting.

Used when the extension is not compiled (see ``_trace.pyx`` for the contracts).
"""

from __future__ import annotations

import json
import threading
import time
from types import TracebackType
from typing import Any, Literal, Protocol


class TraceOwner(Protocol):
    """What a recorder asks of the timeline that owns it (`fogsim.timeline`'s writer)."""

    def tid(self, track: str) -> int:
        """The number of ``track``'s thread in the trace (a new track gets a new one)."""
        ...

    def flush_soon(self) -> None:
        """Write what was recorded, from the timeline's own thread, before long."""
        ...


__all__ = ["TraceOp", "TracePhase", "TraceRecorder", "format_trace_events", "trace_now_ns"]

#: A recorded event: phase ("B", "E", "X" or "J"), track id, time in ns, name, and the
#: B event's args, the X event's duration or None.
Event = tuple[str, int, int, Any, Any]


def trace_now_ns() -> int:
    """The timeline's clock in ns (see ``_trace.trace_now_ns``)."""
    return time.perf_counter_ns()


class TraceRecorder:
    """The timeline's recorded events (see ``_trace.TraceRecorder``), in a list."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.depths: dict[int, int] = {}
        self.stacks: dict[int, list[int]] = {}
        self.offset = 0
        self.last_flush = 0
        self.timeline: TraceOwner | None = None  # the owner, set right after
        self.tids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.events)

    def _ops(self) -> list[int]:
        return self.stacks.setdefault(threading.get_ident(), [])

    def _tid(self, track: str) -> int:
        tid = self.tids.get(track)
        if tid is not None:
            return tid
        assert self.timeline is not None
        return self.timeline.tid(track)

    def op(self, name: str, track: str) -> TraceOp:
        return TraceOp(self, self._ops(), name, self._tid(track))

    def op_begin(self, name: str, track: str) -> int:
        tid = self._tid(track)
        self.open_span(self._ops(), tid, name)
        return tid

    def op_end(self, tid: int) -> None:
        self.close_span(self._ops(), tid)

    def open_span(self, ops: list[int], tid: int, name: str) -> None:
        self.events.append(("B", tid, time.perf_counter_ns() + self.offset, name, None))
        self.move(tid, 1)
        ops.append(tid)

    def close_span(self, ops: list[int], tid: int) -> None:
        ops.pop()
        t = time.perf_counter_ns() + self.offset
        self.events.append(("E", tid, t, None, None))
        self.move(tid, -1)
        if len(self.events) >= 100_000 or t - self.last_flush > 2_000_000_000:
            assert self.timeline is not None
            self.timeline.flush_soon()

    def phase(self, name: str) -> TracePhase:
        ops = self._ops()
        return TracePhase(self, name, ops[-1] if ops else self._tid("fogsim"))

    def since(self, name: str, start: int) -> int:
        end = time.perf_counter_ns()
        ops = self._ops()
        tid = ops[-1] if ops else self._tid("fogsim")
        self.events.append(("X", tid, start + self.offset, name, end - start))
        return end

    def current_tid(self) -> int | None:
        ops = self._ops()
        return ops[-1] if ops else None

    def append(self, ph: str, tid: int, ns: int, name: Any, extra: Any) -> None:
        if ph not in ("B", "E", "X", "J"):
            raise ValueError(f"timeline: unknown event phase {ph!r}")
        self.events.append((ph, tid, ns, name, extra))

    def move(self, tid: int, by: int) -> None:
        if tid < 0:
            raise ValueError(f"timeline: track id {tid} < 0")
        self.depths[tid] = self.depths.get(tid, 0) + by

    def depth(self, tid: int) -> int:
        return self.depths.get(tid, 0)

    def open_tracks(self) -> dict[int, int]:
        return {tid: d for tid, d in sorted(self.depths.items()) if d > 0}

    def format(self, t0: int, pids: list[int], quoted: dict[str, Any]) -> bytes:
        events, self.events = self.events, []
        return format_trace_events(events, t0, pids, quoted)


class TraceOp:
    """An op's span on a timeline (see ``_trace.TraceOp``)."""

    __slots__ = ("rec", "ops", "name", "tid")

    def __init__(self, rec: TraceRecorder, ops: list[int], name: str, tid: int) -> None:
        self.rec, self.ops, self.name, self.tid = rec, ops, name, tid

    def __enter__(self) -> None:
        self.rec.open_span(self.ops, self.tid, self.name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        self.rec.close_span(self.ops, self.tid)
        return False


class TracePhase:
    """A phase of the running op (see ``_trace.TracePhase``)."""

    __slots__ = ("rec", "name", "tid", "start")

    def __init__(self, rec: TraceRecorder, name: str, tid: int) -> None:
        self.rec, self.name, self.tid = rec, name, tid

    def __enter__(self) -> None:
        self.start = time.perf_counter_ns()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        end = time.perf_counter_ns()
        rec = self.rec
        rec.events.append(("X", self.tid, self.start + rec.offset, self.name, end - self.start))
        return False


def format_trace_events(
    events: list[Event], t0: int, pids: list[int], quoted: dict[str, Any]
) -> bytes:
    """The timeline's events as Chrome-trace JSON (see ``_trace.format_trace_events``)."""
    parts: list[str] = []
    for k, pid in enumerate(pids):
        for ph, tid, ns, name, extra in events:
            if ph == "J":
                if k == 0:
                    parts.append(name)
                continue
            t = max(ns - t0, 0)
            ts = f"{t // 1000}.{t % 1000:03d}"
            if ph == "E":
                parts.append(f'{{"ph":"E","ts":{ts},"pid":{pid},"tid":{tid}}}')
                continue
            q = quoted.get(name)
            if q is None:
                q = quoted[name] = json.dumps(name).encode()
            if ph == "X":
                d = max(extra, 0)
                parts.append(
                    f'{{"name":{q.decode()},"ph":"X","ts":{ts},'
                    f'"dur":{d // 1000}.{d % 1000:03d},'
                    f'"pid":{pid},"tid":{tid}}}'
                )
            else:
                tail = "}" if not extra else ',"args":' + json.dumps(extra) + "}"
                parts.append(
                    f'{{"name":{q.decode()},"ph":"B","ts":{ts},"pid":{pid},"tid":{tid}{tail}'
                )
    return ",\n".join(parts).encode()
