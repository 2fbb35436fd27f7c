# The timeline part of _dispatch.pyx (included there; same imports and directives): the
# clock, the event recorder (a C array), op and phase spans, Chrome-trace JSON formatting.

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


cdef inline char* _put_ids(char* p, long long pid, long long tid) noexcept nogil:
    """Write ``,"pid":<pid>,"tid":<tid>``."""
    p = _put(p, b',"pid":')
    p = _put_int(p, pid)
    p = _put(p, b',"tid":')
    return _put_int(p, tid)


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
        p = _put_ids(p, pid, tid)
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
        p = _put_ids(p, pid, tid)
        p[0] = 125
        out.add(buf, p + 1 - buf)
        return 0
    p = _put(buf, b',"ph":"B","ts":')
    p = _put_us(p, t)
    p = _put_ids(p, pid, tid)
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
