"""The MPI runtime's data path for the neighbor ops (see ``_runtime.neighbor``).

Dynamic calls and ``neighbor_allgather`` move their data with ``Isend``/``Irecv`` on a
duplicate of the world communicator, so they never meet a collective. Static calls
(blocking ones and fused batches) use the static topology's distributed-graph
communicator instead: its ``(I)neighbor_allgather`` is one call for all neighbors. It
moves raw bytes (``MPI.BYTE``), whatever the values' dtype, so a call of the agreed size may
travel beside its agreement (``DataPath.overlaps``, see ``_runtime.static``): every
rank's message then has the same size and type, even where the calls differ.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..._stall import Guard
from ...topology import Topology
from .._runtime.datapath import DataPath, ToArray
from ._transport import MpiTransport

__all__ = ["MpiDataPath"]


def _raw(buf: np.ndarray) -> list[Any]:
    """``buf``'s memory (C-contiguous) as ``MPI.BYTE``s, whatever its dtype: one message
    type on every rank (``MPI.BYTE`` rather than a ``uint8`` view, which MPICH moves
    several microseconds slower at 8 B on oversubscribed cores)."""
    return [buf, MPI.BYTE]


class _Collective:
    """A graph collective's request as a :class:`~fogsim.backends._runtime.Request`."""

    __slots__ = ("test", "wait")

    def __init__(self, req: Any) -> None:
        self.test: Callable[[], bool] = req.Test
        self.wait: Callable[[], Any] = req.Wait


class MpiDataPath(DataPath):
    """Point-to-point on a duplicate of ``comm``; static transfers on a graph communicator
    of the static topology (rebuilt by :meth:`on_topology`)."""

    overlaps = True

    def __init__(self, comm: Any, to_array: ToArray, stall: Guard) -> None:
        self._p2p = MpiTransport(comm.Dup(), MPI)  # freed by close()
        super().__init__(self._p2p, to_array, stall.wait)
        self.comm, self.rank, self.stall = comm, comm.Get_rank(), stall
        self.graph_comm: Any = None

    def on_topology(self, topology: Topology, srcs: np.ndarray, dsts: np.ndarray) -> None:
        super().on_topology(topology, srcs, dsts)
        if self.graph_comm is not None:
            self.graph_comm.Free()
        self.graph_comm = self.comm.Create_dist_graph_adjacent(
            topology.in_neighbors(self.rank), topology.out_neighbors(self.rank), reorder=False
        )

    def static_allgather(self, send: np.ndarray, recv: np.ndarray) -> None:
        # nonblocking, under the stall guard: unchecked calls come here without agreeing
        req = self.graph_comm.Ineighbor_allgather(_raw(send), _raw(recv))
        self.stall.wait(req.Test, req.Wait)

    def start_static(self, send: np.ndarray, recv: np.ndarray) -> Any:
        return _Collective(self.graph_comm.Ineighbor_allgather(_raw(send), _raw(recv)))

    def repair(self) -> None:
        """Take part, with :attr:`agreed` bytes of no meaning, in the graph collective that
        the other ranks started beside an agreement this rank failed (see
        ``Transport.repair``): every message has the size the receivers posted."""
        send = np.zeros(self.agreed, np.uint8)
        recv = np.empty((len(self.srcs), self.agreed), np.uint8)
        req = self.graph_comm.Ineighbor_allgather(_raw(send), _raw(recv))
        self.stall.wait(req.Test, req.Wait)

    def close(self) -> None:
        """Free the graph communicator and the duplicate the point-to-point calls use."""
        if self.graph_comm is not None and self.graph_comm != MPI.COMM_NULL:
            self.graph_comm.Free()
        self.graph_comm = None
        self._p2p.free()
