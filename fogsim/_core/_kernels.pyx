# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled kernels of the combine step ``X <- W X``; see :mod:`fogsim._core`.

The ``cdef ... noexcept nogil`` kernels (declared in ``_kernels.pxd``) trust their arguments.
The ``def`` wrappers check types and shapes through ``_checks``, which the numpy fallback
shares, scan index ranges (and the weights ``_checks`` says to scan) in C, and run the kernel
without the GIL. Sums are formed in double whatever the data dtype: every step is
``acc = acc + w * v`` in double (the float64 weight as given, float32 data widened exactly)
with the product rounded first, and a float32 result is rounded once, when stored. setup.py
compiles with -ffp-contract=off so that no FMA changes the bits. Large outputs are written
with SSE2 streaming stores (``STREAM_MIN_BYTES``), whose C helpers do the same operations in
the same order.
"""

from cpython.dict cimport PyDict_Next
from cpython.list cimport PyList_Check, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.long cimport PyLong_AsLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.ref cimport PyObject
from libc.float cimport DBL_MAX
from libc.math cimport fabs
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport qsort

import numpy as np

cimport numpy as cnp

from . import _checks

cnp.import_array()

__all__ = [
    "Combiner",
    "assemble_csr",
    "circulant_combine",
    "csr_combine",
    "csr_combine_rows",
    "dicts_unchanged",
    "dicts_watch",
    "weighted_combine",
]

# Elements per block in the blocked loops: a block of out (16 KB of doubles) stays in L1
# while every neighbor's contribution is added to it.
cdef enum:
    _BLOCK = 2048
    # Rows per block when per-agent weights of a one-value-per-agent x are staged in a
    # stack buffer (16 KB of doubles for _CHUNK + 1 terms).
    _WBLOCK = 512
    # Rows at most this long are sorted by insertion, longer ones by qsort.
    _SHORT_ROW = 32
    # Bytes of x the circulant kernel expects to stay cached (in L2) while the rows that read
    # them are done, and the shortest column range it splits long rows into (see
    # circulant_combine_kernel).
    _SPAN_BYTES = 1048576
    _MIN_RUN_BYTES = 8192
    # Kernels that do one row at a time stream their stores only for rows of at least this
    # many bytes: below, the per-row overhead and gathering rows of x dominate.
    _STREAM_ROW_BYTES = 1024

# Column indices are int32, so no valid index reaches this (= _checks.MAX_AGENTS).
cdef Py_ssize_t _MAX_AGENTS = 2**31

# Outputs of at least this many bytes are written with streaming (non-temporal) stores, which
# go to memory without first reading the cache line (a plain store reads it, so each output
# byte costs three transfers instead of two, against memcpy's two) and do not evict the
# sources from the cache. A smaller output is likely still cached when the next step reads it,
# so it is stored plainly. Measured on a Xeon with 2 MB of L2 per core and a shared 105 MB L3,
# a step on 8 MB states was 30% slower streamed, one on 16 MB states 20% faster.
STREAM_MIN_BYTES = 16 << 20
cdef Py_ssize_t _stream_min_bytes = STREAM_MIN_BYTES

include "_stream.pxi"

def _set_stream_min_bytes(nbytes):
    """Set the output size from which kernels stream their stores; return the old one.

    For tests, which force either path; not thread-safe against running kernels.
    """
    global _stream_min_bytes
    old = _stream_min_bytes
    _stream_min_bytes = max(0, int(nbytes))
    return old


# --- kernels ---------------------------------------------------------------------------------

# Each pass adds up to _CHUNK neighbor terms in one loop, so out is loaded and stored once per
# _CHUNK neighbors instead of once per neighbor; the per-element operations and their order
# are those of one pass per term.
cdef enum:
    _CHUNK = 3

# What a pass stores: double into the accumulator (the passes before the last), the data type
# into out (the last pass). Sums are always formed in double, so float32 data is rounded once.
ctypedef fused store_t:
    float
    double


cdef inline void _pass(
    Py_ssize_t cnt,
    store_t* dst,
    const double* acc,
    const real_t* x0,
    double w0,
    Py_ssize_t nt,
    const real_t** src,
    const double* w,
) noexcept nogil:
    # dst <- (w0 * x0 if x0 else acc) + w[0] * src[0] + ... + w[nt-1] * src[nt-1], left to
    # right in double, converted to store_t on the store, for 0 <= nt <= _CHUNK (nt >= 1
    # without x0). x0 and acc may be dst. A sum kept in dst itself is read through dst: the
    # compiler cannot tell that acc is dst and would take its unvectorized path for overlap.
    cdef Py_ssize_t c
    cdef const real_t* s0 = src[0] if nt > 0 else NULL
    cdef const real_t* s1 = src[1] if nt > 1 else NULL
    cdef const real_t* s2 = src[2] if nt > 2 else NULL
    cdef double a = w[0] if nt > 0 else 0
    cdef double b = w[1] if nt > 1 else 0
    cdef double e = w[2] if nt > 2 else 0
    if x0 != NULL:
        if nt == 0:
            for c in range(cnt):
                dst[c] = <store_t>(w0 * x0[c])
        elif nt == 1:
            for c in range(cnt):
                dst[c] = <store_t>(w0 * x0[c] + a * s0[c])
        elif nt == 2:
            for c in range(cnt):
                dst[c] = <store_t>(w0 * x0[c] + a * s0[c] + b * s1[c])
        else:
            for c in range(cnt):
                dst[c] = <store_t>(w0 * x0[c] + a * s0[c] + b * s1[c] + e * s2[c])
    elif <const void*>acc == <const void*>dst:
        if nt == 1:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a * s0[c])
        elif nt == 2:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a * s0[c] + b * s1[c])
        else:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a * s0[c] + b * s1[c] + e * s2[c])
    elif nt == 1:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a * s0[c])
    elif nt == 2:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a * s0[c] + b * s1[c])
    else:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a * s0[c] + b * s1[c] + e * s2[c])


cdef inline void _pass_w(
    Py_ssize_t cnt,
    store_t* dst,
    const double* acc,
    const real_t* x0,
    const double* w0,
    Py_ssize_t nt,
    const real_t** src,
    const double** w,
) noexcept nogil:
    # _pass with one weight per element: dst[c] <- w0[c] * x0[c] + w[0][c] * src[0][c] + ...
    cdef Py_ssize_t c
    cdef const real_t* s0 = src[0] if nt > 0 else NULL
    cdef const real_t* s1 = src[1] if nt > 1 else NULL
    cdef const real_t* s2 = src[2] if nt > 2 else NULL
    cdef const double* a = w[0] if nt > 0 else NULL
    cdef const double* b = w[1] if nt > 1 else NULL
    cdef const double* e = w[2] if nt > 2 else NULL
    if x0 != NULL:
        if nt == 0:
            for c in range(cnt):
                dst[c] = <store_t>(w0[c] * x0[c])
        elif nt == 1:
            for c in range(cnt):
                dst[c] = <store_t>(w0[c] * x0[c] + a[c] * s0[c])
        elif nt == 2:
            for c in range(cnt):
                dst[c] = <store_t>(w0[c] * x0[c] + a[c] * s0[c] + b[c] * s1[c])
        else:
            for c in range(cnt):
                dst[c] = <store_t>(w0[c] * x0[c] + a[c] * s0[c] + b[c] * s1[c] + e[c] * s2[c])
    elif <const void*>acc == <const void*>dst:
        if nt == 1:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a[c] * s0[c])
        elif nt == 2:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a[c] * s0[c] + b[c] * s1[c])
        else:
            for c in range(cnt):
                dst[c] = <store_t>(dst[c] + a[c] * s0[c] + b[c] * s1[c] + e[c] * s2[c])
    elif nt == 1:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a[c] * s0[c])
    elif nt == 2:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a[c] * s0[c] + b[c] * s1[c])
    else:
        for c in range(cnt):
            dst[c] = <store_t>(acc[c] + a[c] * s0[c] + b[c] * s1[c] + e[c] * s2[c])


cdef inline bint _streams(Py_ssize_t count, size_t itemsize) noexcept nogil:
    # Whether an output of count items is large enough to be written with streaming stores.
    return <size_t>count * itemsize >= <size_t>_stream_min_bytes


cdef inline void _pass_stream(
    Py_ssize_t cnt,
    real_t* dst,
    const double* acc,
    const real_t* x0,
    double w0,
    Py_ssize_t nt,
    const real_t** src,
    const double* w,
    bint beyond,
) noexcept nogil:
    # The last _pass (into out), writing dst with streaming stores. The sources are
    # prefetched ahead, past cnt if beyond (where they continue).
    if real_t is double:
        fogsim_pass_stream_f64(cnt, dst, acc, x0, w0, nt, src, w, beyond)
    else:
        fogsim_pass_stream_f32(cnt, dst, acc, x0, w0, nt, src, w, beyond)


cdef inline void _pass_w_stream(
    Py_ssize_t cnt,
    real_t* dst,
    const double* acc,
    const real_t* x0,
    const double* w0,
    Py_ssize_t nt,
    const real_t** src,
    const double** w,
    bint beyond,
) noexcept nogil:
    # The last _pass_w (into out), writing dst with streaming stores.
    if real_t is double:
        fogsim_pass_w_stream_f64(cnt, dst, acc, x0, w0, nt, src, w, beyond)
    else:
        fogsim_pass_w_stream_f32(cnt, dst, acc, x0, w0, nt, src, w, beyond)


cdef inline double* _accumulator(real_t* out, double* buf, bint stream) noexcept nogil:
    # Where the passes before the last keep a block's sums: out itself for float64 data that
    # is not streamed (the sums already are out's type, and out is then read in place), else
    # the double buffer buf.
    if real_t is double:
        if not stream:
            return out
    return buf


cdef inline void _step(
    Py_ssize_t cnt,
    real_t* out,
    double* acc,
    bint last,
    bint stream,
    const real_t* x0,
    double w0,
    Py_ssize_t nt,
    const real_t** src,
    const double* w,
    bint beyond,
) noexcept nogil:
    # One pass over a block whose sums are kept in acc = _accumulator(out, buf, stream): into
    # acc, or, if last, into out (streamed if stream). float64 passes that do not stream all
    # go through one call of _pass (acc is out): a second inlined copy of it made the kernels
    # 10% slower on memory-bound float64 steps.
    if last and stream:
        _pass_stream(cnt, out, acc, x0, w0, nt, src, w, beyond)
    elif real_t is double:
        _pass(cnt, acc, acc, x0, w0, nt, src, w)
    elif last:
        _pass(cnt, out, acc, x0, w0, nt, src, w)
    else:
        _pass(cnt, acc, acc, x0, w0, nt, src, w)


cdef inline void _step_w(
    Py_ssize_t cnt,
    real_t* out,
    double* acc,
    bint last,
    bint stream,
    const real_t* x0,
    const double* w0,
    Py_ssize_t nt,
    const real_t** src,
    const double** w,
    bint beyond,
) noexcept nogil:
    # _step with one weight per element (_pass_w).
    if last and stream:
        _pass_w_stream(cnt, out, acc, x0, w0, nt, src, w, beyond)
    elif real_t is double:
        _pass_w(cnt, acc, acc, x0, w0, nt, src, w)
    elif last:
        _pass_w(cnt, out, acc, x0, w0, nt, src, w)
    else:
        _pass_w(cnt, acc, acc, x0, w0, nt, src, w)


cdef inline Py_ssize_t _block_end(
    const real_t* base, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t size
) noexcept nogil:
    # End of the block of at most size elements from start, before stop: moved back to a cache
    # line boundary of base when it stays past start, so that the streaming stores of one
    # block fill whole lines.
    cdef Py_ssize_t end = start + size
    cdef uintptr_t rem
    if end >= stop:
        return stop
    rem = <uintptr_t>(base + end) & 63
    if rem % sizeof(real_t) == 0 and <Py_ssize_t>(rem // sizeof(real_t)) < size:
        end -= <Py_ssize_t>(rem // sizeof(real_t))
    return end


cdef inline void _rows_combine(
    real_t* out,
    Py_ssize_t m,
    double self_weight,
    const real_t* x,
    Py_ssize_t nk,
    const real_t* base,
    Py_ssize_t stride,
    const int64_t* select,
    const double* weights,
) noexcept nogil:
    # out <- self_weight * x + weights[0] * y_0 + ... + weights[nk-1] * y_{nk-1}, where
    # y_k = base + r * stride for r = select[k] (or k without select), in blocks of out.
    cdef Py_ssize_t start, cnt, k, t, nt
    cdef const real_t* src[_CHUNK]
    cdef double w[_CHUNK]
    cdef double buf[_BLOCK]
    cdef double* acc
    start = 0
    while start < m:
        cnt = min(<Py_ssize_t>_BLOCK, m - start)
        acc = _accumulator(out + start, buf, False)
        k = 0
        while True:
            nt = min(<Py_ssize_t>_CHUNK, nk - k)
            for t in range(nt):
                src[t] = base + (select[k + t] if select != NULL else k + t) * stride + start
                w[t] = weights[k + t]
            _step(cnt, out + start, acc, k + nt >= nk, False, x + start if k == 0 else NULL,
                  self_weight, nt, src, w, False)
            k += nt
            if k >= nk:
                break
        start += cnt


cdef void weighted_combine_kernel(
    real_t[::1] out,
    double self_weight,
    const real_t[::1] x,
    const double[::1] weights,
    const real_t[:, ::1] ys,
) noexcept nogil:
    cdef Py_ssize_t m = x.shape[0], nk = ys.shape[0]
    if m == 0:
        return
    _rows_combine(&out[0], m, self_weight, &x[0], nk, &ys[0, 0] if nk else NULL, m, NULL,
                  &weights[0] if nk else NULL)


cdef void rows_combine_f64(
    double* out, Py_ssize_t m, double self_weight, const double* x, Py_ssize_t nk,
    const double* base, Py_ssize_t stride, const int64_t* select, const double* weights,
) noexcept nogil:
    _rows_combine(out, m, self_weight, x, nk, base, stride, select, weights)


cdef void rows_combine_f32(
    float* out, Py_ssize_t m, double self_weight, const float* x, Py_ssize_t nk,
    const float* base, Py_ssize_t stride, const int64_t* select, const double* weights,
) noexcept nogil:
    _rows_combine(out, m, self_weight, x, nk, base, stride, select, weights)


# The csr and circulant kernels compute out in blocks of at most _BLOCK elements (rows, or a
# column range of long rows) and add the neighbor terms in passes of up to _CHUNK over a
# block. The passes before the last keep the block's sums in double (see _accumulator); the
# last one writes out, rounded to its type, with streaming stores when the output is large
# (see STREAM_MIN_BYTES), so out is written once, without being read. Either way each
# element gets the same operations in the same order.

cdef void csr_combine_kernel(
    const int64_t[::1] indptr,
    const int32_t[::1] indices,
    const double[::1] data,
    const double[::1] self_weight,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
    Py_ssize_t start,
    Py_ssize_t stop,
) noexcept nogil:
    if start >= stop or x.shape[1] == 0:
        return
    _csr_combine(&indptr[0], &indices[0] if indices.shape[0] else NULL,
                 &data[0] if data.shape[0] else NULL, &self_weight[0], &x[0, 0], &out[0, 0],
                 x.shape[0], x.shape[1], start, stop)


cdef void _csr_combine(
    const int64_t* ip,
    const int32_t* ix,
    const double* dp,
    const double* sp,
    const real_t* xp,
    real_t* op,
    Py_ssize_t n,
    Py_ssize_t m,
    Py_ssize_t start,
    Py_ssize_t stop,
) noexcept nogil:
    # csr_combine_kernel on raw pointers (x and out: n rows of m, C order; start < stop, m > 0)
    cdef Py_ssize_t i, c0, c1, t, nt
    cdef int64_t p, end
    cdef double acc
    cdef const real_t* src[_CHUNK]
    cdef double w[_CHUNK]
    # the block's sums, 64-byte aligned (see _circulant_combine)
    cdef double buf_space[_BLOCK + 8]
    cdef double* buf = <double*>((<uintptr_t>&buf_space[0] + 63) & ~(<uintptr_t>63))
    cdef double* ab
    cdef real_t* dst
    cdef const real_t* x0
    cdef bint stream
    # Streaming stores pay off here only for long rows: with short ones, what dominates is
    # gathering the rows of x, which the stores then compete with for fill buffers (with
    # random neighbors, 256-byte rows took 10% longer streamed, 1 KB rows 5% less). The
    # choice depends on the whole of out, not on [start, stop), so that a row range is
    # written as csr_combine writes those rows.
    stream = (_streams(n * m, sizeof(real_t))
              and m * <Py_ssize_t>sizeof(real_t) >= _STREAM_ROW_BYTES)
    if m == 1:
        # One value per agent: keep the sum in a register.
        for i in range(start, stop):
            acc = sp[i] * xp[i]
            for p in range(ip[i], ip[i + 1]):
                acc = acc + dp[p] * xp[ix[p]]
            op[i] = <real_t>acc
    else:
        for i in range(start, stop):
            # Columns [c0, c1) of row i: all of them unless m > _BLOCK.
            c0 = 0
            while c0 < m:
                c1 = _block_end(op + i * m, c0, m, _BLOCK)
                dst = op + i * m + c0
                ab = _accumulator(dst, buf, stream)
                x0 = xp + i * m + c0
                p = ip[i]
                end = ip[i + 1]
                while True:
                    nt = min(<int64_t>_CHUNK, end - p)
                    for t in range(nt):
                        src[t] = xp + <Py_ssize_t>ix[p + t] * m + c0
                        w[t] = dp[p + t]
                    _step(c1 - c0, dst, ab, p + nt >= end, stream, x0, sp[i], nt, src, w, False)
                    x0 = NULL
                    p += nt
                    if p >= end:
                        break
                c0 = c1
    if stream:
        fogsim_stream_fence()


cdef void circulant_combine_kernel(
    const int64_t[::1] offsets,
    const double[::1] weights,
    bint weights_per_row,
    const double[::1] self_weight,
    bint self_per_row,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
) noexcept nogil:
    if x.shape[0] == 0 or x.shape[1] == 0:
        return
    _circulant_combine(&offsets[0] if offsets.shape[0] else NULL, offsets.shape[0],
                       &weights[0] if weights.shape[0] else NULL, weights_per_row,
                       &self_weight[0], self_per_row, &x[0, 0], &out[0, 0],
                       x.shape[0], x.shape[1])


cdef inline void _circulant_combine(
    const int64_t* off,
    Py_ssize_t nk,
    const double* wp,
    bint weights_per_row,
    const double* sp,
    bint self_per_row,
    const real_t* xp,
    real_t* op,
    Py_ssize_t n,
    Py_ssize_t m,
) noexcept nogil:
    # circulant_combine_kernel on raw pointers (x and out: n rows of m, C order; n, m > 0)
    cdef Py_ssize_t p, t, k, nt, done, lo, hi, r0, r1, r, c0, c1, cw, e0, e1, stop
    cdef Py_ssize_t rows_per_block, span, gap, d0, d1, dw
    cdef Py_ssize_t shift[_CHUNK]
    cdef Py_ssize_t kk[_CHUNK]
    cdef const real_t* src[_CHUNK]
    cdef const double* wrow[_CHUNK]
    cdef double w[_CHUNK]
    cdef double sw
    # Per-row weights of one block of a one-value-per-agent x.
    cdef double wbuf[_CHUNK + 1][_WBLOCK]
    # the block's sums, 64-byte aligned (where the frame puts an array is the compiler's
    # choice, and a block that straddles cache lines cost this kernel 10-30%)
    cdef double buf_space[_BLOCK + 8]
    cdef double* buf = <double*>((<uintptr_t>&buf_space[0] + 63) & ~(<uintptr_t>63))
    cdef double* ab
    cdef real_t* dst
    cdef bint any_per_row = weights_per_row or self_per_row
    cdef bint stream, last
    # Per-row weights with m > 1 are applied one row at a time, which only long rows stream.
    stream = _streams(n * m, sizeof(real_t)) and (
        not any_per_row or m == 1 or m * <Py_ssize_t>sizeof(real_t) >= _STREAM_ROW_BYTES)
    rows_per_block = max(<Py_ssize_t>1, <Py_ssize_t>_BLOCK // m)
    if any_per_row and m == 1:
        rows_per_block = _WBLOCK
    # Row j of x is read by the rows j - s for s in {0} + offsets, which lie within
    # n - (largest circular gap between consecutive s) rows. Rows are done in order, so for a
    # range of x to stay cached until its last reader, that many ranges must fit in the cache:
    # long rows are done by column ranges [c0, c1), each for all rows, of _SPAN_BYTES over
    # that count. Not if they would be shorter than _MIN_RUN_BYTES, though: such short runs
    # of memory cost more than the misses they save.
    span = m
    if nk:
        gap = n - off[nk - 1]
        for k in range(nk):
            gap = max(gap, off[k] - (off[k - 1] if k else 0))
        span = _SPAN_BYTES // (n - gap + 1)
        if span < _MIN_RUN_BYTES:
            span = m
        else:
            # ceil(m / span) ranges of equal width.
            span = max(<Py_ssize_t>1, span // <Py_ssize_t>sizeof(real_t))
            span = (m + (m + span - 1) // span - 1) // ((m + span - 1) // span)
    c0 = 0
    while c0 < m:
        c1 = _block_end(op, c0, m, span)
        cw = c1 - c0
        # Rows [n - off[p], n - off[p-1]) wrap around for exactly the offsets k >= p; those
        # sources have smaller indices, so the rows add k = p..K-1 first, then k = 0..p-1.
        # p = K covers [0, n - off[K-1]) and p = 0 covers [n - off[0], n).
        for p in range(nk, -1, -1):
            lo = n - off[p] if p < nk else 0
            hi = n - off[p - 1] if p > 0 else n
            if not any_per_row:
                # The same weights for every row: whole rows make one run of elements
                # [lo * m, hi * m), blocked regardless of row boundaries; column ranges make
                # one run per row.
                r = lo
                while r < hi:
                    if cw == m:
                        e0 = lo * m
                        stop = hi * m
                        r = hi
                    else:
                        e0 = r * m + c0
                        stop = e0 + cw
                        r += 1
                    while e0 < stop:
                        e1 = _block_end(op, e0, stop, _BLOCK)
                        ab = _accumulator(op + e0, buf, stream)
                        done = 0
                        while True:
                            nt = min(<Py_ssize_t>_CHUNK, nk - done)
                            for t in range(nt):
                                k = p + done + t
                                if k < nk:
                                    src[t] = xp + e0 + (off[k] - n) * m
                                else:
                                    k = k - nk
                                    src[t] = xp + e0 + off[k] * m
                                w[t] = wp[k]
                            _step(e1 - e0, op + e0, ab, done + nt >= nk, stream,
                                  xp + e0 if done == 0 else NULL, sp[0], nt, src, w, True)
                            done += nt
                            if done >= nk:
                                break
                        e0 = e1
                continue
            r0 = lo
            while r0 < hi:
                r1 = min(r0 + rows_per_block, hi)
                # Columns [d0, d1) of rows [r0, r1): of one row if the range is longer
                # than _BLOCK.
                d0 = c0
                while d0 < c1:
                    d1 = _block_end(op + r0 * m, d0, c1, _BLOCK)
                    dw = d1 - d0
                    done = 0
                    while True:
                        nt = min(<Py_ssize_t>_CHUNK, nk - done)
                        last = done + nt >= nk
                        for t in range(nt):
                            k = p + done + t
                            if k < nk:
                                shift[t] = off[k] - n
                            else:
                                k = k - nk
                                shift[t] = off[k]
                            kk[t] = k
                        if m == 1:
                            for t in range(nt):
                                src[t] = xp + r0 + shift[t]
                                for r in range(r0, r1):
                                    wbuf[t + 1][r - r0] = (
                                        wp[kk[t] * n + r] if weights_per_row else wp[kk[t]])
                                wrow[t] = wbuf[t + 1]
                            if done == 0:
                                for r in range(r0, r1):
                                    wbuf[0][r - r0] = sp[r] if self_per_row else sp[0]
                            _step_w(r1 - r0, op + r0, _accumulator(op + r0, buf, stream), last,
                                    stream, xp + r0 if done == 0 else NULL, wbuf[0], nt, src,
                                    wrow, True)
                        else:
                            for r in range(r0, r1):
                                for t in range(nt):
                                    src[t] = xp + (r + shift[t]) * m + d0
                                    w[t] = wp[kk[t] * n + r] if weights_per_row else wp[kk[t]]
                                sw = sp[r] if self_per_row else sp[0]
                                dst = op + r * m + d0
                                _step(dw, dst, _accumulator(dst, &buf[(r - r0) * dw], stream),
                                      last, stream, xp + r * m + d0 if done == 0 else NULL, sw,
                                      nt, src, w, True)
                        done += nt
                        if done >= nk:
                            break
                    d0 = d1
                r0 = r1
        c0 = c1
    if stream:
        fogsim_stream_fence()


# --- value scans (the wording of errors is left to _checks) ----------------------------------

cdef bint _all_finite(const double[::1] a) noexcept nogil:
    # Integer arithmetic on the bits, because a float compare does not vectorize here: a
    # double is not finite iff its 11 exponent bits are all set, and then adding one to the
    # exponent field carries into the sign bit.
    cdef Py_ssize_t c, cnt = a.shape[0]
    cdef const uint64_t* bits
    cdef uint64_t acc = 0
    if cnt == 0:
        return True
    bits = <const uint64_t*>&a[0]
    for c in range(cnt):
        acc |= (bits[c] & 0x7FF0000000000000ULL) + 0x0010000000000000ULL
    return (acc >> 63) == 0


cdef bint _csr_structure_ok(
    const int64_t[::1] indptr,
    const int32_t[::1] indices,
    Py_ssize_t n,
    Py_ssize_t start,
    Py_ssize_t stop,
) noexcept nogil:
    # What rows [start, stop) read: indptr[start..stop] and their entries (all of them for
    # 0, n, where indptr[n] = nnz bounds the rest).
    cdef Py_ssize_t i, p, nnz = indices.shape[0]
    cdef const int64_t* ip = &indptr[0]
    cdef const int32_t* ix
    # n <= 2**31 after this, so the unsigned compare also rejects negative indices.
    cdef uint32_t limit = <uint32_t>min(n, _MAX_AGENTS)
    cdef uint64_t values = <uint64_t>ip[start], steps = 0
    cdef uint32_t bad = 0
    if ip[0] != 0 or ip[n] != nnz:
        return False
    # SSE2 has no 64-bit compare, so use bits: once every entry is in [0, 2**62), a
    # decreasing step shows as the sign bit of the (wrapped) difference.
    for i in range(start, stop):
        values |= <uint64_t>ip[i + 1]
        steps |= <uint64_t>ip[i + 1] - <uint64_t>ip[i]
    if (values >> 62) or (steps >> 63) or ip[stop] > nnz:
        return False
    if ip[stop] > ip[start]:
        ix = &indices[0]
        for p in range(ip[start], ip[stop]):
            bad |= <uint32_t>ix[p] >= limit
    return bad == 0


cdef bint _offsets_ok(const int64_t[::1] offsets, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(offsets.shape[0]):
        if offsets[k] < 1 or offsets[k] > n - 1:
            return False
        if k and offsets[k] <= offsets[k - 1]:
            return False
    return True


cdef _reraise(check, args):
    check(*args)
    raise AssertionError(f"_checks.{check.__name__} passed what the C scan rejected")


# --- wrappers --------------------------------------------------------------------------------

def weighted_combine(out, self_weight, x, weights, ys):
    """Combine a vector with received neighbor buffers, weighted.

    ``out <- self_weight * x + weights[0] * ys[0] + weights[1] * ys[1] + ...``, in that order.
    """
    cdef double sw = _checks.weighted_combine_args(out, self_weight, x, weights, ys)
    cdef const double[::1] w = weights
    cdef double[::1] od
    cdef const double[::1] xd
    cdef const double[:, ::1] yd
    cdef float[::1] of
    cdef const float[::1] xf
    cdef const float[:, ::1] yf
    if not _all_finite(w):
        _reraise(_checks.finite, ("weights", weights))
    if x.dtype == _checks.FLOAT64:
        od, xd, yd = out, x, ys
        with nogil:
            weighted_combine_kernel(od, sw, xd, w, yd)
    else:
        of, xf, yf = out, x, ys
        with nogil:
            weighted_combine_kernel(of, sw, xf, w, yf)
    return out


def csr_combine(indptr, indices, data, self_weight, x, out):
    """Apply a weight matrix given as its diagonal and its off-diagonal part in CSR form.

    ``out[i] <- self_weight[i] * x[i] + sum_{p = indptr[i]}^{indptr[i+1]-1} data[p] *
    x[indices[p]]``, accumulated in ``p`` order.
    """
    _checks.csr_combine_args(indptr, indices, data, self_weight, x, out)
    cdef Py_ssize_t n = x.shape[0]
    cdef const int64_t[::1] ip = indptr
    cdef const int32_t[::1] ix = indices
    cdef const double[::1] d = data
    cdef const double[::1] sw = self_weight
    cdef const double[:, ::1] xd
    cdef double[:, ::1] od
    cdef const float[:, ::1] xf
    cdef float[:, ::1] of
    cdef bint ok
    with nogil:
        ok = _csr_structure_ok(ip, ix, n, 0, n)
    if not ok:
        _reraise(_checks.csr_structure, (indptr, indices, n))
    if x.dtype == _checks.FLOAT64:
        xd, od = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xd, od, 0, n)
    else:
        xf, of = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xf, of, 0, n)
    return out


def csr_combine_rows(indptr, indices, data, self_weight, x, out, start, stop):
    """Compute rows ``[start, stop)`` of :func:`csr_combine`, leaving the other rows of out.

    Each of those rows gets ``csr_combine``'s operations in its order (its bits); only the
    entries those rows read are checked, so a caller may do a matrix in several ranges.
    """
    _checks.csr_combine_args(indptr, indices, data, self_weight, x, out)
    cdef Py_ssize_t n = x.shape[0]
    cdef Py_ssize_t r0, r1
    r0, r1 = _checks.row_range(start, stop, n)
    cdef const int64_t[::1] ip = indptr
    cdef const int32_t[::1] ix = indices
    cdef const double[::1] d = data
    cdef const double[::1] sw = self_weight
    cdef const double[:, ::1] xd
    cdef double[:, ::1] od
    cdef const float[:, ::1] xf
    cdef float[:, ::1] of
    cdef bint ok
    with nogil:
        ok = _csr_structure_ok(ip, ix, n, r0, r1)
    if not ok:
        _reraise(_checks.csr_row_structure, (indptr, indices, n, r0, r1))
    if x.dtype == _checks.FLOAT64:
        xd, od = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xd, od, r0, r1)
    else:
        xf, of = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xf, of, r0, r1)
    return out


def circulant_combine(offsets, weights, self_weight, x, out):
    """Apply a circulant weight matrix: agent i receives from ``(i + offsets[k]) % n``.

    ``out[i] <- self_weight[i] * x[i] + sum_k weights[k](i) * x[(i + offsets[k]) % n]``,
    accumulated by ascending source index.
    """
    _checks.circulant_combine_args(offsets, weights, self_weight, x, out)
    cdef Py_ssize_t n = x.shape[0]
    cdef const int64_t[::1] off = offsets
    cdef const double[::1] w = weights.reshape(-1)
    cdef const double[::1] sw = self_weight.reshape(-1)
    cdef bint w_rows = weights.ndim == 2
    cdef bint s_rows = sw.shape[0] != 1
    cdef const double[:, ::1] xd
    cdef double[:, ::1] od
    cdef const float[:, ::1] xf
    cdef float[:, ::1] of
    if not _offsets_ok(off, n):
        _reraise(_checks.offsets, (offsets, n))
    # Only weights shared by all agents are scanned (see _checks).
    if not w_rows and not _all_finite(w):
        _reraise(_checks.finite, ("weights", weights))
    if not s_rows and not _all_finite(sw):
        _reraise(_checks.finite, ("self_weight", self_weight))
    if x.dtype == _checks.FLOAT64:
        xd, od = x, out
        with nogil:
            circulant_combine_kernel(off, w, w_rows, sw, s_rows, xd, od)
    else:
        xf, of = x, out
        with nogil:
            circulant_combine_kernel(off, w, w_rows, sw, s_rows, xf, of)
    return out


cdef class Combiner:
    """One weight matrix's arrays, checked once, applied to many ``x``.

    ``Combiner.circulant(offsets, weights, self_weight, n)`` and ``Combiner.csr(indptr,
    indices, data, self_weight, n)`` check what :func:`circulant_combine` and
    :func:`csr_combine` check of these arrays (types, shapes, offsets, indices, the scanned
    weights) and make their index arrays read-only; ``apply(x, out)`` then checks only ``x``
    and ``out`` (C-contiguous float32 or float64 of n rows, one shape and dtype, not
    overlapping), through numpy's C API rather than buffers, and gives the same bits as
    those functions. For a plan applied at every step: on small states the per-call checks
    of those functions cost more than the sums.
    """

    cdef readonly Py_ssize_t n
    cdef bint _circ, _w_rows, _s_rows
    cdef Py_ssize_t _nk
    cdef const int64_t* _off
    cdef const double* _w
    cdef const double* _sw
    cdef const int64_t[::1] _ip
    cdef const int32_t[::1] _ix
    cdef const double[::1] _d
    cdef const double[::1] _swv
    cdef object _arrays  # what the pointers point into, kept alive

    def __init__(self):
        raise TypeError("use Combiner.circulant(...) or Combiner.csr(...)")

    @staticmethod
    def circulant(offsets, weights, self_weight, n):
        """Check a circulant matrix's arrays for ``n`` agents (see circulant_combine)."""
        cdef Combiner c = Combiner.__new__(Combiner)
        probe = np.empty((_checks.count("n", n), 0))
        _checks.circulant_combine_args(offsets, weights, self_weight, probe, np.empty_like(probe))
        c.n = probe.shape[0]
        cdef const int64_t[::1] off = _frozen(offsets)
        cdef const double[::1] w = weights.reshape(-1)
        cdef const double[::1] sw = self_weight.reshape(-1)
        c._circ = True
        c._w_rows = weights.ndim == 2
        c._s_rows = sw.shape[0] != 1
        if not _offsets_ok(off, c.n):
            _reraise(_checks.offsets, (offsets, c.n))
        if not c._w_rows and not _all_finite(w):
            _reraise(_checks.finite, ("weights", weights))
        if not c._s_rows and not _all_finite(sw):
            _reraise(_checks.finite, ("self_weight", self_weight))
        c._nk = off.shape[0]
        c._off = &off[0] if off.shape[0] else NULL
        c._w = &w[0] if w.shape[0] else NULL
        c._sw = &sw[0]
        c._arrays = (offsets, weights, self_weight)
        return c

    @staticmethod
    def csr(indptr, indices, data, self_weight, n):
        """Check a CSR matrix's arrays for ``n`` agents (see csr_combine)."""
        cdef Combiner c = Combiner.__new__(Combiner)
        cdef bint ok
        probe = np.empty((_checks.count("n", n), 0))
        _checks.csr_combine_args(indptr, indices, data, self_weight, probe, np.empty_like(probe))
        c.n = probe.shape[0]
        cdef const int64_t[::1] ip = _frozen(indptr)
        cdef const int32_t[::1] ix = _frozen(indices)
        cdef const double[::1] d = data
        cdef const double[::1] sw = self_weight
        with nogil:
            ok = _csr_structure_ok(ip, ix, c.n, 0, c.n)
        if not ok:
            _reraise(_checks.csr_structure, (indptr, indices, c.n))
        c._circ = False
        c._ip, c._ix, c._d, c._swv = ip, ix, d, sw
        c._arrays = (indptr, indices, data, self_weight)
        return c

    def apply(self, x, out):
        """``out <- W x`` for C-contiguous (n, m) ``x`` and ``out``; returns ``out``."""
        cdef cnp.ndarray xa, oa
        cdef int kind
        cdef Py_ssize_t rows, m, nbytes
        cdef char* xp
        cdef char* op
        if not (cnp.PyArray_Check(x) and cnp.PyArray_Check(out)):
            _checks.array("x", x, None, 2)
            _checks.array("out", out, None, 2)
        xa, oa = x, out
        kind = cnp.PyArray_TYPE(xa)
        if (kind != cnp.NPY_DOUBLE and kind != cnp.NPY_FLOAT) or cnp.PyArray_ISBYTESWAPPED(xa):
            _checks.array("x", x, None, 2)  # words the error
            raise TypeError(f"x must have dtype float32 or float64 in native byte order, "
                            f"got {x.dtype}")
        if cnp.PyArray_NDIM(xa) != 2 or cnp.PyArray_NDIM(oa) != 2:
            raise ValueError(f"x and out must be 2-D, got shapes {x.shape} and {out.shape}")
        if not cnp.PyArray_IS_C_CONTIGUOUS(xa) or not cnp.PyArray_IS_C_CONTIGUOUS(oa):
            raise ValueError("x and out must be C-contiguous")
        if cnp.PyArray_TYPE(oa) != kind or cnp.PyArray_ISBYTESWAPPED(oa):
            raise TypeError(f"out must have x's dtype {x.dtype}, got {out.dtype}")
        if not cnp.PyArray_ISWRITEABLE(oa):
            raise ValueError("out is read-only")
        rows, m = cnp.PyArray_DIM(xa, 0), cnp.PyArray_DIM(xa, 1)
        if rows != self.n:
            raise ValueError(f"x has {rows} rows; this matrix combines {self.n}")
        if cnp.PyArray_DIM(oa, 0) != rows or cnp.PyArray_DIM(oa, 1) != m:
            raise ValueError(f"out must have shape {x.shape}, got {out.shape}")
        if m == 0:
            return out
        xp, op = <char*>cnp.PyArray_DATA(xa), <char*>cnp.PyArray_DATA(oa)
        nbytes = rows * m * cnp.PyArray_ITEMSIZE(xa)
        if op < xp + nbytes and xp < op + nbytes:
            raise ValueError("out must not share memory with x")
        if not self._circ:
            if kind == cnp.NPY_DOUBLE:
                with nogil:
                    _csr_combine(&self._ip[0], &self._ix[0] if self._ix.shape[0] else NULL,
                                 &self._d[0] if self._d.shape[0] else NULL, &self._swv[0],
                                 <const double*>xp, <double*>op, self.n, m, 0, self.n)
            else:
                with nogil:
                    _csr_combine(&self._ip[0], &self._ix[0] if self._ix.shape[0] else NULL,
                                 &self._d[0] if self._d.shape[0] else NULL, &self._swv[0],
                                 <const float*>xp, <float*>op, self.n, m, 0, self.n)
        elif kind == cnp.NPY_DOUBLE:
            with nogil:
                _circulant_combine(self._off, self._nk, self._w, self._w_rows, self._sw,
                                   self._s_rows, <const double*>xp, <double*>op, self.n, m)
        else:
            with nogil:
                _circulant_combine(self._off, self._nk, self._w, self._w_rows, self._sw,
                                   self._s_rows, <const float*>xp, <float*>op, self.n, m)
        return out


# --- dicts_watch / dicts_unchanged -----------------------------------------------------------

cdef extern from *:
    """
    /* CPython gives every dict a version tag that changes whenever the dict does (PEP 509);
       it is deprecated from 3.12, so it is read only before that. */
    #if !defined(PYPY_VERSION) && PY_VERSION_HEX < 0x030C0000
    #define FOGSIM_DICT_VERSIONS 1
    static unsigned long long fogsim_dict_version(PyObject *d) {
        return (unsigned long long)((PyDictObject *)d)->ma_version_tag;
    }
    #else
    #define FOGSIM_DICT_VERSIONS 0
    static unsigned long long fogsim_dict_version(PyObject *d) { (void)d; return 0; }
    #endif
    """
    bint FOGSIM_DICT_VERSIONS
    unsigned long long fogsim_dict_version(PyObject* d)


cdef class _Watch:
    """The dicts of one sequence, by address, and their version tags when seen."""

    cdef tuple _items  # holds them alive, so no other dict takes an address
    cdef Py_ssize_t _count
    cdef PyObject** _ptrs
    cdef uint64_t* _versions

    def __dealloc__(self):
        PyMem_Free(self._ptrs)
        PyMem_Free(self._versions)


def dicts_watch(rows):
    """Return what :func:`dicts_unchanged` needs to tell that the dicts of the list or tuple
    ``rows`` are the same objects, none changed since (None where that cannot be told:
    other items, or a Python without dict version tags, 3.12 and later)."""
    if not FOGSIM_DICT_VERSIONS or not isinstance(rows, (list, tuple)):
        return None
    cdef _Watch w = _Watch.__new__(_Watch)
    w._items = tuple(rows)
    w._count = len(w._items)
    w._ptrs = <PyObject**>PyMem_Realloc(NULL, max(w._count, 1) * sizeof(PyObject*))
    w._versions = <uint64_t*>PyMem_Realloc(NULL, max(w._count, 1) * sizeof(uint64_t))
    if w._ptrs == NULL or w._versions == NULL:
        raise MemoryError()
    cdef Py_ssize_t i
    for i in range(w._count):
        item = w._items[i]
        if type(item) is not dict:
            return None
        w._ptrs[i] = <PyObject*>item
        w._versions[i] = fogsim_dict_version(<PyObject*>item)
    return w


def dicts_unchanged(rows, _Watch watched):
    """Whether the list or tuple ``rows`` holds the dicts :func:`dicts_watch` saw, in
    order, none changed: one pointer and one version compare per agent, without reading
    the dicts."""
    cdef Py_ssize_t i, count = watched._count
    cdef PyObject* d
    cdef bint is_list = PyList_Check(rows)
    if not is_list and not PyTuple_Check(rows):
        return False
    if (PyList_GET_SIZE(rows) if is_list else PyTuple_GET_SIZE(rows)) != count:
        return False
    for i in range(count):
        d = PyList_GET_ITEM(rows, i) if is_list else PyTuple_GET_ITEM(rows, i)
        if d != watched._ptrs[i] or fogsim_dict_version(d) != watched._versions[i]:
            return False
    return True


_F64 = np.dtype(np.float64)
_F32 = np.dtype(np.float32)


cdef _frozen(a):
    """``a``, made read-only: what a Combiner checked once stays as checked."""
    if a.flags.writeable:
        a.flags.writeable = False
    return a


include "_assemble.pxi"
