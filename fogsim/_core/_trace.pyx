# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled trace recorder of the timeline: its clock, events, spans and JSON formatting.

* :func:`trace_now_ns`: the timeline's clock.
* :class:`TraceRecorder`, :class:`TraceOp`, :class:`TracePhase`: the timeline's events,
  recorded into a C array (ops and phases without a Python object per event).
* :func:`format_trace_events`: events as Chrome-trace JSON text.

``_fallback_trace`` is the pure-Python twin.
"""

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.pythread cimport PyThread_get_thread_ident
from libc.stdio cimport snprintf
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

__all__ = ["TraceOp", "TracePhase", "TraceRecorder", "format_trace_events", "trace_now_ns"]


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


cdef inline char* _putn(char* p, const char* text, size_t n) noexcept nogil:
    memcpy(p, text, n)  # n a constant at every call: the compiler inlines the copy
    return p + n


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


cdef inline char* _put_ids(char* p, long long pid, long long tid) noexcept nogil:
    """Write ``,"pid":<pid>,"tid":<tid>``."""
    p = _putn(p, b',"pid":', 7)
    p = _put_int(p, pid)
    p = _putn(p, b',"tid":', 7)
    return _put_int(p, tid)


cdef int _format_event(_Text out, char ph, long long tid, long long t, long long pid,
                       const char* name_q, Py_ssize_t name_len, long long d,
                       object args) except -1:
    """Append one B, E or X event (``t``: ns since the origin; ``d``: X's duration;
    ``name_q``: the JSON-quoted name, ``name_len`` bytes; ``args``: B's dict or None)."""
    cdef char buf[160]
    cdef char* p
    if t < 0:
        t = 0
    out.reserve(name_len + 160)  # every add below fits: no bound checks per piece
    p = out.buf + out.n
    if ph == b"E":
        p = _putn(p, b'{"ph":"E","ts":', 15)
        p = _put_us(p, t)
        p = _put_ids(p, pid, tid)
        p[0] = 125  # "}"
        out.n = p + 1 - out.buf
        return 0
    p = _putn(p, b'{"name":', 8)
    memcpy(p, name_q, name_len)
    p += name_len
    if ph == b"X":
        if d < 0:
            d = 0
        p = _putn(p, b',"ph":"X","ts":', 15)
        p = _put_us(p, t)
        p = _putn(p, b',"dur":', 7)
        p = _put_us(p, d)
        p = _put_ids(p, pid, tid)
        p[0] = 125
        out.n = p + 1 - out.buf
        return 0
    p = _putn(p, b',"ph":"B","ts":', 15)
    p = _put_us(p, t)
    p = _put_ids(p, pid, tid)
    out.n = p - out.buf
    if args:
        import json

        out.add(b',"args":', 8)
        out.add_bytes(json.dumps(args).encode())
    out.add(b"}", 1)
    return 0


cdef int _format_tuple(_Text out, str ph, long long tid, long long t, long long pid,
                       bytes name_q, object extra) except -1:
    if ph == "E":
        return _format_event(out, b"E", tid, t, pid, NULL, 0, 0, None)
    if ph == "X":
        return _format_event(out, b"X", tid, t, pid, name_q, len(name_q), extra, None)
    return _format_event(out, b"B", tid, t, pid, name_q, len(name_q), 0, extra)


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
            _format_tuple(out, ph, ev[1], <long long>ev[2] - t0, pid,
                          None if ph == "E" else _quoted(ev[3], quoted), ev[4])
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
    cdef unsigned long last_ident  # the thread _ops() last answered, and its list
    cdef list last_ops
    cdef public long long offset
    cdef public long long last_flush
    cdef public object timeline  # the owner: flush_soon() and tid(track) for a new track
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
        cdef unsigned long ident = PyThread_get_thread_ident()
        if ident == self.last_ident and self.last_ops is not None:  # most calls: one thread
            return self.last_ops
        ops = self.stacks.get(ident)
        if ops is None:
            ops = self.stacks[ident] = []
        self.last_ident, self.last_ops = ident, ops
        return <list>ops

    cdef int _tid(self, str track) except -1:
        found = self.tids.get(track)
        return <int>found if found is not None else <int>self.timeline.tid(track)

    def op(self, str name, str track):
        """Return the span of op ``name`` on ``track`` (``with``); its phases nest inside."""
        cdef TraceOp op = TraceOp.__new__(TraceOp)  # no __init__ argument parsing
        op.rec, op.ops, op.tid = self, self._ops(), self._tid(track)
        op.name = self.intern(name)
        return op

    def op_begin(self, str name, str track):
        """Open the span of op ``name`` on ``track`` and return its track id for
        :meth:`op_end` (the same events as :meth:`op`'s ``with``, without an object; the
        caller ends it in a ``finally``)."""
        cdef int tid = self._tid(track)
        self.open_span(self._ops(), tid, self.intern(name))
        return tid

    def op_end(self, int tid):
        """Close the span :meth:`op_begin` opened on track id ``tid`` (in the same thread)."""
        self.close_span(self._ops(), tid)

    cdef int open_span(self, list ops, int tid, Py_ssize_t name) except -1:
        # an op's begin event; ``ops``: the tracks of the ops running in this thread
        self.add(b"B", tid, _now_ns() + self.offset, name, -1, 0)
        self.move_depth(tid, 1)
        ops.append(tid)
        return 0

    cdef int close_span(self, list ops, int tid) except -1:
        # its end event; the timeline is flushed when 100,000 events are waiting or 2 s
        # have passed since its last flush
        ops.pop()
        cdef long long t = _now_ns() + self.offset
        self.add(b"E", tid, t, -1, -1, 0)
        self.move_depth(tid, -1)
        if self.n >= 100000 or t - self.last_flush > 2000000000:
            self.timeline.flush_soon()
        return 0

    def phase(self, str name):
        """Return phase ``name`` (``with``) of the op running in this thread, or of track
        ``"fogsim"`` outside ops."""
        cdef list ops = self._ops()
        cdef TracePhase phase = TracePhase.__new__(TracePhase)
        phase.rec, phase.name = self, self.intern(name)
        phase.tid = <int>ops[len(ops) - 1] if ops else self._tid("fogsim")
        return phase

    def since(self, str name, long long start):
        """Record phase ``name`` of the op running in this thread (or of track
        ``"fogsim"``) from ``start`` (:func:`trace_now_ns`) to now; return now.

        The cheap form of :meth:`phase` for the hot paths: no object and no ``with``; a
        block that raises before the call records no phase.
        """
        cdef long long end = _now_ns()
        cdef list ops = self._ops()
        cdef int tid = <int>ops[len(ops) - 1] if ops else self._tid("fogsim")
        self.add(b"X", tid, start + self.offset, self.intern(name), -1, end - start)
        return end

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
        cdef Py_ssize_t nnames = len(names_q)
        cdef const char** qp = <const char**>PyMem_Malloc((nnames + 1) * sizeof(char*))
        cdef Py_ssize_t* ql = <Py_ssize_t*>PyMem_Malloc((nnames + 1) * sizeof(Py_ssize_t))
        if qp == NULL or ql == NULL:
            PyMem_Free(qp)
            PyMem_Free(ql)
            raise MemoryError()
        for i in range(nnames):
            qp[i], ql[i] = <const char*><bytes>names_q[i], len(<bytes>names_q[i])
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
                                  qp[e.name] if e.name >= 0 else NULL,
                                  ql[e.name] if e.name >= 0 else 0, e.dur,
                                  self.objects[e.obj] if e.obj >= 0 else None)
        finally:
            PyMem_Free(qp)
            PyMem_Free(ql)
            self.n = 0
            self.objects = []
        return PyBytes_FromStringAndSize(out.buf, out.n)


cdef bytes _quoted(name, dict quoted):
    q = quoted.get(name)
    if q is None:
        import json

        q = quoted[name] = json.dumps(name).encode()
    return <bytes>q


@cython.freelist(8)
cdef class TraceOp:
    """An op's span on a timeline (``with``): begin/end events; its phases use its track.

    ``ops`` is the list of the tracks of the ops running in this thread. The events are
    the recorder's :meth:`TraceRecorder.op_begin` / :meth:`TraceRecorder.op_end`.
    """

    cdef TraceRecorder rec
    cdef list ops
    cdef Py_ssize_t name
    cdef int tid

    def __init__(self, TraceRecorder rec, list ops, str name, int tid):
        self.rec, self.ops, self.tid = rec, ops, tid
        self.name = rec.intern(name)

    def __enter__(self):
        self.rec.open_span(self.ops, self.tid, self.name)

    def __exit__(self, exc_type, exc, tb):
        self.rec.close_span(self.ops, self.tid)
        return False


@cython.freelist(8)
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

    def __exit__(self, exc_type, exc, tb):
        cdef long long end = _now_ns()
        self.rec.add(b"X", self.tid, self.start + self.rec.offset, self.name, -1,
                     end - self.start)
        return False
