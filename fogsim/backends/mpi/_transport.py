"""The runtime's :class:`~fogsim.backends._runtime.Transport` over an mpi4py communicator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._stall import Guard
from .._runtime.transport import Messages
from .._wire import mpi_allgather_json

__all__ = ["MpiTransport"]


class _MpiRequest:
    """An mpi4py request as a :class:`~fogsim.backends._runtime.Request`: its own bound
    ``Test``/``Wait`` (no Python frame per poll of a wait)."""

    __slots__ = ("test", "wait")

    def __init__(self, req: Any) -> None:
        self.test: Callable[[], bool] = req.Test
        self.wait: Callable[[], Any] = req.Wait


class _MpiBatch:
    """Several mpi4py requests as one :class:`~fogsim.backends._runtime.Request`."""

    __slots__ = ("reqs", "_mpi")

    def __init__(self, reqs: list[Any], mpi: Any) -> None:
        self.reqs, self._mpi = reqs, mpi

    def test(self) -> bool:
        return bool(self._mpi.Request.Testall(self.reqs))

    def wait(self) -> None:
        self._mpi.Request.Waitall(self.reqs)


class MpiTransport:
    """Point-to-point and small collectives on the communicator ``comm`` (``mpi``: the
    ``mpi4py.MPI`` module, passed in so that importing this module needs no MPI)."""

    takes_tensors = False  # buffers are numpy arrays

    def __init__(self, comm: Any, mpi: Any) -> None:
        self.comm, self._mpi = comm, mpi
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.guard: Guard | None = None  # set by the world (see Transport)
        self.repair: Callable[[], None] | None = None

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> _MpiRequest:
        return _MpiRequest(self.comm.Isend(buf, dest=dest, tag=tag))

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _MpiRequest:
        return _MpiRequest(self.comm.Irecv(buf, source=source, tag=tag))

    def exchange(self, sends: Messages, recvs: Messages, tag: int = 0) -> _MpiBatch:
        comm = self.comm
        reqs = [comm.Irecv(buf, source=source, tag=tag) for buf, source in recvs]
        reqs += [comm.Isend(buf, dest=dest, tag=tag) for buf, dest in sends]
        return _MpiBatch(reqs, self._mpi)

    def iallreduce_max(self, flags: np.ndarray) -> _MpiRequest:
        return _MpiRequest(self.comm.Iallreduce(self._mpi.IN_PLACE, flags, op=self._mpi.MAX))

    def allgather_json(self, value: Any) -> list[Any]:
        return mpi_allgather_json(self.comm, value)

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        self.comm.Alltoall(send, recv)

    def barrier(self) -> None:
        self.comm.Barrier()

    def free(self) -> None:
        """Free the communicator (collective), unless MPI has been finalized already."""
        if self.comm != self._mpi.COMM_NULL and not self._mpi.Is_finalized():
            self.comm.Free()
