# assemble_csr: per-agent weight dicts to CSR arrays; included by _kernels.pyx.

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
