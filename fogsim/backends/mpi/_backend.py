"""The MPI runtime: one process per agent over mpi4py, raw buffers on the data path.

Collectives map to their MPI namesakes; the static topology lives in a distributed-graph
communicator (``Create_dist_graph_adjacent``) whose ``Ineighbor_allgather`` feeds the
weighted combine; dynamic calls use ``Isend``/``Irecv`` set up per call. Before data
moves, ranks agree on shapes, dtypes and (dynamic calls) who sends to whom, so a bad
call raises the same error on every rank instead of hanging (see ``_runtime.agree``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from ... import _arrays, _settings
from ... import timeline as _timeline
from ..._arrays import Kind, to_numpy, wrap_like
from ..._handles import Handle, HandleTable
from ..._stall import Guard
from .._base import launched_size
from .._parts import Capabilities
from .._runtime.agree import GUARDS, LocalError, agree, fingerprint, named, purpose
from .._runtime.backend import DistributedBackend
from .._runtime.neighbor import NeighborOps
from ._machines import MpiMachineOps
from ._neighbor import MpiDataPath
from ._peers import MPIPeers
from ._rma import MpiRma
from ._transport import MpiTransport
from ._windows import MpiWindowOps

__all__ = ["MPIBackend"]


class MPIBackend(DistributedBackend):
    """One agent per MPI process (see the module docstring)."""

    name = "mpi"
    capabilities = Capabilities(stacked=False, windows=True, overlaps=True)

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        comm: Any = None,
    ) -> None:
        super().__init__()
        self._settings = settings or _settings.Settings()
        self.comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self._n, self._rank = self.comm.Get_size(), self.comm.Get_rank()
        self.transport = MpiTransport(self.comm, MPI)  # what the shared protocol speaks
        try:  # the launcher's count wins over init(size=)
            launched_size(size, self._n, self._rank, f"the MPI launcher (-np {self._n})")
        except (TypeError, ValueError):
            self.comm.Free()
            raise
        self.stall = self._stall_guard(comm is None)
        if comm is None and self._settings.rank_dir:  # for fogrun's report of a dead rank
            from ...run._liveness import record

            record(self._settings.rank_dir, self._rank)
        try:  # refused on every rank alike (a machine layout that cannot be)
            self.machines = MpiMachineOps(
                self.comm,
                MPI,
                local_size,
                self.stall,
                self._checked,
                self._flush,
                self._start_machine_op,
                self._decomposition,
                self.load_machine_topology,
                self.is_machine_topology_weighted,
                self._new_machine_world,
            )
        except BaseException:
            self._free_world()
            raise
        self.handles = HandleTable()
        self.neighbors = NeighborOps(
            self.transport,
            MpiDataPath(self.comm, self._value, self.stall),
            self.handles,
            self.stall,
            self._settings.fusion_threshold,
        )
        self.windows = MpiWindowOps(
            self.transport,
            MpiRma(self.comm, MPI),
            self.load_topology,
            self.is_topology_weighted,
            self._drain,
            self.check_rank,
            self.stall,
        )

    def _stall_guard(self, world: bool) -> Guard:
        """The world's stall guard (sub-worlds wait without one: the world reports)."""
        timeout = self._settings.stall_timeout if world else None
        peers = MPIPeers(self.comm.Dup(), MPI) if timeout is not None and self._n > 1 else None
        guard = Guard(self._rank, self._n, timeout, self._settings.stall_warn_only, peers)
        if peers is not None:
            GUARDS[id(self.transport)] = guard
        return guard

    def _new_machine_world(self, roots_comm: Any) -> MPIBackend:
        """The machines' world: one agent per local rank 0, on ``roots_comm``."""
        return MPIBackend(local_size=1, settings=self._settings, comm=roots_comm)

    # -- world ----------------------------------------------------------------------------
    def close(self) -> None:
        """Free every communicator and window this world made (collective)."""
        self._drain()
        self.neighbors.close()
        self.windows.close()
        self.machines.close()
        self._free_world()

    def _free_world(self) -> None:
        """Free the stall guard's side channel and the world's communicator."""
        peers = self.stall.peers
        if GUARDS.pop(id(self.transport), None) is not None and isinstance(peers, MPIPeers):
            peers.close()
        if self.comm is not None and self.comm != MPI.COMM_NULL:
            self.comm.Free()
        self.comm = None

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        assert self._topology is not None
        self.neighbors.on_topology(self._topology, self._is_weighted)

    # -- agent-local data -----------------------------------------------------------------
    def global_view(self, x: Any) -> Any:
        arr, kind = to_numpy(x)
        stacked = self.allgather(arr[None])
        return wrap_like(stacked, kind)

    # -- helpers --------------------------------------------------------------------------
    def _value(
        self, x: Any, op: str, averaging: bool, adds: bool | None = None
    ) -> tuple[np.ndarray, Kind]:
        """Return this rank's value as a C-contiguous array (checked for its dtype).

        An op that ``adds`` values (default: one that averages) gets half precision as
        float32: it is sent as float32 too (MPI has no portable float16 sum), so ranks
        add exactly what the simulator adds, and ``wrap_like`` rounds the result once.
        """
        arr, kind = to_numpy(x)
        if averaging:
            _arrays.require_float(arr, op)
        else:
            _arrays.require_numbers(arr.dtype, op, sums=bool(adds))
        if averaging if adds is None else adds:
            arr, kind = _arrays.upcast_half(arr, kind)
        return (arr if arr.flags.c_contiguous else arr.copy(order="C")), kind

    def _checked(
        self,
        op,
        x,
        averaging,
        shape_of=lambda a: a.shape,
        extra=(),
        error=None,
        adds=None,
        name=None,
        said="",
    ):
        """Convert ``x`` and agree with every rank on shape, dtype, ``name`` and ``extra``
        (``said``: how ``extra`` reads in a disagreement's message); raise on all ranks.

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        Nothing moves before the agreement, so a call that differs never starts a transfer.
        """
        arr, kind, fp, describe = None, _arrays.Kind(False), 0, "an invalid argument"
        try:
            arr, kind = self._value(x, op, averaging, adds)
            if error is None:
                fp = fingerprint(op, arr.dtype.str, shape_of(arr), averaging, repr(name), *extra)
                describe = f"{arr.dtype} {shape_of(arr)}{named(name)}{purpose(op, averaging)}"
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self.transport, fp, error, f"{describe} in {op}{said}")
        return arr, kind

    # -- collectives ----------------------------------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.allreduce_nonblocking(x, average, name).wait()

    def allreduce_nonblocking(self, x: Any, average: bool = True, name: str | None = None):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        arr, kind = self._checked("allreduce", x, averaging=average, adds=True, name=name)
        out = np.empty_like(arr)
        req = self.comm.Iallreduce(arr, out, op=MPI.SUM)

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                self.stall.wait(req.Test, req.Wait)
            if average:
                np.divide(out, self._n, out=out)
            return wrap_like(out, kind)

        return self.handles.start("allreduce", finish, req.Test, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.broadcast_nonblocking(x, root_rank, name).wait()

    def broadcast_nonblocking(self, x: Any, root_rank: int, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        root, error = self.checked_root(root_rank)
        self._flush()
        arr, kind = self._checked(
            "broadcast", x, False, extra=(root,), error=error, name=name, said=f" from root {root}"
        )
        out = arr.copy()
        req = self.comm.Ibcast(out, root=root)

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                self.stall.wait(req.Test, req.Wait)
            return wrap_like(out, kind)

        return self.handles.start("broadcast", finish, req.Test, name)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.allgather_nonblocking(x, name).wait()

    def allgather_nonblocking(self, x: Any, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        self._flush()
        arr, kind = self._checked(
            "allgather", x, averaging=False, shape_of=lambda a: a.shape[1:], name=name
        )
        arr = arr.reshape(1) if arr.ndim == 0 else arr
        rows = np.empty(self._n, dtype=np.int64)
        req = self.comm.Iallgather(np.array([arr.shape[0]], dtype=np.int64), rows)
        self.stall.wait(req.Test, req.Wait)
        out = np.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        counts = rows * int(np.prod(arr.shape[1:], dtype=np.int64))
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        req = self.comm.Iallgatherv(arr, [out, (counts, displs)])

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                self.stall.wait(req.Test, req.Wait)
            return wrap_like(out, kind)

        return self.handles.start("allgather", finish, req.Test, name)

    def barrier(self) -> None:
        self._flush()
        req = self.comm.Ibarrier()
        self.stall.wait(req.Test, req.Wait)

    def barrier_nonblocking(self) -> Handle:
        self._flush()
        req = self.comm.Ibarrier()
        return self.handles.start("barrier", partial(self.stall.wait, req.Test, req.Wait), req.Test)
