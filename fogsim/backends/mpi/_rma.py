"""The runtime's :class:`~fogsim.backends._runtime.WindowTransport` over MPI-3 RMA.

Each window is an ``MPI.Win.Allocate`` on the communicator, kept in one ``Lock_all``
epoch (passive target) from :meth:`MpiRmaWindow.open` to :meth:`MpiRmaWindow.free`.
Every call passes the buffer with the window's own MPI datatype on both sides (an
accumulate's origin and target datatypes must match) and copies nothing: the caller's
``origin`` is what MPI reads until the flush, as the completion rules require.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MpiRma", "MpiRmaWindow"]


class MpiRmaWindow:
    """One MPI window (see :class:`~fogsim.backends._runtime.RmaWindow`)."""

    __slots__ = ("win", "memory", "_type", "_mpi")

    def __init__(self, comm: Any, count: int, dtype: np.dtype, mpi_type: Any, mpi: Any) -> None:
        itemsize = dtype.itemsize
        self._mpi, self._type = mpi, mpi_type
        self.win = mpi.Win.Allocate(count * itemsize, itemsize, comm=comm)
        self.memory: np.ndarray = np.frombuffer(memoryview(self.win.tomemory()), dtype=dtype)

    def open(self) -> None:
        self.win.Lock_all(self._mpi.MODE_NOCHECK)
        self.win.Sync()  # the initial stores, before the creation barrier and any remote write

    def accumulate(self, origin: np.ndarray, target: int, offset: int, replace: bool) -> None:
        mpi, kind = self._mpi, self._type
        self.win.Accumulate(
            [origin, kind],
            target,
            (offset, origin.size, kind),
            op=mpi.REPLACE if replace else mpi.SUM,
        )

    def get(self, result: np.ndarray, target: int, offset: int) -> None:
        self.win.Get([result, self._type], target, (offset, result.size, self._type))

    def compare_and_swap(self, compare: int, new: int, target: int, offset: int) -> int:
        kind = self._type
        origin, expected = (
            np.array([new], self.memory.dtype),
            np.array([compare], self.memory.dtype),
        )
        got = np.empty(1, self.memory.dtype)
        self.win.Compare_and_swap([origin, kind], [expected, kind], [got, kind], target, offset)
        self.win.Flush(target)  # the buffers above live until here
        return int(got[0])

    def flush(self, target: int) -> None:
        self.win.Flush(target)

    def sync(self) -> None:
        self.win.Sync()

    def free(self) -> None:
        self.win.Unlock_all()
        self.win.Free()
        self.memory = np.empty(0, self.memory.dtype)


class MpiRma:
    """Windows on the communicator ``comm`` (``mpi``: the ``mpi4py.MPI`` module, passed in
    so that importing this module needs no MPI)."""

    def __init__(self, comm: Any, mpi: Any) -> None:
        self.comm, self._mpi = comm, mpi
        self._types = {
            np.dtype(np.float64): mpi.DOUBLE,
            np.dtype(np.float32): mpi.FLOAT,
            np.dtype(np.int64): mpi.INT64_T,
        }

    def allocate(self, count: int, dtype: np.dtype) -> MpiRmaWindow:
        dtype = np.dtype(dtype)
        return MpiRmaWindow(self.comm, count, dtype, self._types[dtype], self._mpi)
