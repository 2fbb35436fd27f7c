# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled kernels of the combine step ``X <- W X``; see :mod:`fogsim._core`.

The ``cdef ... noexcept nogil`` kernels (declared in ``_kernels.pxd``) trust their arguments.
The ``def`` wrappers check types and shapes through ``_checks``, which the numpy fallback
shares, scan index ranges (and the weights ``_checks`` says to scan) in C, and run the kernel
without the GIL. A weight is
cast to the data dtype before use and every step is ``acc = acc + w * v`` with the product
rounded first; setup.py compiles with -ffp-contract=off so that no FMA changes the bits.
"""

from cpython.dict cimport PyDict_Next
from cpython.long cimport PyLong_AsLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.ref cimport PyObject
from libc.float cimport DBL_MAX
from libc.math cimport fabs
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport qsort

import numpy as np

from . import _checks

__all__ = ["assemble_csr", "circulant_combine", "csr_combine", "weighted_combine"]

# Elements per block in the blocked loops: a block of out (16 KB of doubles) stays in L1
# while every neighbor's contribution is added to it.
cdef enum:
    _BLOCK = 2048
    # Rows per block when per-agent weights of a one-value-per-agent x are staged in a
    # stack buffer (16 KB of doubles for _CHUNK + 1 terms).
    _WBLOCK = 512
    # Rows at most this long are sorted by insertion, longer ones by qsort.
    _SHORT_ROW = 32

# Column indices are int32, so no valid index reaches this (= _checks.MAX_AGENTS).
cdef Py_ssize_t _MAX_AGENTS = 2**31


# --- kernels ---------------------------------------------------------------------------------

# Each pass adds up to _CHUNK neighbor terms in one loop, so out is loaded and stored once per
# _CHUNK neighbors instead of once per neighbor; the per-element operations and their order
# are those of one pass per term.
cdef enum:
    _CHUNK = 3


cdef inline void _pass(
    Py_ssize_t cnt,
    real_t* dst,
    const real_t* x0,
    real_t w0,
    Py_ssize_t nt,
    const real_t** src,
    const real_t* w,
) noexcept nogil:
    # dst <- (w0 * x0 if x0 else dst) + w[0] * src[0] + ... + w[nt-1] * src[nt-1], left to
    # right, for 0 <= nt <= _CHUNK (nt >= 1 without x0). x0 may be dst.
    cdef Py_ssize_t c
    cdef const real_t* s0 = src[0] if nt > 0 else NULL
    cdef const real_t* s1 = src[1] if nt > 1 else NULL
    cdef const real_t* s2 = src[2] if nt > 2 else NULL
    cdef real_t a = w[0] if nt > 0 else 0
    cdef real_t b = w[1] if nt > 1 else 0
    cdef real_t e = w[2] if nt > 2 else 0
    if x0 != NULL:
        if nt == 0:
            for c in range(cnt):
                dst[c] = w0 * x0[c]
        elif nt == 1:
            for c in range(cnt):
                dst[c] = w0 * x0[c] + a * s0[c]
        elif nt == 2:
            for c in range(cnt):
                dst[c] = w0 * x0[c] + a * s0[c] + b * s1[c]
        else:
            for c in range(cnt):
                dst[c] = w0 * x0[c] + a * s0[c] + b * s1[c] + e * s2[c]
    elif nt == 1:
        for c in range(cnt):
            dst[c] = dst[c] + a * s0[c]
    elif nt == 2:
        for c in range(cnt):
            dst[c] = dst[c] + a * s0[c] + b * s1[c]
    else:
        for c in range(cnt):
            dst[c] = dst[c] + a * s0[c] + b * s1[c] + e * s2[c]


cdef inline void _pass_w(
    Py_ssize_t cnt,
    real_t* dst,
    const real_t* x0,
    const real_t* w0,
    Py_ssize_t nt,
    const real_t** src,
    const real_t** w,
) noexcept nogil:
    # _pass with one weight per element: dst[c] <- w0[c] * x0[c] + w[0][c] * src[0][c] + ...
    cdef Py_ssize_t c
    cdef const real_t* s0 = src[0] if nt > 0 else NULL
    cdef const real_t* s1 = src[1] if nt > 1 else NULL
    cdef const real_t* s2 = src[2] if nt > 2 else NULL
    cdef const real_t* a = w[0] if nt > 0 else NULL
    cdef const real_t* b = w[1] if nt > 1 else NULL
    cdef const real_t* e = w[2] if nt > 2 else NULL
    if x0 != NULL:
        if nt == 0:
            for c in range(cnt):
                dst[c] = w0[c] * x0[c]
        elif nt == 1:
            for c in range(cnt):
                dst[c] = w0[c] * x0[c] + a[c] * s0[c]
        elif nt == 2:
            for c in range(cnt):
                dst[c] = w0[c] * x0[c] + a[c] * s0[c] + b[c] * s1[c]
        else:
            for c in range(cnt):
                dst[c] = w0[c] * x0[c] + a[c] * s0[c] + b[c] * s1[c] + e[c] * s2[c]
    elif nt == 1:
        for c in range(cnt):
            dst[c] = dst[c] + a[c] * s0[c]
    elif nt == 2:
        for c in range(cnt):
            dst[c] = dst[c] + a[c] * s0[c] + b[c] * s1[c]
    else:
        for c in range(cnt):
            dst[c] = dst[c] + a[c] * s0[c] + b[c] * s1[c] + e[c] * s2[c]


cdef void weighted_combine_kernel(
    real_t[::1] out,
    double self_weight,
    const real_t[::1] x,
    const double[::1] weights,
    const real_t[:, ::1] ys,
) noexcept nogil:
    cdef Py_ssize_t m = x.shape[0], nk = ys.shape[0], start, cnt, k, t, nt
    cdef const real_t* src[_CHUNK]
    cdef real_t w[_CHUNK]
    cdef real_t* op
    cdef const real_t* xp
    cdef const real_t* yp
    if m == 0:
        return
    op = &out[0]
    xp = &x[0]
    yp = &ys[0, 0] if nk else NULL
    start = 0
    while start < m:
        cnt = min(<Py_ssize_t>_BLOCK, m - start)
        k = 0
        while True:
            nt = min(<Py_ssize_t>_CHUNK, nk - k)
            for t in range(nt):
                src[t] = yp + (k + t) * m + start
                w[t] = <real_t>weights[k + t]
            _pass(cnt, op + start, xp + start if k == 0 else NULL, <real_t>self_weight,
                  nt, src, w)
            k += nt
            if k >= nk:
                break
        start += cnt


cdef void csr_combine_kernel(
    const int64_t[::1] indptr,
    const int32_t[::1] indices,
    const double[::1] data,
    const double[::1] self_weight,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], m = x.shape[1], i, t, nt
    cdef int64_t p, end
    cdef real_t acc
    cdef const real_t* src[_CHUNK]
    cdef real_t w[_CHUNK]
    cdef real_t* op
    cdef const real_t* xp
    cdef const int64_t* ip = &indptr[0]
    cdef const int32_t* ix = &indices[0] if indices.shape[0] else NULL
    cdef const double* dp = &data[0] if data.shape[0] else NULL
    cdef const double* sp
    if n == 0 or m == 0:
        return
    op = &out[0, 0]
    xp = &x[0, 0]
    sp = &self_weight[0]
    if m == 1:
        # One value per agent: keep the sum in a register.
        for i in range(n):
            acc = <real_t>sp[i] * xp[i]
            for p in range(ip[i], ip[i + 1]):
                acc = acc + <real_t>dp[p] * xp[ix[p]]
            op[i] = acc
        return
    for i in range(n):
        p = ip[i]
        end = ip[i + 1]
        while True:
            nt = min(<int64_t>_CHUNK, end - p)
            for t in range(nt):
                src[t] = xp + <Py_ssize_t>ix[p + t] * m
                w[t] = <real_t>dp[p + t]
            _pass(m, op + i * m, xp + i * m if p == ip[i] else NULL, <real_t>sp[i], nt, src, w)
            p += nt
            if p >= end:
                break


cdef void circulant_combine_kernel(
    const int64_t[::1] offsets,
    const double[::1] weights,
    bint weights_per_row,
    const double[::1] self_weight,
    bint self_per_row,
    const real_t[:, ::1] x,
    real_t[:, ::1] out,
) noexcept nogil:
    cdef Py_ssize_t n = x.shape[0], m = x.shape[1], nk = offsets.shape[0]
    cdef Py_ssize_t p, t, k, nt, done, lo, hi, r0, r1, r, rows_per_block
    cdef Py_ssize_t shift[_CHUNK]
    cdef Py_ssize_t kk[_CHUNK]
    cdef const real_t* src[_CHUNK]
    cdef const real_t* wrow[_CHUNK]
    cdef real_t w[_CHUNK]
    # Per-row weights of one block of a one-value-per-agent x, cast to real_t.
    cdef real_t wbuf[_CHUNK + 1][_WBLOCK]
    cdef real_t* op
    cdef const real_t* xp
    cdef const int64_t* off = &offsets[0] if nk else NULL
    cdef const double* wp = &weights[0] if weights.shape[0] else NULL
    cdef const double* sp
    cdef bint any_per_row = weights_per_row or self_per_row
    if n == 0 or m == 0:
        return
    op = &out[0, 0]
    xp = &x[0, 0]
    sp = &self_weight[0]
    rows_per_block = max(<Py_ssize_t>1, <Py_ssize_t>_BLOCK // m)
    if any_per_row and m == 1:
        rows_per_block = _WBLOCK
    # Rows [n - off[p], n - off[p-1]) wrap around for exactly the offsets k >= p; those
    # sources have smaller indices, so the rows add k = p..K-1 first, then k = 0..p-1.
    # p = K covers [0, n - off[K-1]) and p = 0 covers [n - off[0], n).
    for p in range(nk, -1, -1):
        lo = n - off[p] if p < nk else 0
        hi = n - off[p - 1] if p > 0 else n
        r0 = lo
        while r0 < hi:
            r1 = min(r0 + rows_per_block, hi)
            done = 0
            while True:
                nt = min(<Py_ssize_t>_CHUNK, nk - done)
                for t in range(nt):
                    k = p + done + t
                    if k < nk:
                        shift[t] = off[k] - n
                    else:
                        k = k - nk
                        shift[t] = off[k]
                    kk[t] = k
                if not any_per_row:
                    for t in range(nt):
                        src[t] = xp + (r0 + shift[t]) * m
                        w[t] = <real_t>wp[kk[t]]
                    _pass((r1 - r0) * m, op + r0 * m, xp + r0 * m if done == 0 else NULL,
                          <real_t>sp[0], nt, src, w)
                elif m == 1:
                    for t in range(nt):
                        src[t] = xp + r0 + shift[t]
                        for r in range(r0, r1):
                            wbuf[t + 1][r - r0] = <real_t>(
                                wp[kk[t] * n + r] if weights_per_row else wp[kk[t]])
                        wrow[t] = wbuf[t + 1]
                    if done == 0:
                        for r in range(r0, r1):
                            wbuf[0][r - r0] = <real_t>(sp[r] if self_per_row else sp[0])
                    _pass_w(r1 - r0, op + r0, xp + r0 if done == 0 else NULL, wbuf[0],
                            nt, src, wrow)
                else:
                    for r in range(r0, r1):
                        for t in range(nt):
                            src[t] = xp + (r + shift[t]) * m
                            w[t] = <real_t>(wp[kk[t] * n + r] if weights_per_row else wp[kk[t]])
                        _pass(m, op + r * m, xp + r * m if done == 0 else NULL,
                              <real_t>(sp[r] if self_per_row else sp[0]), nt, src, w)
                done += nt
                if done >= nk:
                    break
            r0 = r1


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
    const int64_t[::1] indptr, const int32_t[::1] indices, Py_ssize_t n
) noexcept nogil:
    cdef Py_ssize_t i, p, nnz = indices.shape[0]
    cdef const int64_t* ip = &indptr[0]
    cdef const int32_t* ix
    # n <= 2**31 after this, so the unsigned compare also rejects negative indices.
    cdef uint32_t limit = <uint32_t>min(n, _MAX_AGENTS)
    cdef uint64_t values = 0, steps = 0
    cdef uint32_t bad = 0
    if ip[0] != 0 or ip[n] != nnz:
        return False
    # SSE2 has no 64-bit compare, so use bits: once every entry is in [0, 2**62), a
    # decreasing step shows as the sign bit of the (wrapped) difference.
    for i in range(n):
        values |= <uint64_t>ip[i + 1]
        steps |= <uint64_t>ip[i + 1] - <uint64_t>ip[i]
    if (values >> 62) or (steps >> 63):
        return False
    if nnz:
        ix = &indices[0]
        for p in range(nnz):
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
        ok = _csr_structure_ok(ip, ix, n)
    if not ok:
        _reraise(_checks.csr_structure, (indptr, indices, n))
    if x.dtype == _checks.FLOAT64:
        xd, od = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xd, od)
    else:
        xf, of = x, out
        with nogil:
            csr_combine_kernel(ip, ix, d, sw, xf, of)
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


# --- assemble_csr ----------------------------------------------------------------------------

ctypedef struct _Entry:
    int32_t col
    double val


cdef int _entry_cmp(const void* a, const void* b) noexcept nogil:
    cdef int32_t ca = (<const _Entry*>a).col
    cdef int32_t cb = (<const _Entry*>b).col
    return (ca > cb) - (ca < cb)


cdef void _sort_row(_Entry* e, Py_ssize_t cnt) noexcept nogil:
    cdef Py_ssize_t a, b
    cdef _Entry tmp
    for a in range(1, cnt):
        if e[a].col < e[a - 1].col:
            break
    else:
        return
    if cnt > _SHORT_ROW:
        qsort(e, cnt, sizeof(_Entry), _entry_cmp)
        return
    for a in range(1, cnt):
        tmp = e[a]
        b = a
        while b > 0 and e[b - 1].col > tmp.col:
            e[b] = e[b - 1]
            b -= 1
        e[b] = tmp


cdef object _np_integer = np.integer
cdef object _np_floating = np.floating


cdef inline int32_t _rank(object key, Py_ssize_t n, Py_ssize_t i, object argname,
                          bint allow_self) except -1:
    # Ints and numpy integers in range take the fast path; everything else, valid or not,
    # goes through _checks.rank, which converts or raises.
    cdef int overflow = 0
    cdef long r
    if type(key) is not int and isinstance(key, _np_integer):
        key = int(key)
    if type(key) is int:
        r = PyLong_AsLongAndOverflow(key, &overflow)
        if not overflow and 0 <= r < n and (allow_self or r != i):
            return <int32_t>r
    return _checks.rank(key, n, i, argname, allow_self)


cdef inline double _weight(object v, int32_t r, Py_ssize_t i, object argname) except? -1.0:
    # Floats and numpy floats that are finite take the fast path, the rest _checks.weight.
    cdef double w
    if type(v) is float:
        w = v
    elif isinstance(v, float) or isinstance(v, _np_floating):
        w = float(v)
    else:
        return _checks.weight(v, r, i, argname)
    if fabs(w) <= DBL_MAX:
        return w
    return _checks.weight(v, r, i, argname)


def assemble_csr(n, rows, argname="src_weights", allow_self=False):
    """Assemble per-agent {rank: weight} rows into CSR arrays with sorted column indices.

    Row ``i`` of the result holds ``rows[i]``: a dict ``{rank: weight}``, a sequence of ranks
    (weight 1.0 each) or None. Returns ``(indptr, indices, data)`` as int64, int32, float64.
    """
    cdef Py_ssize_t nn = _checks.agent_count(n)
    cdef bint own = bool(allow_self)
    cdef Py_ssize_t i, a, start, cnt, cap = 0, nnz = 0, pos
    cdef _Entry* buf = NULL
    cdef _Entry* grown
    cdef PyObject* kp
    cdef PyObject* vp
    cdef int64_t[::1] ip
    cdef int32_t[::1] ix
    cdef double[::1] dv
    rows = _checks.row_items(rows, nn, argname)
    indptr = np.empty(nn + 1, dtype=np.int64)
    ip = indptr
    ip[0] = 0
    try:
        for i in range(nn):
            item = rows[i]
            if type(item) is not dict and type(item) is not list:
                item = _checks.row_item(item, i, argname)
            cnt = len(item)
            if nnz + cnt > cap:
                cap = max(2 * cap, nnz + cnt, 1024)
                grown = <_Entry*>PyMem_Realloc(buf, cap * sizeof(_Entry))
                if grown == NULL:
                    raise MemoryError()
                buf = grown
            start = nnz
            if isinstance(item, dict):
                pos = 0
                while PyDict_Next(item, &pos, &kp, &vp):
                    if nnz == start + cnt:
                        raise RuntimeError(f"{argname}[{i}] changed size during iteration")
                    buf[nnz].col = _rank(<object>kp, nn, i, argname, own)
                    buf[nnz].val = _weight(<object>vp, buf[nnz].col, i, argname)
                    nnz += 1
            else:
                for key in item:
                    if nnz == start + cnt:
                        raise RuntimeError(f"{argname}[{i}] changed size during iteration")
                    buf[nnz].col = _rank(key, nn, i, argname, own)
                    buf[nnz].val = 1.0
                    nnz += 1
            _sort_row(buf + start, nnz - start)
            for a in range(start + 1, nnz):
                if buf[a].col == buf[a - 1].col:
                    raise _checks.duplicate(buf[a].col, i, argname)
            ip[i + 1] = nnz
        indices = np.empty(nnz, dtype=np.int32)
        data = np.empty(nnz, dtype=np.float64)
        ix = indices
        dv = data
        for a in range(nnz):
            ix[a] = buf[a].col
            dv[a] = buf[a].val
    finally:
        PyMem_Free(buf)
    return indptr, indices, data
