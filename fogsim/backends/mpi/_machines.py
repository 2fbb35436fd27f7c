"""How the MPI runtime's machine-level ops move values (see ``_runtime.machines``).

A machine is a group of ranks on one shared-memory node (``Split_type``), or an emulated
block of ``local_size`` ranks, with a communicator of its own; the machines' world runs on
a communicator of the local ranks 0, and each stage of the decomposed all-reduce on one
communicator per factor (``Ialltoallv``, then ``Iallgatherv`` in place). Every wait is
under the world's stall guard: ranks that only wait give up their core to the ones working
(processes may share cores).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._stall import Guard
from .._base import Backend
from .._decomposed import digits
from .._runtime.datapath import Value
from .._runtime.machines import Report
from .._wire import mpi_bcast_json

__all__ = ["MpiMachineLink"]


class MpiMachineLink:
    """The :class:`~.._runtime.machines.MachineLink` of the MPI runtime.

    Built from what it needs: the world's communicator ``comm`` (``mpi``: the ``mpi4py.MPI``
    module), ``local_size`` (None: by shared-memory node), the world's stall ``guard``, and
    ``new_world``, which makes the machines' world on the local ranks 0's communicator.
    Its construction is collective.
    """

    def __init__(
        self,
        comm: Any,
        mpi: Any,
        local_size: int | None,
        guard: Guard,
        new_world: Callable[[Any], Backend],
    ) -> None:
        self._comm, self._mpi, self._guard, self._new_world = comm, mpi, guard, new_world
        self._rank, self._n = comm.Get_rank(), comm.Get_size()
        self.local_comm = self._split(local_size)
        self.local_size = int(self.local_comm.Get_size())
        self.local_rank = int(self.local_comm.Get_rank())
        self._roots_comm: Any = None
        self._stage_comms: dict[tuple[int, ...], list[Any]] = {}

    def _split(self, local_size: int | None) -> Any:
        if local_size is None:
            return self._comm.Split_type(self._mpi.COMM_TYPE_SHARED, key=self._rank)
        if self._n % local_size:
            raise ValueError(
                f"local_size={local_size} does not divide the {self._n} processes: "
                "emulated machines must all hold the same number of processes"
            )
        return self._comm.Split(color=self._rank // local_size, key=self._rank)

    def close(self) -> None:
        """Free the communicators made here."""
        null = self._mpi.COMM_NULL
        for comm in [*(c for cs in self._stage_comms.values() for c in cs), self._roots_comm]:
            if comm is not None and comm != null:
                comm.Free()
        self._stage_comms.clear()
        self._roots_comm = None
        if self.local_comm is not None and self.local_comm != null:
            self.local_comm.Free()
        self.local_comm = None

    def _wait(self, req: Any) -> None:
        """Wait for an MPI request under the world's stall guard."""
        self._guard.wait(req.Test, req.Wait)

    def _bcast(self, buf: np.ndarray) -> np.ndarray:
        """Broadcast ``buf`` from local rank 0 over the machine."""
        self._wait(self.local_comm.Ibcast(buf, root=0))
        return buf

    # -- among machines -------------------------------------------------------------------
    def is_root(self) -> bool:
        if self._roots_comm is None:
            color = 0 if self.local_rank == 0 else self._mpi.UNDEFINED
            self._roots_comm = self._comm.Split(color=color, key=self._rank)
        return bool(self._roots_comm != self._mpi.COMM_NULL)

    def new_world(self) -> Backend:
        return self._new_world(self._roots_comm)

    # -- within a machine -----------------------------------------------------------------
    def gather(self, value: Value) -> Any:
        arr = value.data
        rows = np.empty((self.local_size, *arr.shape), arr.dtype) if self.local_rank == 0 else None
        self._wait(self.local_comm.Igather(arr, rows, root=0))
        return rows

    def tell(self, report: Report | None) -> Report | None:
        if not self._bcast(np.array([report is not None], dtype=np.int8))[0]:
            return None
        told = mpi_bcast_json(self.local_comm, None if report is None else [*report])
        return str(told[0]), str(told[1])

    def broadcast(self, value: Value, out: Any) -> Any:
        return self._bcast(np.empty_like(value.data) if out is None else out)

    def local_sum(self, value: Value) -> Any:
        out = np.empty_like(value.data)
        self._wait(self.local_comm.Iallreduce(value.data, out, op=self._mpi.SUM))
        return out

    # -- the decomposed allreduce's stages --------------------------------------------------
    def flat(self, value: Value) -> tuple[Any, Any]:
        buf = value.data.reshape(-1).copy()
        return buf, buf

    def stages(self, factors: tuple[int, ...]) -> list[Any]:
        """One communicator per factor: the ranks that differ only in that digit."""
        comms = self._stage_comms.get(factors)
        if comms is None:
            comms, stride = [], 1
            for p, d in zip(factors, digits(self._rank, factors), strict=True):
                comms.append(self._comm.Split(color=self._rank - d * stride, key=d))
                stride *= p
            self._stage_comms[factors] = comms
        return comms

    def reduce_scatter(
        self, stage: Any, value: Value, flat: Any, bounds: np.ndarray, d: int
    ) -> Any:
        counts = np.diff(bounds)
        p = len(counts)
        recv = np.empty((p, counts[d]), flat.dtype)
        req = stage.Ialltoallv(
            [flat, (counts, bounds[:-1])],
            [recv, (np.full(p, counts[d]), counts[d] * np.arange(p))],
        )
        self._wait(req)
        return recv

    def all_gather(self, stage: Any, value: Value, flat: Any, bounds: np.ndarray, d: int) -> None:
        self._wait(stage.Iallgatherv(self._mpi.IN_PLACE, [flat, (np.diff(bounds), bounds[:-1])]))
