"""Pure Python twins of ``_fusion.pyx``: tensor fusion, pack, combine_rows.

Used when the extension is not compiled; results are bit-identical (``combine_rows`` does
``weighted_combine``'s operations in its order). See ``_fusion.pyx`` for the contracts.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._fallback import weighted_combine
from ._fallback_handles import Handle, HandleTable

__all__ = [
    "FusedBatch",
    "FusedEntry",
    "FusionQueue",
    "combine_rows",
    "layout_fingerprint",
    "pack",
]


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


# -- the queue, its entries and batches ---------------------------------------------------
_ALIGN = 8  # bytes; every fused tensor starts on a multiple of this


class FusedEntry:
    """One queued nonblocking neighbor_allreduce (see ``_fusion.FusedEntry``). Here the
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
        "name",
        "batch",
        "result",
        "failure",
        "queue",
    )

    arr: Any  # None when this rank's arguments were bad (``error`` says why)
    wrap: Callable[[Any], Any] | None
    error: Exception | None
    plan: Any
    self_weight: Any
    weights: Any
    select: Any
    offset: int
    check: bool
    name: str | None
    batch: FusedBatch | None
    result: Any
    failure: BaseException | None
    queue: FusionQueue

    def __call__(self) -> Any:
        if self.batch is None and self.failure is None:  # still queued: send the queue
            self.queue.flush()
        if self.failure is not None:
            raise self.failure
        assert self.batch is not None  # sent: flush() gave it a batch, else a failure
        self.batch.complete()
        result, self.result = self.result, None
        return result

    def test(self) -> bool:
        """Return whether calling the entry would not block (sends the queue if needed)."""
        if self.batch is None and self.failure is None:
            self.queue.flush()
        if self.failure is not None:
            return True  # calling it raises at once
        assert self.batch is not None  # as in __call__
        return self.batch.test()


class FusedBatch:
    """Entries sent in one message (see ``_fusion.FusedBatch``)."""

    def __init__(
        self,
        entries: list[FusedEntry],
        send: Any,
        recv: Any,
        request: Any,
        wait: Callable[..., Any] | None = None,
        test: Callable[[], bool] | None = None,
        trace: Callable[[], Any] | None = None,
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
    """The fingerprint of queued ``(arr, plan)`` pairs (see ``_fusion.layout_fingerprint``)."""
    h = _FNV_BASIS
    for arr, plan in entries:
        h = _mix(h, 0) if arr is None else _entry_layout(h, arr, plan)
    return h >> 2


class FusionQueue:
    """Small nonblocking calls waiting to be sent together (see ``_fusion.FusionQueue``)."""

    def __init__(
        self,
        threshold: int,
        flush_fn: Callable[[list[FusedEntry], int, int | None, Exception | None], Any],
        table: HandleTable,
    ) -> None:
        self.threshold, self._flush_fn, self._table = threshold, flush_fn, table
        self.static_plan: Any = None
        self._reset()

    def _reset(self) -> None:
        self._entries: list[FusedEntry] = []
        self._nbytes = 0
        self._layout, self._checked = _FNV_BASIS, False
        self._error: Exception | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def add_static(self, arr: Any) -> Handle | None:
        """Queue a plain float ndarray with ``static_plan`` (see ``_fusion.FusionQueue``)."""
        if (
            self.static_plan is None
            or type(arr) is not np.ndarray
            or arr.dtype not in _LEAN
            or not arr.flags.c_contiguous
        ):
            return None
        return self.add(arr, self.static_plan)

    def add(
        self,
        arr: Any,
        plan: Any,
        wrap: Callable[[Any], Any] | None = None,
        error: Exception | None = None,
        check: bool = True,
        name: str | None = None,
    ) -> Handle:
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
        if name is not None:  # a call's name is part of what the ranks agree on
            self._layout = _mix(self._layout, _mix(_FNV_BASIS, zlib.crc32(name.encode())))
        self._checked = self._checked or bool(check)
        if error is not None and self._error is None:
            self._error = error
        e.offset, e.name = self._nbytes, name
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
