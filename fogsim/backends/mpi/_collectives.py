"""The collectives of the MPI runtime: their MPI namesakes, nonblocking, on the world's
communicator, each after the agreement of :class:`~.._runtime.collectives.RuntimeCollectives`."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ... import _arrays
from ... import timeline as _timeline
from ..._arrays import Kind, to_numpy
from ..._handles import Handle, HandleTable
from ..._stall import Guard
from .._runtime.collectives import RuntimeCollectives
from .._runtime.datapath import ArrayValue
from .._runtime.transport import Transport

__all__ = ["MpiCollectives", "mpi_array", "mpi_value"]


def mpi_array(x: Any, op: str, averaging: bool, adds: bool = False) -> tuple[np.ndarray, Kind]:
    """Return this rank's value as a C-contiguous array (checked for its dtype).

    An op that averages or ``adds`` values gets half precision as float32: it is sent as
    float32 too (MPI has no portable float16 sum), so ranks add exactly what the simulator
    adds, and ``wrap_like`` rounds the result once.
    """
    arr, kind = to_numpy(x)
    if averaging:
        _arrays.require_float(arr, op)
    else:
        _arrays.require_numbers(arr.dtype, op, sums=adds)
    if averaging or adds:
        arr, kind = _arrays.upcast_half(arr, kind)
    return (arr if arr.flags.c_contiguous else arr.copy(order="C")), kind


def mpi_value(x: Any, op: str, averaging: bool, adds: bool) -> ArrayValue:
    """:func:`mpi_array` as the runtime's :class:`~.._runtime.datapath.Value`."""
    return ArrayValue(*mpi_array(x, op, averaging, adds))


class MpiCollectives(RuntimeCollectives[ArrayValue]):
    """``allreduce``, ``allgather``, ``broadcast`` and ``barrier`` on ``comm`` (``mpi``: the
    ``mpi4py.MPI`` module); the rest as :class:`RuntimeCollectives` takes it."""

    def __init__(
        self,
        comm: Any,
        mpi: Any,
        transport: Transport,
        handles: HandleTable,
        flush: Callable[[], None],
        stall: Guard,
    ) -> None:
        super().__init__(transport, handles, flush, stall, mpi_value)
        self.comm, self._mpi = comm, mpi

    def _finish(self, op: str, req: Any, result: Any, name: str | None) -> Handle:
        """Return a handle that waits for ``req`` under the stall guard, then ``result()``."""
        stall = self.stall

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                stall.wait(req.Test, req.Wait)
            return result()

        return self.handles.start(op, finish, req.Test, name)

    def start_allreduce(self, value: ArrayValue, average: bool, name: str | None) -> Handle:
        arr, n = value.arr, self.size
        out = np.empty_like(arr)
        req = self.comm.Iallreduce(arr, out, op=self._mpi.SUM)

        def result() -> Any:
            if average:
                np.divide(out, n, out=out)
            return value.wrap(out)

        return self._finish("allreduce", req, result, name)

    def start_broadcast(self, value: ArrayValue, root: int, name: str | None) -> Handle:
        out = value.arr.copy()
        req = self.comm.Ibcast(out, root=root)
        return self._finish("broadcast", req, partial(value.wrap, out), name)

    def start_allgather(self, value: ArrayValue, name: str | None) -> Handle:
        arr = value.arr.reshape(1) if value.arr.ndim == 0 else value.arr
        rows = np.empty(self.size, dtype=np.int64)
        req = self.comm.Iallgather(np.array([arr.shape[0]], dtype=np.int64), rows)
        self.stall.wait(req.Test, req.Wait)
        out = np.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        counts = rows * int(np.prod(arr.shape[1:], dtype=np.int64))
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        req = self.comm.Iallgatherv(arr, [out, (counts, displs)])
        return self._finish("allgather", req, partial(value.wrap, out), name)

    def start_barrier(self) -> tuple[Callable[[], bool], Callable[[], Any]]:
        req = self.comm.Ibarrier()
        return req.Test, req.Wait

    def barrier_nonblocking(self) -> Handle:
        self.flush()
        test, wait = self.start_barrier()
        return self.handles.start("barrier", partial(self.stall.wait, test, wait), test)
