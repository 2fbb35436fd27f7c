# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled dispatch of the distributed runtimes: handles, the handle table, tensor fusion.

* :class:`Handle` and :class:`HandleTable`: a nonblocking op returns a handle; the table
  (one per backend instance, never a module global) holds the operations in flight with the
  callables that complete them, so ``shutdown()`` can finish what is left. ``wait()``
  completes an operation, drops it from the table and releases the handle.
* :func:`pack`: copy several arrays into one byte buffer at given offsets (the gaps are
  zeroed), so that fused tensors travel in one message.
* :class:`FusionQueue`, :class:`FusedEntry`, :class:`FusedBatch`: tensor fusion. Small
  nonblocking calls queue as entries; a flush sends them in one message (a batch); the
  first wait on any of them combines every entry straight from the received bytes.
* :func:`combine_rows`: the weighted combine of the neighbor rows of a received buffer,
  ``out <- self_weight * x + sum_k weights[k] * y_k`` with ``y_k`` read in place at a byte
  offset of row ``select[k]``: one fused tensor's share of a fused message is combined
  without being copied out first. Same operations, same order as ``weighted_combine``.

* :class:`TraceRecorder`, :class:`TraceOp`, :class:`TracePhase`: the timeline's events,
  recorded into a C array (ops and phases without a Python object per event), and
  :func:`format_trace_events`: events as Chrome-trace JSON text.

``_fallback`` has numpy twins of all of them, bit-identical, for builds without a compiler.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
cimport cython
from libc.stdint cimport int64_t, uint64_t
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdio cimport snprintf
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from libc.string cimport memcpy, memset

cimport numpy as cnp

cnp.import_array()

from ._kernels cimport rows_combine_f32, rows_combine_f64

__all__ = [
    "FusedBatch", "FusedEntry", "FusionQueue", "Handle", "HandleTable", "TraceOp",
    "TracePhase", "TraceRecorder", "combine_rows", "format_trace_events",
    "layout_fingerprint", "pack", "trace_now_ns",
]


cdef class Handle:
    """A pending operation; :func:`fogsim.wait` returns its result, :func:`fogsim.poll` tests it.

    A backend that computes eagerly creates a completed handle with :meth:`completed`; one
    that overlaps communication passes ``finish`` (blocks and returns the result) and
    ``test`` (returns whether ``finish`` would return at once). A handle is released by
    :meth:`wait`: waiting or polling it again raises ``ValueError``.
    """

    cdef readonly str op
    cdef readonly object name
    cdef object _finish
    cdef object _test
    cdef object _result
    cdef bint _done
    cdef bint _released
    cdef object _error  # the exception the operation failed with, raised by every wait
    cdef HandleTable _table  # the table holding this handle while it is in flight, or None

    def __init__(self, str op, finish, test=None, name=None):
        self.op = op
        self.name = name
        self._finish = finish
        self._test = test

    @classmethod
    def completed(cls, str op, result, name=None):
        """Return a handle whose operation has already finished with ``result``."""
        cdef Handle handle = cls(op, None, None, name)
        handle._result = result
        handle._done = True
        return handle

    cdef int _check_live(self) except -1:
        if self._released:
            raise ValueError(f"{self!r} was already waited on; wait() releases a handle")
        return 0

    def poll(self):
        """Return True when :meth:`wait` would return without blocking."""
        self._check_live()
        if self._done or self._test is None or self._error is not None:
            return True
        return bool(self._test())

    cpdef complete(self):
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
        finally:
            if self._table is not None:
                self._table._pending.discard(self)
                self._table = None
        self._done = True
        self._finish = self._test = None

    def wait(self):
        """Block until the operation finishes, release the handle, and return the result."""
        self._check_live()
        self.complete()
        self._released = True
        result, self._result = self._result, None
        return result

    def __repr__(self):
        state = "released" if self._released else "done" if self._done else "pending"
        label = f" name={self.name!r}" if self.name else ""
        return f"<fogsim.Handle {self.op}{label} {state}>"


cdef class HandleTable:
    """The in-flight operations of one world; a handle leaves the table when completed.

    Owned by a backend instance, so ``shutdown()`` can complete what is still in flight
    and a second world keeps its own handles.
    """

    cdef set _pending

    def __init__(self):
        self._pending = set()

    cpdef Handle start(self, str op, finish, test=None, name=None):
        """Register a pending operation and return its handle."""
        cdef Handle handle = Handle(op, finish, test, name)
        handle._table = self
        self._pending.add(handle)
        return handle

    def drain(self):
        """Complete every pending operation (results stay in their handles for wait()).

        An operation that fails is dropped from the table; its error is raised by wait().
        """
        cdef Handle handle
        for handle in list(self._pending):
            try:
                handle.complete()
            except Exception:  # wait() on the handle raises it again
                continue

    def __len__(self):
        return len(self._pending)


def pack(out, arrays, offsets):
    """Copy the bytes of each array to ``out`` at its offset; zero the bytes in between.

    ``out`` is a writable contiguous buffer, ``arrays`` C-contiguous arrays, ``offsets`` one
    byte offset per array, ascending, each array ending before the next one starts.
    """
    cdef Py_buffer dst, src
    cdef Py_ssize_t k, n = len(arrays), at, end = 0
    if len(offsets) != n:
        raise ValueError(f"pack: {n} arrays but {len(offsets)} offsets")
    PyObject_GetBuffer(out, &dst, PyBUF_SIMPLE | PyBUF_WRITABLE)
    try:
        for k in range(n):
            at = offsets[k]
            PyObject_GetBuffer(arrays[k], &src, PyBUF_C_CONTIGUOUS)
            try:
                if at < end or at + src.len > dst.len:
                    raise ValueError(
                        f"pack: array {k} ({src.len} bytes at offset {at}) overlaps the "
                        f"previous one or runs past the {dst.len}-byte buffer"
                    )
                memset(<char*>dst.buf + end, 0, at - end)
                memcpy(<char*>dst.buf + at, src.buf, src.len)
                end = at + src.len
            finally:
                PyBuffer_Release(&src)
        memset(<char*>dst.buf + end, 0, dst.len - end)
    finally:
        PyBuffer_Release(&dst)
    return out


cdef char _real_format(Py_buffer* view):
    # 'd' or 'f' for native float64/float32 buffers, else 0.
    cdef bytes fmt = view.format if view.format != NULL else b"B"
    if fmt[:1] in (b"@", b"=", b"<"):
        fmt = fmt[1:]
    if fmt == b"d" and view.itemsize == 8:
        return b"d"
    if fmt == b"f" and view.itemsize == 4:
        return b"f"
    return 0


def combine_rows(out, double self_weight, x, weights, recv, Py_ssize_t offset=0, select=None):
    """``out <- self_weight * x + sum_k weights[k] * y_k``, ``y_k`` read in place from ``recv``.

    ``out`` and ``x`` are C-contiguous float64 or float32 buffers of the same size and
    format; ``recv`` is a C-contiguous array whose first axis lists the received rows (any
    dtype); ``y_k`` is
    ``x.nbytes`` bytes of row ``select[k]`` (``k`` without ``select``) from byte ``offset``.
    ``weights`` (float64) and ``select`` (int64) are contiguous, one entry per term.
    """
    cdef Py_buffer o, xv, rv, wv, sv
    cdef bint have_select = select is not None
    cdef Py_ssize_t m, nk, nrows, row_bytes, k
    cdef char fmt
    cdef const int64_t* sel = NULL
    if recv.ndim < 1:
        raise ValueError("combine_rows: recv must have a first axis of rows")
    nrows, row_bytes = recv.shape[0], recv.strides[0]
    PyObject_GetBuffer(out, &o, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    PyObject_GetBuffer(x, &xv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    PyObject_GetBuffer(recv, &rv, PyBUF_C_CONTIGUOUS)
    PyObject_GetBuffer(weights, &wv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    if have_select:
        PyObject_GetBuffer(select, &sv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
    try:
        fmt = _real_format(&o)
        if fmt == 0 or _real_format(&xv) != fmt or o.len != xv.len:
            raise TypeError("combine_rows: out and x must be float64 or float32 buffers of "
                            "one format and size")
        if _real_format(&wv) != b"d":
            raise TypeError("combine_rows: weights must be float64")
        nk = wv.len // 8
        m = o.len // o.itemsize
        if have_select:
            if sv.itemsize != 8 or sv.len // 8 != nk:
                raise ValueError("combine_rows: select must be int64 with one entry per weight")
            sel = <const int64_t*>sv.buf
            for k in range(nk):
                if not 0 <= sel[k] < nrows:
                    raise ValueError(f"combine_rows: select[{k}] = {sel[k]} is not a row")
        elif nk > nrows:
            raise ValueError(f"combine_rows: {nk} weights but {nrows} rows")
        if nk and (offset < 0 or offset % o.itemsize or row_bytes % o.itemsize
                   or offset + o.len > row_bytes):
            raise ValueError(f"combine_rows: {o.len} bytes at offset {offset} do not fit "
                             f"aligned in rows of {row_bytes} bytes")
        if m == 0:
            return out
        with nogil:
            if fmt == b"d":
                rows_combine_f64(<double*>o.buf, m, self_weight, <const double*>xv.buf, nk,
                                 <const double*>(<const char*>rv.buf + offset),
                                 row_bytes // 8, sel, <const double*>wv.buf)
            else:
                rows_combine_f32(<float*>o.buf, m, self_weight, <const float*>xv.buf, nk,
                                 <const float*>(<const char*>rv.buf + offset),
                                 row_bytes // 4, sel, <const double*>wv.buf)
    finally:
        if have_select:
            PyBuffer_Release(&sv)
        PyBuffer_Release(&wv)
        PyBuffer_Release(&rv)
        PyBuffer_Release(&xv)
        PyBuffer_Release(&o)
    return out


# -- tensor fusion ------------------------------------------------------------------------------
# FusedEntry, FusedBatch, FusionQueue, layout_fingerprint.
include "_fusion.pxi"


# -- timeline -----------------------------------------------------------------------------------
# The timeline's clock, recorder, op and phase spans and Chrome-trace formatting.
include "_trace.pxi"
