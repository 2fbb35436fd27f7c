# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled tensor fusion: small nonblocking calls sent as one message, combined in place.

* :class:`FusionQueue`, :class:`FusedEntry`, :class:`FusedBatch`: small nonblocking calls
  queue as entries (each its own :class:`~fogsim._core.Handle`); a flush sends them in one
  message (a batch); the first wait on any of them combines every entry straight from the
  received bytes. :func:`layout_fingerprint` is the layout the ranks agree on.
* :func:`pack`: copy several arrays into one byte buffer at given offsets (the gaps are
  zeroed), so that fused tensors travel in one message.
* :func:`combine_rows`: the weighted combine of the neighbor rows of a received buffer,
  ``out <- self_weight * x + sum_k weights[k] * y_k`` with ``y_k`` read in place at a byte
  offset of row ``select[k]``: one fused tensor's share of a fused message is combined
  without being copied out first. Same operations, same order as ``weighted_combine``.

``_fallback_fusion`` is the pure-Python twin, bit-identical.
"""

from cpython.buffer cimport (
    PyBUF_C_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_Release,
    PyObject_GetBuffer,
)
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy, memset

cimport numpy as cnp

cnp.import_array()

from ._handles cimport Handle, HandleTable
from ._kernels cimport rows_combine_f32, rows_combine_f64

__all__ = [
    "FusedBatch", "FusedEntry", "FusionQueue", "combine_rows", "layout_fingerprint", "pack",
]


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


# -- the queue, its entries and batches ---------------------------------------------------
cdef Py_ssize_t _ALIGN = 8  # bytes; every fused tensor starts on a multiple of this


cdef class FusedEntry(Handle):
    """One nonblocking neighbor_allreduce waiting in a :class:`FusionQueue`, then in a batch;
    it is its own :class:`Handle` (one object per fused call).

    ``arr`` is None when this rank's arguments were bad (``error`` says why); ``wrap``
    turns the result into the caller's type (None: numpy). :meth:`wait` blocks until its
    batch arrived and returns its result (or raises the error that stopped the batch from
    being sent); :meth:`poll` tells whether that is now.
    """

    cdef readonly object arr, wrap, error, plan
    cdef readonly double self_weight
    cdef readonly object weights, select
    cdef readonly Py_ssize_t offset
    cdef readonly bint check
    cdef char fmt  # b"d" / b"f": a C-contiguous float64 / float32 ndarray (lean combine)
    cdef public FusedBatch batch
    cdef object failure  # the error that stopped its batch from being sent, if any
    cdef FusionQueue queue

    cpdef complete(self):
        """Send the queue if this call is still in it, wait for the batch and keep the
        result for :meth:`wait`."""
        if self._done:
            return
        if self._error is not None:
            raise self._error
        try:
            if self.batch is None and self.failure is None:  # still queued: send the queue
                self.queue.flush()
            if self.failure is not None:
                raise self.failure
            self.batch.complete()  # combines every entry of the batch into its _result
        except Exception as exc:
            self._error = exc
            raise
        finally:
            if self._table is not None:
                self._table._pending.discard(self)
                self._table = None
        self._done = True

    def poll(self):
        """Return True when :meth:`wait` would return without blocking (sends the queue
        if this call is still in it)."""
        self._check_live()
        if self._done or self._error is not None:
            return True
        if self.batch is None and self.failure is None:
            self.queue.flush()
        if self.failure is not None:
            return True  # waiting raises at once
        return self.batch.test()


cdef class FusedBatch:
    """Entries sent in one message; ``recv`` holds one row of bytes per in-neighbor.

    ``wait(test, block)``, if given, waits for ``request`` (the runtime's stall guard, or
    a function that also settles an agreement started beside the data: its exception
    fails every entry), else ``request.Wait()`` does; ``test()``, if given, tells whether
    that would not block, else ``request.Test()`` does. ``trace()``, if given, returns
    the running timeline or None when the batch completes: the wait is then recorded as
    phase ``COMMUNICATE`` and the combine as ``FUSION_COPY_OUT`` (each entry averaged out
    of the received bytes into its own result).
    """

    cdef readonly list entries
    cdef public object send, recv, request
    cdef readonly bint done
    cdef object _wait, _test, _trace

    def __init__(self, list entries, send, recv, request, wait=None, test=None, trace=None):
        cdef FusedEntry e
        self.entries, self.send, self.recv, self.request = entries, send, recv, request
        self._wait, self._test, self._trace = wait, test, trace
        for e in entries:
            e.batch = self

    def test(self):
        """Return whether :meth:`complete` would not block."""
        if self.done:
            return True
        return bool(self.request.Test() if self._test is None else self._test())

    def complete(self):
        """Wait for the message and combine every entry's rows (once)."""
        cdef FusedEntry e
        if self.done:
            return
        cdef Py_buffer rv
        tl = None if self._trace is None else self._trace()
        if tl is not None:
            t = tl.clock_ns()
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
        PyObject_GetBuffer(self.recv, &rv, PyBUF_SIMPLE)
        try:
            for e in self.entries:
                if e.fmt:
                    out = _combine_entry(e, &rv, self.recv.shape[0], self.recv.strides[0])
                else:  # anything unusual: the checked general path
                    out = combine_rows(_empty_like(e.arr), e.self_weight, e.arr, e.weights,
                                       self.recv, e.offset, e.select)
                e._result = out if e.wrap is None else e.wrap(out)
        finally:
            PyBuffer_Release(&rv)
        if tl is not None:
            tl.since("FUSION_COPY_OUT", t)
        self.done = True
        self._release()

    cdef void _release(self):
        # Done with the buffers, and with the entries: they refer to the batch, so keeping
        # them (or the wait function, which may refer to them) would make a reference cycle
        # per batch, left for the garbage collector (a full collection costs milliseconds).
        self.send = self.recv = self.request = None
        self.entries, self._wait, self._test, self._trace = None, None, None, None


cdef uint64_t _FNV_PRIME = 0x100000001b3
cdef uint64_t _FNV_BASIS = 0xcbf29ce484222325


cdef inline uint64_t _mix(uint64_t h, uint64_t v) noexcept:
    return (h ^ v) * _FNV_PRIME


cdef object _crc32 = None


cdef uint64_t _dtype_key(dtype) except? 0:
    # dtype.str ("<f8") tells byte order, kind and size apart; crc32 is the same everywhere
    global _crc32
    if _crc32 is None:
        from zlib import crc32 as _crc32
    return _mix(_mix(_FNV_BASIS, <uint64_t>_crc32(dtype.str.encode())), <uint64_t>dtype.num)


cdef uint64_t _name_key(name) except? 0:
    global _crc32
    if _crc32 is None:
        from zlib import crc32 as _crc32
    return _mix(_FNV_BASIS, <uint64_t>_crc32(name.encode()))


cdef uint64_t _plan_key(plan) except? 0:
    return _mix(_mix(_FNV_BASIS, <uint64_t>(<int64_t>plan.fingerprint)), 1 if plan.static else 2)


cdef uint64_t _entry_layout(uint64_t h, uint64_t dtype_key, shape, uint64_t plan_key) except? 0:
    # what every rank's entry must match: dtype, shape, the plan's fingerprint and kind
    cdef Py_ssize_t d
    h = _mix(_mix(h, dtype_key), <uint64_t>len(shape))
    for d in shape:
        h = _mix(h, <uint64_t>d)
    return _mix(h, plan_key)


def layout_fingerprint(entries):
    """The fingerprint :class:`FusionQueue` passes for ``entries`` (a list of
    ``(arr, plan)``; ``arr`` None for a bad argument): a 62-bit FNV-1a hash of each one's
    dtype, shape and plan, the same on every process."""
    cdef uint64_t h = _FNV_BASIS
    for arr, plan in entries:
        if arr is None:
            h = _mix(h, 0)
        else:
            h = _entry_layout(h, _dtype_key(arr.dtype), arr.shape, _plan_key(plan))
    return <int64_t>(h >> 2)


cdef class FusionQueue:
    """Small nonblocking calls waiting to be sent together; flushed by ``flush_fn``.

    ``flush_fn(entries, nbytes, layout, error)`` (the runtime's) agrees with the other
    ranks, packs and sends, and creates the :class:`FusedBatch`. ``layout`` is None when
    no entry asked for the check, else the entries' :func:`layout_fingerprint`, kept as
    they were added; ``error`` is the first entry's argument error, or None. The queue
    flushes itself before an entry that would overflow ``threshold`` bytes, and right
    after an entry larger than that.
    """

    cdef list _entries
    cdef Py_ssize_t _nbytes
    cdef readonly Py_ssize_t threshold
    cdef object _flush_fn
    cdef HandleTable _table
    cdef uint64_t _layout
    cdef bint _checked
    cdef object _error
    # the last dtype and plan seen, and what they add to the layout (most calls repeat them)
    cdef object _dtype, _plan
    cdef uint64_t _dtype_hash, _plan_hash
    cdef char _plan_lean  # the plan's weights and select fit the lean combine
    cdef public object static_plan  # what add_static() combines with (the runtime sets it)

    def __init__(self, Py_ssize_t threshold, flush_fn, HandleTable table):
        self._entries, self._nbytes = [], 0
        self.threshold, self._flush_fn, self._table = threshold, flush_fn, table
        self._reset()

    cdef void _reset(self):
        self._entries, self._nbytes = [], 0
        self._layout, self._checked, self._error = _FNV_BASIS, False, None

    def __len__(self):
        return len(self._entries)

    @property
    def nbytes(self):
        return self._nbytes

    cdef uint64_t _array_layout(self, cnp.ndarray a) except? 0:
        # _entry_layout of an exact ndarray, without Python objects for dtype and shape
        cdef int k, nd = cnp.PyArray_NDIM(a)
        cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(a)
        cdef uint64_t h
        if <void*>cnp.PyArray_DESCR(a) != <void*>self._dtype:
            self._dtype = <object>cnp.PyArray_DESCR(a)
            self._dtype_hash = _dtype_key(self._dtype)
        h = _mix(_mix(self._layout, self._dtype_hash), <uint64_t>nd)
        for k in range(nd):
            h = _mix(h, <uint64_t>dims[k])
        return _mix(h, self._plan_hash)

    cpdef Handle add_static(self, arr):
        """Queue ``arr`` combined by :attr:`static_plan` and return a handle, when ``arr`` is
        a C-contiguous native float64/float32 ndarray (the common call, checked here
        without Python-level work); else return None (the caller takes the general path)."""
        if self.static_plan is None or not cnp.PyArray_CheckExact(arr) or not _lean_array(arr):
            return None
        return self.add(arr, self.static_plan)

    cpdef Handle add(self, arr, plan, wrap=None, error=None, bint check=True, name=None):
        """Queue ``arr`` combined by ``plan`` (self_weight, weights, select); return a handle."""
        cdef Py_ssize_t size = 0
        if arr is not None:
            size = cnp.PyArray_NBYTES(<cnp.ndarray>arr) if cnp.PyArray_CheckExact(arr) else arr.nbytes
            size = (size + _ALIGN - 1) // _ALIGN * _ALIGN
        cdef FusedEntry e = FusedEntry.__new__(FusedEntry)
        if self._entries and self._nbytes + size > self.threshold:
            self.flush()
        e.arr, e.plan, e.wrap, e.error, e.check, e.queue = arr, plan, wrap, error, check, self
        if plan is not None:
            e.self_weight, e.weights, e.select = plan.self_weight, plan.weights, plan.select
            if plan is not self._plan:
                self._plan, self._plan_hash = plan, _plan_key(plan)
                self._plan_lean = _lean_plan(e.weights, e.select)
            if self._plan_lean:
                e.fmt = _lean_array(arr)
        if arr is None:
            self._layout = _mix(self._layout, 0)
        elif e.fmt:  # an exact ndarray: its dtype and shape straight from the struct
            self._layout = self._array_layout(<cnp.ndarray>arr)
        else:
            dtype = arr.dtype
            if dtype is not self._dtype:
                self._dtype, self._dtype_hash = dtype, _dtype_key(dtype)
            self._layout = _entry_layout(self._layout, self._dtype_hash, arr.shape,
                                         self._plan_hash)
        if name is not None:  # a call's name is part of what the ranks agree on
            self._layout = _mix(self._layout, _name_key(name))
        self._checked = self._checked or check
        if error is not None and self._error is None:
            self._error = error
        e.offset = self._nbytes
        e.op, e.name = "neighbor_allreduce", name
        self._entries.append(e)
        self._nbytes += size
        if size > self.threshold:  # too big to share a message: send it alone now
            self.flush()
        e._table = self._table  # in flight: the table completes it at shutdown if need be
        self._table._pending.add(e)
        return e

    cpdef flush(self):
        """Send everything queued as one batch (collective: every rank flushes alike)."""
        if not self._entries:
            return
        cdef FusedEntry e
        entries, nbytes, error = self._entries, self._nbytes, self._error
        layout = <int64_t>(self._layout >> 2) if self._checked else None
        self._reset()
        try:
            self._flush_fn(entries, nbytes, layout, error)
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


cdef _lean_init():
    global _float64, _float32, _int64, _ndarray
    import numpy
    _float64, _float32 = numpy.dtype(numpy.float64), numpy.dtype(numpy.float32)
    _int64, _ndarray = numpy.dtype(numpy.int64), numpy.ndarray


cdef char _lean_plan(weights, select) except -1:
    # 1 when a plan's weights (float64) and select (int64 or none) fit the lean combine
    if _ndarray is None:
        _lean_init()
    if (type(weights) is not _ndarray or weights.dtype != _float64
            or not weights.flags.c_contiguous):
        return 0
    if select is not None and (type(select) is not _ndarray or select.dtype != _int64
                               or not select.flags.c_contiguous
                               or select.shape[0] != weights.shape[0]):
        return 0
    return 1


cdef char _lean_array(arr) except -1:
    # b"d"/b"f" when an entry of a lean plan fits the lean combine (a C-contiguous native
    # float ndarray), else 0 for the checked general path.
    if not cnp.PyArray_CheckExact(arr):
        return 0
    cdef cnp.ndarray a = <cnp.ndarray>arr
    if not cnp.PyArray_IS_C_CONTIGUOUS(a) or not cnp.PyArray_ISNOTSWAPPED(a):
        return 0
    cdef int t = cnp.PyArray_TYPE(a)
    return b"d" if t == cnp.NPY_DOUBLE else b"f" if t == cnp.NPY_FLOAT else 0


cdef object _combine_entry(FusedEntry e, Py_buffer* rv, Py_ssize_t nrows, Py_ssize_t row_bytes):
    # combine_rows for an entry _lean_array accepted (a C-contiguous native float ndarray;
    # its plan's weights float64 and select int64 ndarrays): same loop, no format parsing.
    cdef cnp.ndarray x = <cnp.ndarray>e.arr
    cdef cnp.ndarray w = <cnp.ndarray>e.weights
    cdef const int64_t* sel = NULL
    cdef Py_ssize_t k, nk = cnp.PyArray_DIMS(w)[0], item = 8 if e.fmt == b"d" else 4
    cdef Py_ssize_t nbytes = cnp.PyArray_NBYTES(x), m = nbytes // item
    if e.select is not None:
        sel = <const int64_t*>cnp.PyArray_DATA(<cnp.ndarray>e.select)
    for k in range(nk):
        if not 0 <= (sel[k] if sel != NULL else k) < nrows:
            raise ValueError(f"fused combine: neighbor row {k} is not in the message")
    if nk and (e.offset % item or row_bytes % item or e.offset + nbytes > row_bytes):
        raise ValueError(f"fused combine: {nbytes} bytes at offset {e.offset} do not fit "
                         f"aligned in rows of {row_bytes} bytes")
    cdef cnp.ndarray out = cnp.PyArray_EMPTY(cnp.PyArray_NDIM(x), cnp.PyArray_DIMS(x),
                                             cnp.PyArray_TYPE(x), 0)
    cdef void* o = cnp.PyArray_DATA(out)
    cdef const void* xp = cnp.PyArray_DATA(x)
    cdef const double* wp = <const double*>cnp.PyArray_DATA(w)
    if m:
        with nogil:
            if item == 8:
                rows_combine_f64(<double*>o, m, e.self_weight, <const double*>xp, nk,
                                 <const double*>(<const char*>rv.buf + e.offset),
                                 row_bytes // 8, sel, wp)
            else:
                rows_combine_f32(<float*>o, m, e.self_weight, <const float*>xp, nk,
                                 <const float*>(<const char*>rv.buf + e.offset),
                                 row_bytes // 4, sel, wp)
    return out
