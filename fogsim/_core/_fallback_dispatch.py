"""Pure Python twins of ``_dispatch.pyx``: handles and their table, fusion, pack, combine_rows.

Used when the extension is not compiled; results are bit-identical (``combine_rows`` does
``weighted_combine``'s operations in its order). See ``_dispatch.pyx`` for the contracts.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._fallback import weighted_combine

__all__ = [
    "FusedBatch",
    "FusedEntry",
    "FusionQueue",
    "Handle",
    "HandleTable",
    "TraceOp",
    "TracePhase",
    "TraceRecorder",
    "combine_rows",
    "format_trace_events",
    "layout_fingerprint",
    "pack",
    "trace_now_ns",
]


class Handle:
    """A pending operation; :func:`fogsim.wait` returns its result, :func:`fogsim.poll` tests it.

    A backend that computes eagerly creates a completed handle with :meth:`completed`; one
    that overlaps communication passes ``finish`` (blocks and returns the result) and
    ``test`` (returns whether ``finish`` would return at once). A handle is released by
    :meth:`wait`: waiting or polling it again raises ``ValueError``.
    """

    __slots__ = ("op", "name", "_finish", "_test", "_result", "_done", "_released", "_error")

    def __init__(
        self,
        op: str,
        finish: Callable[[], Any],
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> None:
        self.op = op
        self.name = name
        self._finish = finish
        self._test = test
        self._result: Any = None
        self._done = False
        self._released = False
        self._error: Exception | None = None

    @classmethod
    def completed(cls, op: str, result: Any, name: str | None = None) -> Handle:
        """Return a handle whose operation has already finished with ``result``."""
        handle = cls(op, finish=lambda: result, name=name)
        handle._result, handle._done, handle._finish = result, True, None
        return handle

    def _check_live(self) -> None:
        if self._released:
            raise ValueError(f"{self!r} was already waited on; wait() releases a handle")

    def poll(self) -> bool:
        """Return True when :meth:`wait` would return without blocking."""
        self._check_live()
        if self._done or self._error is not None:
            return True
        return True if self._test is None else bool(self._test())

    def complete(self) -> None:
        """Finish the operation (blocking) and keep its result for :meth:`wait`."""
        if self._done:
            return
        if self._error is not None:  # it failed before: the same error, not a second try
            raise self._error
        try:
            self._result = self._finish()
        except Exception as exc:
            self._error = exc
            raise
        self._done, self._finish, self._test = True, None, None

    def wait(self) -> Any:
        """Block until the operation finishes, release the handle, and return the result."""
        self._check_live()
        self.complete()
        self._released = True
        result, self._result = self._result, None
        return result

    def __repr__(self) -> str:
        state = "released" if self._released else "done" if self._done else "pending"
        label = f" name={self.name!r}" if self.name else ""
        return f"<fogsim.Handle {self.op}{label} {state}>"


class HandleTable:
    """The in-flight operations of one world; a handle leaves the table when completed.

    Owned by a backend instance (never a module global), so ``shutdown()`` can complete
    what is still in flight and a second world keeps its own handles.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[int, Handle] = {}

    def start(
        self,
        op: str,
        finish: Callable[[], Any],
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> Handle:
        """Register a pending operation and return its handle."""
        holder: list[Handle] = []

        def release() -> Any:
            try:
                return finish()
            finally:
                self._pending.pop(id(holder[0]), None)

        handle = Handle(op, release, test, name)
        holder.append(handle)
        self._pending[id(handle)] = handle
        return handle

    def drain(self) -> None:
        """Complete every pending operation (results stay in their handles for wait()).

        An operation that fails is dropped from the table; its error is raised by wait().
        """
        for handle in list(self._pending.values()):
            try:
                handle.complete()
            except Exception:  # noqa: S112 - wait() on the handle raises it again
                continue

    def __len__(self) -> int:
        return len(self._pending)


def pack(out: Any, arrays: Sequence[np.ndarray], offsets: Sequence[int]) -> Any:
    """Copy the bytes of each array to ``out`` at its offset; zero the bytes in between."""
    if len(offsets) != len(arrays):
        raise ValueError(f"pack: {len(arrays)} arrays but {len(offsets)} offsets")
    dst = np.frombuffer(out, dtype=np.uint8) if not isinstance(out, np.ndarray) else out
    dst = dst.reshape(-1).view(np.uint8)
    end = 0
    for k, (arr, at) in enumerate(zip(arrays, offsets, strict=True)):
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        if at < end or at + raw.size > dst.size:
            raise ValueError(
                f"pack: array {k} ({raw.size} bytes at offset {at}) overlaps the previous "
                f"one or runs past the {dst.size}-byte buffer"
            )
        dst[end:at] = 0
        dst[at : at + raw.size] = raw
        end = at + raw.size
    dst[end:] = 0
    return out


def combine_rows(
    out: np.ndarray,
    self_weight: float,
    x: np.ndarray,
    weights: np.ndarray,
    recv: np.ndarray,
    offset: int = 0,
    select: np.ndarray | None = None,
) -> np.ndarray:
    """``out <- self_weight * x + sum_k weights[k] * y_k``, ``y_k`` read from ``recv`` rows."""
    if out.dtype not in (np.float64, np.float32) or x.dtype != out.dtype or x.size != out.size:
        raise TypeError(
            "combine_rows: out and x must be float64 or float32 buffers of one format and size"
        )
    if weights.dtype != np.float64:
        raise TypeError("combine_rows: weights must be float64")
    if recv.ndim < 1:
        raise ValueError("combine_rows: recv must have a first axis of rows")
    nrows = recv.shape[0]
    rows = recv.reshape(nrows, -1).view(np.uint8) if nrows else recv.reshape(0, 0)
    row_bytes = rows.shape[1] if nrows else 0
    nk = weights.shape[0]
    if select is not None:
        select = np.asarray(select)
        if select.dtype != np.int64 or select.shape != (nk,):
            raise ValueError("combine_rows: select must be int64 with one entry per weight")
        bad = np.flatnonzero((select < 0) | (select >= nrows))
        if bad.size:
            k = int(bad[0])
            raise ValueError(f"combine_rows: select[{k}] = {select[k]} is not a row")
    elif nk > nrows:
        raise ValueError(f"combine_rows: {nk} weights but {nrows} rows")
    itemsize = out.dtype.itemsize
    if nk and (
        offset < 0 or offset % itemsize or row_bytes % itemsize or offset + out.nbytes > row_bytes
    ):
        raise ValueError(
            f"combine_rows: {out.nbytes} bytes at offset {offset} do not fit aligned in rows "
            f"of {row_bytes} bytes"
        )
    if out.size == 0:
        return out
    idx = np.arange(nk) if select is None else select
    block = rows[idx, offset : offset + out.nbytes] if nk else np.empty((0, out.nbytes), np.uint8)
    ys = np.ascontiguousarray(block).view(out.dtype)
    weighted_combine(out.reshape(-1), self_weight, x.reshape(-1), weights, ys)
    return out


# -- tensor fusion --------------------------------------------------------------------------
_ALIGN = 8  # bytes; every fused tensor starts on a multiple of this


class FusedEntry:
    """One queued nonblocking neighbor_allreduce (see ``_dispatch.FusedEntry``). Here the
    entry is what its handle calls to finish; the compiled entry is its own handle."""

    __slots__ = (
        "arr",
        "wrap",
        "error",
        "plan",
        "self_weight",
        "weights",
        "select",
        "offset",
        "check",
        "batch",
        "result",
        "failure",
        "queue",
    )

    def __call__(self) -> Any:
        if self.batch is None and self.failure is None:  # still queued: send the queue
            self.queue.flush()
        if self.failure is not None:
            raise self.failure
        self.batch.complete()
        result, self.result = self.result, None
        return result

    def test(self) -> bool:
        """Return whether calling the entry would not block (sends the queue if needed)."""
        if self.batch is None and self.failure is None:
            self.queue.flush()
        if self.failure is not None:
            return True  # calling it raises at once
        return self.batch.test()


class FusedBatch:
    """Entries sent in one message (see ``_dispatch.FusedBatch``)."""

    def __init__(
        self,
        entries: list,
        send: Any,
        recv: Any,
        request: Any,
        wait: Callable | None = None,
        test: Callable | None = None,
        trace: Callable | None = None,
    ) -> None:
        self.entries, self.send, self.recv, self.request = entries, send, recv, request
        self._wait, self._test, self._trace = wait, test, trace
        self.done = False
        for e in entries:
            e.batch = self

    def test(self) -> bool:
        """Return whether :meth:`complete` would not block."""
        if self.done:
            return True
        return bool(self.request.Test() if self._test is None else self._test())

    def complete(self) -> None:
        """Wait for the message and combine every entry's rows (once)."""
        if self.done:
            return
        tl = None if self._trace is None else self._trace()
        t = tl.clock_ns() if tl is not None else 0
        if self._wait is None:
            self.request.Wait()
        else:
            try:
                self._wait(self.request.Test, self.request.Wait)
            except BaseException as exc:  # e.g. the ranks disagree: every entry raises it
                for e in self.entries:
                    e.failure = exc
                self._release()
                raise
        if tl is not None:
            t = tl.since("COMMUNICATE", t)
        for e in self.entries:
            out = combine_rows(
                np.empty_like(e.arr), e.self_weight, e.arr, e.weights, self.recv, e.offset, e.select
            )
            e.result = out if e.wrap is None else e.wrap(out)
        if tl is not None:
            tl.since("FUSION_COPY_OUT", t)
        self.done = True
        self._release()

    def _release(self) -> None:
        # no reference cycle left (entries -> batch -> entries) for the garbage collector
        self.send = self.recv = self.request = None
        self.entries, self._wait, self._test, self._trace = [], None, None, None


_LEAN = (np.dtype(np.float64), np.dtype(np.float32))  # add_static's dtypes (native order)
_MASK = (1 << 64) - 1
_FNV_PRIME, _FNV_BASIS = 0x100000001B3, 0xCBF29CE484222325


def _mix(h: int, v: int) -> int:
    return ((h ^ (v & _MASK)) * _FNV_PRIME) & _MASK


def _entry_layout(h: int, arr: Any, plan: Any) -> int:
    dtype_key = _mix(_mix(_FNV_BASIS, zlib.crc32(arr.dtype.str.encode())), arr.dtype.num)
    plan_key = _mix(_mix(_FNV_BASIS, plan.fingerprint), 1 if plan.static else 2)
    for v in (dtype_key, len(arr.shape), *arr.shape, plan_key):
        h = _mix(h, v)
    return h


def layout_fingerprint(entries: Sequence[tuple[Any, Any]]) -> int:
    """The fingerprint of queued ``(arr, plan)`` pairs (see ``_dispatch.layout_fingerprint``)."""
    h = _FNV_BASIS
    for arr, plan in entries:
        h = _mix(h, 0) if arr is None else _entry_layout(h, arr, plan)
    return h >> 2


class FusionQueue:
    """Small nonblocking calls waiting to be sent together (see ``_dispatch.FusionQueue``)."""

    def __init__(
        self, threshold: int, flush_fn: Callable[[list, int, Any, Any], Any], table: HandleTable
    ) -> None:
        self.threshold, self._flush_fn, self._table = threshold, flush_fn, table
        self.static_plan: Any = None
        self._reset()

    def _reset(self) -> None:
        self._entries: list[FusedEntry] = []
        self._nbytes = 0
        self._layout, self._checked, self._error = _FNV_BASIS, False, None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def add_static(self, arr: Any) -> Handle | None:
        """Queue a plain float ndarray with ``static_plan`` (see ``_dispatch.FusionQueue``)."""
        if (
            self.static_plan is None
            or type(arr) is not np.ndarray
            or arr.dtype not in _LEAN
            or not arr.flags.c_contiguous
        ):
            return None
        return self.add(arr, self.static_plan)

    def add(self, arr, plan, wrap=None, error=None, check=True, name=None) -> Handle:
        """Queue ``arr`` combined by ``plan`` (self_weight, weights, select); return a handle."""
        size = 0 if arr is None else -(-arr.nbytes // _ALIGN) * _ALIGN
        if self._entries and self._nbytes + size > self.threshold:
            self.flush()
        e = FusedEntry()
        e.arr, e.plan, e.wrap, e.error, e.check, e.queue = arr, plan, wrap, error, check, self
        e.self_weight = e.weights = e.select = e.batch = e.result = e.failure = None
        if plan is not None:
            e.self_weight, e.weights, e.select = plan.self_weight, plan.weights, plan.select
        if arr is None:
            self._layout = _mix(self._layout, 0)
        else:
            self._layout = _entry_layout(self._layout, arr, plan)
        self._checked = self._checked or bool(check)
        if error is not None and self._error is None:
            self._error = error
        e.offset = self._nbytes
        self._entries.append(e)
        self._nbytes += size
        if size > self.threshold:  # too big to share a message: send it alone now
            self.flush()
        return self._table.start("neighbor_allreduce", e, e.test, name)

    def flush(self) -> None:
        """Send everything queued as one batch (collective: every rank flushes alike)."""
        if not self._entries:
            return
        entries, nbytes, error = self._entries, self._nbytes, self._error
        layout = self._layout >> 2 if self._checked else None
        self._reset()
        try:
            self._flush_fn(entries, nbytes, layout, error)
        except BaseException as exc:  # e.g. the ranks disagree: every entry's wait raises it
            for e in entries:
                e.failure = exc
            raise


def trace_now_ns() -> int:
    """The timeline's clock in ns (see ``_dispatch.trace_now_ns``)."""
    return time.perf_counter_ns()


class TraceRecorder:
    """The timeline's recorded events (see ``_dispatch.TraceRecorder``), in a list."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.depths: dict[int, int] = {}
        self.stacks: dict[int, list[int]] = {}
        self.offset = 0
        self.last_flush = 0
        self.timeline: Any = None
        self.tids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.events)

    def _ops(self) -> list[int]:
        return self.stacks.setdefault(threading.get_ident(), [])

    def _tid(self, track: str) -> int:
        tid = self.tids.get(track)
        return tid if tid is not None else self.timeline.tid(track)

    def op(self, name: str, track: str) -> TraceOp:
        return TraceOp(self, self._ops(), name, self._tid(track))

    def op_begin(self, name: str, track: str) -> int:
        tid = self._tid(track)
        self.open_span(self._ops(), tid, name)
        return tid

    def op_end(self, tid: int) -> None:
        self.close_span(self._ops(), tid)

    def open_span(self, ops: list, tid: int, name: str) -> None:
        self.events.append(("B", tid, time.perf_counter_ns() + self.offset, name, None))
        self.move(tid, 1)
        ops.append(tid)

    def close_span(self, ops: list, tid: int) -> None:
        ops.pop()
        t = time.perf_counter_ns() + self.offset
        self.events.append(("E", tid, t, None, None))
        self.move(tid, -1)
        if len(self.events) >= 100_000 or t - self.last_flush > 2_000_000_000:
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

    def format(self, t0: int, pids: list, quoted: dict) -> bytes:
        events, self.events = self.events, []
        return format_trace_events(events, t0, pids, quoted)


class TraceOp:
    """An op's span on a timeline (see ``_dispatch.TraceOp``)."""

    __slots__ = ("rec", "ops", "name", "tid")

    def __init__(self, rec: TraceRecorder, ops: list, name: str, tid: int) -> None:
        self.rec, self.ops, self.name, self.tid = rec, ops, name, tid

    def __enter__(self) -> None:
        self.rec.open_span(self.ops, self.tid, self.name)

    def __exit__(self, *exc_info: object) -> bool:
        self.rec.close_span(self.ops, self.tid)
        return False


class TracePhase:
    """A phase of the running op (see ``_dispatch.TracePhase``)."""

    __slots__ = ("rec", "name", "tid", "start")

    def __init__(self, rec: TraceRecorder, name: str, tid: int) -> None:
        self.rec, self.name, self.tid = rec, name, tid

    def __enter__(self) -> None:
        self.start = time.perf_counter_ns()

    def __exit__(self, *exc_info: object) -> bool:
        end = time.perf_counter_ns()
        rec = self.rec
        rec.events.append(("X", self.tid, self.start + rec.offset, self.name, end - self.start))
        return False


def format_trace_events(events: list, t0: int, pids: list, quoted: dict) -> bytes:
    """The timeline's events as Chrome-trace JSON (see ``_dispatch.format_trace_events``)."""
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
