"""BlueFog's timeline layout for :mod:`fogsim.timeline` (``start(prefix, bluefog=True)``).

BlueFog's layout (``start(prefix, bluefog=True)``, what ``BLUEFOG_TIMELINE`` starts through
:mod:`fogsim.compat.bluefog`): each rank's ``PREFIX<rank>.json`` is written as BlueFog
writes it, so that tools and tests made for BlueFog's files read it:

* a blocking op ``X`` of BlueFog's (``NEIGHBOR_ALLREDUCE``, ``WIN_ACCUMULATE`` ...) is an
  ``ENQUEUE_X`` span, then an ``MPI_X`` span holding its phases (fogsim has no queue:
  ``ENQUEUE_X`` marks the call and lasts no time); for a nonblocking one the ``WAIT``
  that completes it is its ``MPI_X`` span; other spans keep fogsim's names;
* each tensor name is a process track (``pid`` numbered from 1 in order of first use)
  and each thread a thread track (``tid`` from 1), as BlueFog's C++ timeline does; with
  several agents in one file (simulation) ``pid`` stays the agent;
* the events are written with BlueFog's spacing (``"tid": 1``) at the end of every op
  and activity, not in batches. The file stays one valid JSON object (BlueFog leaves an
  unclosed array).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Literal

from ._timeline_write import Timeline

__all__ = ["BlueFogTimeline"]


#: fogsim's op names that BlueFog records as ``ENQUEUE_X`` then ``MPI_X``.
_BLUEFOG_MPI_OPS = frozenset(
    {
        "ALLGATHER",
        "ALLREDUCE",
        "BROADCAST",
        "HIERARCHICAL_NEIGHBOR_ALLREDUCE",
        "NEIGHBOR_ALLGATHER",
        "NEIGHBOR_ALLREDUCE",
        "WIN_ACCUMULATE",
        "WIN_GET",
        "WIN_PUT",
    }
)
_THREAD_MARK = "\x00"  # between a tensor name and the thread number in a track's name


class BlueFogTimeline(Timeline):
    """A :class:`Timeline` that writes BlueFog's layout (the module docstring).

    Tracks are ``tensor + _THREAD_MARK + thread number``; formatting maps fogsim's track
    ids to BlueFog's (tensor, thread) ``pid``/``tid`` and re-writes each event.
    """

    def __init__(self, path: str, pids: list[int], label: str = "rank") -> None:
        self._threads: dict[int, int] = {}  # thread ident -> BlueFog tid (1, 2, ...)
        self._tensors: dict[str, int] = {}  # tensor name -> BlueFog pid (1, 2, ...)
        self._layout: dict[int, tuple[int, int]] = {}  # fogsim tid -> (pid, tid)
        self._enqueued: dict[str, str] = {}  # track -> op of its last ENQUEUE_ span
        super().__init__(path, pids, label)
        self.op, self.op_begin, self.op_end = self._op, self._op_begin, self._op_end

    def _thread_no(self) -> int:
        ident = threading.get_ident()
        number = self._threads.get(ident)
        if number is None:
            number = self._threads.setdefault(ident, len(self._threads) + 1)
        return number

    def _track(self, track: str) -> str:
        return f"{track}{_THREAD_MARK}{self._thread_no()}"

    def tid(self, track: str) -> int:
        tid = self._tids.get(track)
        if tid is not None:
            return tid
        if _THREAD_MARK in track:
            return super().tid(track)
        tid = super().tid(self._track(track))  # a track named outside an op (e.g. "fogsim")
        with self._lock:
            return self._tids.setdefault(track, tid)

    def begin(
        self, name: str, track: str, args: dict[str, Any] | None = None, ts: float | None = None
    ) -> None:
        super().begin(name, self._track(track), args, ts)
        self.flush()

    def end(self, track: str, ts: float | None = None) -> None:
        super().end(self._track(track), ts)
        self.flush()

    def innermost(self, track: str) -> str | None:
        return super().innermost(self._track(track))

    def _op_begin(self, name: str, track: str) -> int:
        rec, plain, track = self._rec, track, self._track(track)
        if name in _BLUEFOG_MPI_OPS:
            rec.op_end(rec.op_begin("ENQUEUE_" + name, track))
            name = "MPI_" + name
        elif name.startswith("ENQUEUE_") and name[8:] in _BLUEFOG_MPI_OPS:
            self._enqueued[plain] = name[8:]  # its WAIT on this track is its MPI_ span
        elif name == "WAIT":
            op = self._enqueued.pop(plain, None) or plain.upper()
            name = "MPI_" + op if op in _BLUEFOG_MPI_OPS else name
        return rec.op_begin(name, track)

    def _op_end(self, tid: int) -> None:
        self._rec.op_end(tid)
        self.flush()

    def _op(self, name: str, track: str) -> _BlueFogOp:
        return _BlueFogOp(self, name, track)

    def _format(self) -> bytes:
        text = super()._format()
        if not text:
            return text
        events = []
        for e in json.loads(b"[" + text + b"]"):
            if e["ph"] == "M":
                events.extend(self._metadata(e))
                continue
            pid, tid = e["pid"], e["tid"]
            if len(self.pids) == 1:
                pid, tid = self._layout.get(tid, (pid, tid))
            event = {"ph": e["ph"]}
            if "name" in e:
                event["name"] = e["name"]
            event.update(ts=e["ts"], pid=pid, tid=tid)
            for key in ("dur", "args"):
                if key in e:
                    event[key] = e[key]
            events.append(event)
        return ",\n".join(json.dumps(event) for event in events).encode()

    def _metadata(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """BlueFog's metadata events for fogsim's ``event`` (its rank label: none)."""
        if event["name"] != "thread_name":
            return [event] if len(self.pids) > 1 else []  # the agents' process names
        tensor, _, thread = event["args"]["name"].partition(_THREAD_MARK)
        if len(self.pids) > 1:
            return [dict(event, args={"name": f"{tensor} (thread {thread})"})]
        new = tensor not in self._tensors
        pid = self._tensors.setdefault(tensor, len(self._tensors) + 1)
        tid = int(thread)
        self._layout[event["tid"]] = (pid, tid)
        if not new:
            return []
        return [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tensor}},
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": pid},
            },
        ]


class _BlueFogOp:
    """An op's span on a :class:`BlueFogTimeline` (``with``), as the recorder's op()."""

    __slots__ = ("name", "tid", "timeline", "track")

    def __init__(self, timeline: BlueFogTimeline, name: str, track: str) -> None:
        self.timeline, self.name, self.track, self.tid = timeline, name, track, -1

    def __enter__(self) -> None:
        self.tid = self.timeline._op_begin(self.name, self.track)

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self.timeline._op_end(self.tid)
        return False


# -- starting and stopping ----------------------------------------------------------------
