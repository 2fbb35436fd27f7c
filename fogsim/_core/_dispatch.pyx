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
from libc.stdint cimport int64_t
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdio cimport snprintf
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from libc.string cimport memcpy, memset

from ._kernels cimport rows_combine_f32, rows_combine_f64

__all__ = [
    "FusedBatch", "FusedEntry", "FusionQueue", "Handle", "HandleTable", "TraceOp",
    "TracePhase", "TraceRecorder", "combine_rows", "format_trace_events", "pack",
    "trace_now_ns",
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
        if self._done or self._test is None:
            return True
        return bool(self._test())

    cpdef complete(self):
        """Finish the operation (blocking) and keep its result for :meth:`wait`."""
        if self._done:
            return
        try:
            self._result = self._finish()
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
        """Complete every pending operation (results stay in their handles for wait())."""
        cdef Handle handle
        for handle in list(self._pending):
            handle.complete()

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
cdef Py_ssize_t _ALIGN = 8  # bytes; every fused tensor starts on a multiple of this


cdef class FusedEntry:
    """One nonblocking neighbor_allreduce waiting in a :class:`FusionQueue`, then in a batch.

    ``arr`` is None when this rank's arguments were bad (``error`` says why); ``wrap``
    turns the result into the caller's type (None: numpy). Calling the entry blocks until
    its batch arrived and returns its result (or raises the error that stopped the batch
    from being sent); :meth:`test` tells whether that is now.
    """

    cdef readonly object arr, wrap, error, plan
    cdef readonly double self_weight
    cdef readonly object weights, select
    cdef readonly Py_ssize_t offset
    cdef readonly bint check
    cdef char fmt  # b"d" / b"f": a C-contiguous float64 / float32 ndarray (lean combine)
    cdef public FusedBatch batch
    cdef object result
    cdef object failure  # the error that stopped its batch from being sent, if any
    cdef FusionQueue queue

    def __call__(self):
        if self.batch is None and self.failure is None:  # still queued: send the queue
            self.queue.flush()
        if self.failure is not None:
            raise self.failure
        self.batch.complete()
        result, self.result = self.result, None
        return result

    def test(self):
        """Return whether calling the entry would not block (sends the queue if needed)."""
        if self.batch is None and self.failure is None:
            self.queue.flush()
        if self.failure is not None:
            return True  # calling it raises at once
        return self.batch.done or bool(self.batch.request.Test())


cdef class FusedBatch:
    """Entries sent in one message; ``recv`` holds one row of bytes per in-neighbor."""

    cdef readonly list entries
    cdef public object send, recv, request
    cdef readonly bint done

    def __init__(self, list entries, send, recv, request):
        cdef FusedEntry e
        self.entries, self.send, self.recv, self.request = entries, send, recv, request
        for e in entries:
            e.batch = self

    def complete(self):
        """Wait for the message and combine every entry's rows (once)."""
        cdef FusedEntry e
        if self.done:
            return
        cdef Py_buffer rv
        self.request.Wait()
        PyObject_GetBuffer(self.recv, &rv, PyBUF_SIMPLE)
        try:
            for e in self.entries:
                if e.fmt:
                    out = _combine_entry(e, &rv, self.recv.shape[0], self.recv.strides[0])
                else:  # anything unusual: the checked general path
                    out = combine_rows(_empty_like(e.arr), e.self_weight, e.arr, e.weights,
                                       self.recv, e.offset, e.select)
                e.result = out if e.wrap is None else e.wrap(out)
        finally:
            PyBuffer_Release(&rv)
        self.done = True
        self.send = self.recv = self.request = None


cdef class FusionQueue:
    """Small nonblocking calls waiting to be sent together; flushed by ``flush_fn``.

    ``flush_fn(entries, nbytes)`` (the runtime's) agrees with the other ranks, packs and
    sends, and returns the :class:`FusedBatch`. The queue flushes itself before an entry
    that would overflow ``threshold`` bytes, and right after an entry larger than that.
    """

    cdef list _entries
    cdef Py_ssize_t _nbytes
    cdef readonly Py_ssize_t threshold
    cdef object _flush_fn
    cdef HandleTable _table

    def __init__(self, Py_ssize_t threshold, flush_fn, HandleTable table):
        self._entries, self._nbytes = [], 0
        self.threshold, self._flush_fn, self._table = threshold, flush_fn, table

    def __len__(self):
        return len(self._entries)

    @property
    def nbytes(self):
        return self._nbytes

    cpdef Handle add(self, arr, plan, wrap=None, error=None, bint check=True, name=None):
        """Queue ``arr`` combined by ``plan`` (self_weight, weights, select); return a handle."""
        cdef Py_ssize_t size = 0 if arr is None else (arr.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        cdef FusedEntry e = FusedEntry.__new__(FusedEntry)
        if self._entries and self._nbytes + size > self.threshold:
            self.flush()
        e.arr, e.plan, e.wrap, e.error, e.check, e.queue = arr, plan, wrap, error, check, self
        if plan is not None:
            e.self_weight, e.weights, e.select = plan.self_weight, plan.weights, plan.select
            e.fmt = _lean_format(arr, e.weights, e.select)
        e.offset = self._nbytes
        self._entries.append(e)
        self._nbytes += size
        if size > self.threshold:  # too big to share a message: send it alone now
            self.flush()
        return self._table.start("neighbor_allreduce", e, e.test, name)

    cpdef flush(self):
        """Send everything queued as one batch (collective: every rank flushes alike)."""
        if not self._entries:
            return
        cdef FusedEntry e
        entries, nbytes = self._entries, self._nbytes
        self._entries, self._nbytes = [], 0
        try:
            self._flush_fn(entries, nbytes)
        except BaseException as exc:  # e.g. the ranks disagree: every entry's wait raises it
            for e in entries:
                e.failure = exc
            raise


cdef object _np_empty_like = None


cdef object _empty_like(arr):
    global _np_empty_like
    if _np_empty_like is None:
        import numpy
        _np_empty_like = numpy.empty_like
    return _np_empty_like(arr)


cdef object _float64 = None
cdef object _float32 = None
cdef object _int64 = None
cdef object _ndarray = None


cdef char _lean_format(arr, weights, select) except -1:
    # b"d"/b"f" when the entry fits the lean combine (C-contiguous native float ndarray,
    # float64 weights, int64 select or none), else 0 for the checked general path.
    global _float64, _float32, _int64, _ndarray
    if _ndarray is None:
        import numpy
        _float64, _float32 = numpy.dtype(numpy.float64), numpy.dtype(numpy.float32)
        _int64, _ndarray = numpy.dtype(numpy.int64), numpy.ndarray
    if (type(arr) is not _ndarray or type(weights) is not _ndarray
            or weights.dtype != _float64 or not weights.flags.c_contiguous
            or not arr.flags.c_contiguous):
        return 0
    if select is not None and (type(select) is not _ndarray or select.dtype != _int64
                               or not select.flags.c_contiguous
                               or select.shape[0] != weights.shape[0]):
        return 0
    if arr.dtype == _float64:
        return b"d"
    if arr.dtype == _float32:
        return b"f"
    return 0


cdef object _combine_entry(FusedEntry e, Py_buffer* rv, Py_ssize_t nrows, Py_ssize_t row_bytes):
    # combine_rows for an entry _lean_format accepted: same loop, no format parsing.
    cdef Py_buffer o, xv, wv, sv
    cdef const int64_t* sel = NULL
    cdef Py_ssize_t k, nk, m, item = 8 if e.fmt == b"d" else 4
    out = _empty_like(e.arr)
    PyObject_GetBuffer(out, &o, PyBUF_SIMPLE | PyBUF_WRITABLE)
    PyObject_GetBuffer(e.arr, &xv, PyBUF_SIMPLE)
    PyObject_GetBuffer(e.weights, &wv, PyBUF_SIMPLE)
    if e.select is not None:
        PyObject_GetBuffer(e.select, &sv, PyBUF_SIMPLE)
        sel = <const int64_t*>sv.buf
    try:
        nk, m = wv.len // 8, o.len // item
        for k in range(nk):
            if not 0 <= (sel[k] if sel != NULL else k) < nrows:
                raise ValueError(f"fused combine: neighbor row {k} is not in the message")
        if nk and (e.offset % item or row_bytes % item or e.offset + o.len > row_bytes):
            raise ValueError(f"fused combine: {o.len} bytes at offset {e.offset} do not fit "
                             f"aligned in rows of {row_bytes} bytes")
        if m:
            with nogil:
                if item == 8:
                    rows_combine_f64(<double*>o.buf, m, e.self_weight, <const double*>xv.buf,
                                     nk, <const double*>(<const char*>rv.buf + e.offset),
                                     row_bytes // 8, sel, <const double*>wv.buf)
                else:
                    rows_combine_f32(<float*>o.buf, m, e.self_weight, <const float*>xv.buf,
                                     nk, <const float*>(<const char*>rv.buf + e.offset),
                                     row_bytes // 4, sel, <const double*>wv.buf)
    finally:
        if sel != NULL:
            PyBuffer_Release(&sv)
        PyBuffer_Release(&wv)
        PyBuffer_Release(&xv)
        PyBuffer_Release(&o)
    return out


# -- timeline -----------------------------------------------------------------------------------
cdef inline long long _now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <long long>t.tv_sec * 1000000000 + t.tv_nsec


def trace_now_ns():
    """The timeline's clock in ns (``CLOCK_MONOTONIC``, as ``time.perf_counter_ns``)."""
    return _now_ns()


cdef class _Text:
    cdef char* buf
    cdef Py_ssize_t n, cap

    def __cinit__(self):
        self.cap = 1 << 16
        self.buf = <char*>PyMem_Malloc(self.cap)
        if self.buf == NULL:
            raise MemoryError()
        self.n = 0

    def __dealloc__(self):
        PyMem_Free(self.buf)

    cdef int reserve(self, Py_ssize_t extra) except -1:
        cdef char* grown
        if self.n + extra <= self.cap:
            return 0
        while self.n + extra > self.cap:
            self.cap *= 2
        grown = <char*>PyMem_Realloc(self.buf, self.cap)
        if grown == NULL:
            raise MemoryError()
        self.buf = grown
        return 0

    cdef int add(self, const char* data, Py_ssize_t size) except -1:
        self.reserve(size)
        memcpy(self.buf + self.n, data, size)
        self.n += size
        return 0

    cdef int add_bytes(self, bytes data) except -1:
        return self.add(<const char*>data, len(data))


cdef inline char* _put(char* p, const char* text) noexcept nogil:
    while text[0]:
        p[0] = text[0]
        p += 1
        text += 1
    return p


cdef inline char* _put_int(char* p, long long v) noexcept nogil:
    """Write ``v >= 0`` in decimal (no snprintf: the timeline formats millions of these)."""
    cdef char tmp[24]
    cdef int k = 0
    if v == 0:
        p[0] = 48
        return p + 1
    while v > 0:
        tmp[k] = <char>(48 + v % 10)
        v //= 10
        k += 1
    while k > 0:
        k -= 1
        p[0] = tmp[k]
        p += 1
    return p


cdef inline char* _put_us(char* p, long long ns) noexcept nogil:
    """Write ``ns`` nanoseconds as microseconds with three decimals (``12.345``)."""
    cdef long long frac = ns % 1000
    p = _put_int(p, ns // 1000)
    p[0] = 46  # "."
    p[1] = <char>(48 + frac // 100)
    p[2] = <char>(48 + (frac // 10) % 10)
    p[3] = <char>(48 + frac % 10)
    return p + 4


cdef int _format_event(_Text out, char ph, long long tid, long long t, long long pid,
                       bytes name_q, long long d, object args) except -1:
    """Append one B, E or X event (``t``: ns since the origin; ``d``: X's duration)."""
    cdef char buf[192]
    cdef char* p
    if t < 0:
        t = 0
    if ph == b"E":
        p = _put(buf, b'{"ph":"E","ts":')
        p = _put_us(p, t)
        p = _put(p, b',"pid":')
        p = _put_int(p, pid)
        p = _put(p, b',"tid":')
        p = _put_int(p, tid)
        p[0] = 125  # "}"
        out.add(buf, p + 1 - buf)
        return 0
    out.add(b'{"name":', 8)
    out.add_bytes(name_q)
    if ph == b"X":
        if d < 0:
            d = 0
        p = _put(buf, b',"ph":"X","ts":')
        p = _put_us(p, t)
        p = _put(p, b',"dur":')
        p = _put_us(p, d)
        p = _put(p, b',"pid":')
        p = _put_int(p, pid)
        p = _put(p, b',"tid":')
        p = _put_int(p, tid)
        p[0] = 125
        out.add(buf, p + 1 - buf)
        return 0
    p = _put(buf, b',"ph":"B","ts":')
    p = _put_us(p, t)
    p = _put(p, b',"pid":')
    p = _put_int(p, pid)
    p = _put(p, b',"tid":')
    p = _put_int(p, tid)
    out.add(buf, p - buf)
    if args:
        import json

        out.add(b',"args":', 8)
        out.add_bytes(json.dumps(args).encode())
    out.add(b"}", 1)
    return 0


def format_trace_events(list events, long long t0, list pids, dict quoted):
    """Return ``events`` (the timeline's tuples) as Chrome-trace JSON objects, as bytes.

    ``events``: ``(ph, tid, ns, name, extra)`` with ``ph`` "B" (``extra``: args dict or
    None), "E", "X" (``extra``: duration in ns) or "J" (``name``: a preformatted object,
    written once); ``t0`` the clock's origin in ns; ``pids`` the process tracks to write
    each event for; ``quoted`` caches the JSON-quoted names as bytes (filled here).
    Timestamps are microseconds with three decimals. Objects are joined by ",\\n".
    :meth:`TraceRecorder.format` writes the same text from its C array.
    """
    cdef long long pid
    cdef bint first = True
    cdef _Text out = _Text()
    cdef tuple ev
    cdef str ph
    for k, pid_obj in enumerate(pids):
        pid = pid_obj
        for ev in events:
            ph = <str>ev[0]
            if ph == "J":
                if k == 0:
                    if not first:
                        out.add(b",\n", 2)
                    first = False
                    out.add_bytes((<str>ev[3]).encode())
                continue
            if not first:
                out.add(b",\n", 2)
            first = False
            if ph == "E":
                _format_event(out, b"E", ev[1], <long long>ev[2] - t0, pid, None, 0, None)
            elif ph == "X":
                _format_event(out, b"X", ev[1], <long long>ev[2] - t0, pid,
                              _quoted(ev[3], quoted), ev[4], None)
            else:
                _format_event(out, b"B", ev[1], <long long>ev[2] - t0, pid,
                              _quoted(ev[3], quoted), 0, ev[4])
    return PyBytes_FromStringAndSize(out.buf, out.n)


cdef struct _Event:
    char ph          # b"B", b"E", b"X" or b"J"
    int tid
    long long ns     # the timeline's clock (B, E, X)
    Py_ssize_t name  # B, X: index in names; J: index in objects (the preformatted text)
    Py_ssize_t obj   # B: index in objects of its args, or -1
    long long dur    # X: duration in ns


cdef class TraceRecorder:
    """The timeline's recorded events, in a C array (no Python object per event).

    Ops and phases (:class:`TraceOp`, :class:`TracePhase`) write straight into it; other
    events come through :meth:`append` as ``(ph, tid, ns, name, extra)`` (see
    :func:`format_trace_events`). :meth:`format` turns them into Chrome-trace JSON and
    empties it. ``offset`` (ns, added to the clock by ops and phases) and ``last_flush``
    belong to the timeline; ``depth(tid)`` counts the spans open on a track.
    """

    cdef _Event* ev
    cdef Py_ssize_t n, cap
    cdef list names, objects
    cdef dict ids
    cdef long long* depths
    cdef Py_ssize_t ndepths
    cdef dict stacks
    cdef public long long offset
    cdef public long long last_flush
    cdef public object timeline  # the owner: flush() and tid(track) for a new track
    cdef public dict tids  # track -> tid, the owner's

    def __cinit__(self):
        self.cap = 1024
        self.ev = <_Event*>PyMem_Malloc(self.cap * sizeof(_Event))
        if self.ev == NULL:
            raise MemoryError()
        self.n = 0
        self.names, self.objects, self.ids = [], [], {}
        self.depths, self.ndepths = NULL, 0
        self.stacks, self.tids = {}, {}

    def __dealloc__(self):
        PyMem_Free(self.ev)
        PyMem_Free(self.depths)

    def __len__(self):
        return self.n

    cdef list _ops(self):
        """The tracks (tids) of the ops running in the calling thread, innermost last."""
        ident = PyThread_get_thread_ident()
        ops = self.stacks.get(ident)
        if ops is None:
            ops = self.stacks[ident] = []
        return <list>ops

    cdef int _tid(self, str track) except -1:
        found = self.tids.get(track)
        return <int>found if found is not None else <int>self.timeline.tid(track)

    def op(self, str name, str track):
        """Return the span of op ``name`` on ``track`` (``with``); its phases nest inside."""
        cdef TraceOp op = TraceOp.__new__(TraceOp)  # no __init__ argument parsing
        op.timeline, op.rec, op.ops, op.tid = self.timeline, self, self._ops(), self._tid(track)
        op.name = self.intern(name)
        return op

    def phase(self, str name):
        """Return phase ``name`` (``with``) of the op running in this thread, or of track
        ``"fogsim"`` outside ops."""
        cdef list ops = self._ops()
        cdef TracePhase phase = TracePhase.__new__(TracePhase)
        phase.rec, phase.name = self, self.intern(name)
        phase.tid = <int>ops[len(ops) - 1] if ops else self._tid("fogsim")
        return phase

    def current_tid(self):
        """The tid of the op running in this thread, or None."""
        cdef list ops = self._ops()
        return ops[len(ops) - 1] if ops else None

    cdef Py_ssize_t intern(self, str name) except -1:
        cdef object found = self.ids.get(name)
        if found is not None:
            return <Py_ssize_t>found
        self.ids[name] = len(self.names)
        self.names.append(name)
        return len(self.names) - 1

    cdef int add(self, char ph, int tid, long long ns, Py_ssize_t name, Py_ssize_t obj,
                 long long dur) except -1:
        cdef _Event* grown
        if self.n == self.cap:
            grown = <_Event*>PyMem_Realloc(self.ev, 2 * self.cap * sizeof(_Event))
            if grown == NULL:
                raise MemoryError()
            self.ev, self.cap = grown, 2 * self.cap
        cdef _Event* e = &self.ev[self.n]
        e.ph, e.tid, e.ns, e.name, e.obj, e.dur = ph, tid, ns, name, obj, dur
        self.n += 1
        return 0

    cdef int move_depth(self, int tid, long long by) except -1:
        cdef long long* grown
        cdef Py_ssize_t k, size
        if tid < 0:
            raise ValueError(f"timeline: track id {tid} < 0")
        if tid >= self.ndepths:
            size = max(2 * self.ndepths, tid + 16)
            grown = <long long*>PyMem_Realloc(self.depths, size * sizeof(long long))
            if grown == NULL:
                raise MemoryError()
            for k in range(self.ndepths, size):
                grown[k] = 0
            self.depths, self.ndepths = grown, size
        self.depths[tid] += by
        return 0

    def depth(self, int tid):
        """The number of spans open on track ``tid``."""
        return self.depths[tid] if 0 <= tid < self.ndepths else 0

    def open_tracks(self):
        """``{tid: depth}`` of the tracks with spans still open."""
        return {k: self.depths[k] for k in range(self.ndepths) if self.depths[k] > 0}

    def append(self, str ph, int tid, long long ns, name, extra):
        """Record one event given as the tuple of :func:`format_trace_events` (the spans'
        depths are the caller's to move, with :meth:`move`)."""
        if ph == "B":
            obj = -1
            if extra:
                self.objects.append(extra)
                obj = len(self.objects) - 1
            self.add(b"B", tid, ns, self.intern(name), obj, 0)
        elif ph == "E":
            self.add(b"E", tid, ns, -1, -1, 0)
        elif ph == "X":
            self.add(b"X", tid, ns, self.intern(name), -1, extra)
        elif ph == "J":
            self.objects.append(name)
            self.add(b"J", 0, 0, len(self.objects) - 1, -1, 0)
        else:
            raise ValueError(f"timeline: unknown event phase {ph!r}")

    def move(self, int tid, long long by):
        """Change the number of spans open on track ``tid`` by ``by``."""
        self.move_depth(tid, by)

    def format(self, long long t0, list pids, dict quoted):
        """Return the events as Chrome-trace JSON (as :func:`format_trace_events` would)
        and forget them."""
        cdef _Text out = _Text()
        cdef Py_ssize_t i
        cdef long long pid
        cdef bint first = True
        cdef _Event* e
        cdef list names_q = [_quoted(name, quoted) for name in self.names]
        try:
            for k, pid_obj in enumerate(pids):
                pid = pid_obj
                for i in range(self.n):
                    e = &self.ev[i]
                    if e.ph == b"J":
                        if k == 0:
                            if not first:
                                out.add(b",\n", 2)
                            first = False
                            out.add_bytes((<str>self.objects[e.name]).encode())
                        continue
                    if not first:
                        out.add(b",\n", 2)
                    first = False
                    _format_event(out, e.ph, e.tid, e.ns - t0, pid,
                                  <bytes>names_q[e.name] if e.name >= 0 else None, e.dur,
                                  self.objects[e.obj] if e.obj >= 0 else None)
        finally:
            self.n = 0
            self.objects = []
        return PyBytes_FromStringAndSize(out.buf, out.n)


cdef bytes _quoted(name, dict quoted):
    q = quoted.get(name)
    if q is None:
        import json

        q = quoted[name] = json.dumps(name).encode()
    return <bytes>q


cdef class TraceOp:
    """An op's span on a timeline (``with``): begin/end events; its phases use its track.

    ``ops`` is the list of the tracks of the ops running in this thread; ``timeline`` is
    flushed when 100,000 events are waiting or 2 s have passed since its last flush.
    """

    cdef TraceRecorder rec
    cdef object timeline
    cdef list ops
    cdef Py_ssize_t name
    cdef int tid

    def __init__(self, timeline, TraceRecorder rec, list ops, str name, int tid):
        self.timeline, self.rec, self.ops, self.tid = timeline, rec, ops, tid
        self.name = rec.intern(name)

    def __enter__(self):
        cdef TraceRecorder rec = self.rec
        rec.add(b"B", self.tid, _now_ns() + rec.offset, self.name, -1, 0)
        rec.move_depth(self.tid, 1)
        self.ops.append(self.tid)

    def __exit__(self, *exc_info):
        cdef TraceRecorder rec = self.rec
        self.ops.pop()
        cdef long long t = _now_ns() + rec.offset
        rec.add(b"E", self.tid, t, -1, -1, 0)
        rec.move_depth(self.tid, -1)
        if rec.n >= 100000 or t - rec.last_flush > 2000000000:
            self.timeline.flush()
        return False


cdef class TracePhase:
    """A phase of the running op (``with``), recorded as one complete ("X") event."""

    cdef TraceRecorder rec
    cdef Py_ssize_t name
    cdef int tid
    cdef long long start

    def __init__(self, TraceRecorder rec, str name, int tid):
        self.rec, self.tid = rec, tid
        self.name = rec.intern(name)

    def __enter__(self):
        self.start = _now_ns()

    def __exit__(self, *exc_info):
        cdef long long end = _now_ns()
        self.rec.add(b"X", self.tid, self.start + self.rec.offset, self.name, -1,
                     end - self.start)
        return False
