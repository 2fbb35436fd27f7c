# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled handles of nonblocking ops and the table of those in flight.

A nonblocking op returns a :class:`Handle`; the :class:`HandleTable` (one per backend
instance, never a module global) holds the operations in flight with the callables that
complete them, so ``shutdown()`` can finish what is left. ``wait()`` completes an operation,
drops it from the table and releases the handle. ``_handles.pxd`` declares both for
``_fusion.pyx``, whose fused calls are handles too. ``_fallback_handles`` is the pure-Python
twin.
"""

__all__ = ["Handle", "HandleTable"]


cdef class Handle:
    """A pending operation; :func:`fogsim.wait` returns its result, :func:`fogsim.poll` tests it.

    A backend that computes eagerly creates a completed handle with :meth:`completed`; one
    that overlaps communication passes ``finish`` (blocks and returns the result) and
    ``test`` (returns whether ``finish`` would return at once). A handle is released by
    :meth:`wait`: waiting or polling it again raises ``ValueError``.
    """

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
