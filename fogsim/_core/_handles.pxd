# Declarations of _handles.pyx for the Cython modules that cimport them (_fusion.pyx).

cdef class HandleTable

cdef class Handle:
    cdef readonly str op
    cdef readonly object name
    cdef object _finish
    cdef object _test
    cdef object _result
    cdef bint _done
    cdef bint _released
    cdef object _error  # the exception the operation failed with, raised by every wait
    cdef HandleTable _table  # the table holding this handle while it is in flight, or None

    cdef int _check_live(self) except -1
    cpdef complete(self)


cdef class HandleTable:
    cdef set _pending

    cpdef Handle start(self, str op, finish, test=*, name=*)
