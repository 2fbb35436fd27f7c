"""The MPI runtime: one process per agent over mpi4py, raw buffers on the data path.

Collectives map to their MPI namesakes; the static topology lives in a distributed-graph
communicator (``Create_dist_graph_adjacent``) whose ``Neighbor_allgather`` feeds the
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
from ...hierarchy._decomposed import digits, piece_bounds
from ...hierarchy._machines import layout_error
from .._base import Backend, OneAgentEach, launched_size
from .._runtime.agree import GUARDS, LocalError, agree, fingerprint
from .._runtime.forward import NeighborForwarding
from .._runtime.neighbor import NeighborOps
from .._runtime.plan import RankPlan
from .._weights import exchange_between_machines
from ._neighbor import MpiDataPath
from ._peers import MPIPeers
from ._transport import MpiTransport
from ._windows import MpiWindowOps

__all__ = ["MPIBackend"]


class MPIBackend(OneAgentEach, NeighborForwarding, MpiWindowOps, Backend):
    """One agent per MPI process (see the module docstring)."""

    name = "mpi"

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
        self.local_comm = self._split_machines(local_size)
        self._machine_error = self._check_machine_layout()
        self._machines: Any = None  # the local ranks 0 as one world of machines (on use)
        self._roots_comm: Any = None
        self._stage_comms: dict[tuple[int, ...], list[Any]] = {}
        self.handles = HandleTable()
        self.neighbors = NeighborOps(
            self.transport,
            MpiDataPath(self.comm, self._value, self.stall),
            self.handles,
            self.stall,
            self._settings.fusion_threshold,
        )
        self._init_window_ops()

    def _stall_guard(self, world: bool) -> Guard:
        """The world's stall guard (sub-worlds wait without one: the world reports)."""
        timeout = self._settings.stall_timeout if world else None
        peers = MPIPeers(self.comm.Dup(), MPI) if timeout is not None and self._n > 1 else None
        guard = Guard(self._rank, self._n, timeout, self._settings.stall_warn_only, peers)
        if peers is not None:
            GUARDS[id(self.transport)] = guard
        return guard

    def _split_machines(self, local_size: int | None) -> Any:
        if local_size is None:
            return self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self._rank)
        if self._n % local_size:
            raise ValueError(
                f"local_size={local_size} does not divide the {self._n} processes: "
                "emulated machines must all hold the same number of processes"
            )
        return self.comm.Split(color=self._rank // local_size, key=self._rank)

    def _check_machine_layout(self) -> str | None:
        """Return why the machine-level ops cannot run here, or None (collective)."""
        return layout_error(
            self.comm.allgather((self.local_comm.Get_size(), self.local_comm.Get_rank()))
        )

    def check_machines(self, op: str) -> None:
        if self._machine_error is not None:
            raise ValueError(f"{op}: {self._machine_error}")

    # -- world ----------------------------------------------------------------------------
    def local_size(self) -> int:
        return self.local_comm.Get_size()

    def local_rank(self) -> int:
        return self.local_comm.Get_rank()

    def close(self) -> None:
        self._drain()
        self.neighbors.close()
        self._free_windows()
        if self._machines is not None:
            self._machines.close()
            self._machines = None
        for comm in [*(c for cs in self._stage_comms.values() for c in cs), self._roots_comm]:
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()
        self._stage_comms.clear()
        self._roots_comm = None
        if GUARDS.pop(id(self.transport), None) is not None:
            self.stall.peers.close()
        for comm in (self.local_comm, self.comm):
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()
        self.local_comm = self.comm = None

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        assert self._topology is not None
        self.neighbors.on_topology(self._topology, self._is_weighted)

    @property
    def _static(self) -> RankPlan:
        """This rank's plan on the static topology (the window ops' default weights)."""
        return self.neighbors.static

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
        elif arr.dtype.kind not in "biuf":
            raise TypeError(f"{op}: x must hold numbers, got dtype {arr.dtype}")
        if averaging if adds is None else adds:
            arr, kind = _arrays.upcast_half(arr, kind)
        return (arr if arr.flags.c_contiguous else arr.copy(order="C")), kind

    def _checked(
        self, op, x, averaging, shape_of=lambda a: a.shape, extra=(), error=None, adds=None
    ):
        """Convert ``x`` and agree with every rank on shape and dtype; raise on all ranks.

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        """
        arr, kind, fp, describe = None, _arrays.Kind(False), 0, "an invalid argument"
        try:
            arr, kind = self._value(x, op, averaging, adds)
            if error is None:
                fp = fingerprint(op, arr.dtype.str, shape_of(arr), *extra)
                describe = f"{arr.dtype} {shape_of(arr)}"
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self.transport, fp, error, f"{describe} in {op}")
        return arr, kind

    # -- collectives ----------------------------------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.allreduce_nonblocking(x, average, name).wait()

    def allreduce_nonblocking(self, x: Any, average: bool = True, name: str | None = None):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        arr, kind = self._checked("allreduce", x, averaging=average, adds=True)
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
        root = self.check_rank(root_rank, "root_rank")
        self._flush()
        arr, kind = self._checked("broadcast", x, averaging=False)
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
        arr, kind = self._checked("allgather", x, averaging=False, shape_of=lambda a: a.shape[1:])
        arr = arr.reshape(1) if arr.ndim == 0 else arr
        rows = np.array(self.comm.allgather(arr.shape[0]), dtype=np.int64)
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

    # -- machine level ----------------------------------------------------------------------
    def _on_machine_topology(self) -> None:
        """Nothing to do now: the machines' world re-wires on its next op."""

    def _is_machine_root(self) -> bool:
        """Whether this is its machine's local rank 0 (collective on first call)."""
        if self._roots_comm is None:
            color = 0 if self.local_comm.Get_rank() == 0 else MPI.UNDEFINED
            self._roots_comm = self.comm.Split(color=color, key=self._rank)
        return self._roots_comm != MPI.COMM_NULL

    def _machine_world(self) -> MPIBackend:
        """The local ranks 0, one per machine, as one world with the machine topology.

        Collective over those ranks only (built on first use).
        """
        topo = self.load_machine_topology()
        if self._machines is None:
            self._machines = MPIBackend(
                local_size=1, settings=self._settings, comm=self._roots_comm
            )
        world = self._machines
        if world._topology is not topo or world._is_weighted != self._machine_weighted:
            world.set_topology(topo, self._machine_weighted)
        return world

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_machine_weights: Any = None,
        dst_machine_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        """Gather and average on local rank 0; exchange among machines; broadcast back."""
        op = "hierarchical_neighbor_allreduce"
        self._start_machine_op(op, name, enable_topo_check)
        self._flush()
        arr, kind = self._checked(op, x, averaging=True)
        root = self._is_machine_root()
        k = self.local_comm.Get_size()
        mean = arr  # one process per machine: its value is the machine's average
        if k > 1:
            gathered = np.empty((k, *arr.shape), arr.dtype) if root else None
            self.local_comm.Gather(arr, gathered, root=0)
            if root:
                mean = gathered[0].copy()
                for j in range(1, k):
                    mean += gathered[j]
                np.divide(mean, k, out=mean)
        out, report = None, None
        if root:  # every machine's local rank 0 runs the exchange, then tells its machine
            out, error = exchange_between_machines(
                self._machine_world(),
                mean,
                self_weight,
                src_machine_weights,
                dst_machine_weights,
                enable_topo_check,
            )
            if error is not None:
                report = (type(error), str(error))
        if k > 1:  # the other local ranks wait yielding the core (see _local_bcast)
            failed = self._local_bcast(np.array([report is not None], dtype=np.int8))
            if failed[0]:
                report = self.local_comm.bcast(report, root=0)
        if report is not None:
            raise report[0](report[1])
        if k > 1:
            out = self._local_bcast(np.empty_like(arr) if out is None else out)
        return wrap_like(out, kind)

    def _local_bcast(self, buf: np.ndarray) -> np.ndarray:
        """Broadcast ``buf`` from local rank 0, waiting through the stall guard: ranks
        that only wait give up their core to the ones working (processes may share cores)."""
        req = self.local_comm.Ibcast(buf, root=0)
        self.stall.wait(req.Test, req.Wait)
        return buf

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        self._start_machine_op("allreduce(is_hierarchical_local=True)", name, average=average)
        self._flush()
        arr, kind = self._checked("allreduce-local", x, averaging=average, adds=True)
        out = np.empty_like(arr)
        self.local_comm.Allreduce(arr, out, op=MPI.SUM)
        if average:
            np.divide(out, self.local_comm.Get_size(), out=out)
        return wrap_like(out, kind)

    def decomposed_allreduce(self, x, average, name, factors):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        factors, error = self._decomposition(factors)
        arr, kind = self._checked(
            "allreduce-decomposed",
            x,
            averaging=average,
            extra=(factors,),
            error=error and LocalError(error),
            adds=True,
        )
        comms = self._stage_comms.get(factors)
        if comms is None:
            comms = self._stage_comms[factors] = self._split_stages(factors)
        buf = arr.reshape(-1).copy()
        lo, hi, stages = 0, buf.size, []
        for comm, d in zip(comms, digits(self._rank, factors), strict=True):  # reduce-scatter
            bounds = piece_bounds(lo, hi, comm.Get_size())
            counts = np.diff(bounds)
            recv = np.empty((comm.Get_size(), counts[d]), buf.dtype)
            comm.Alltoallv(
                [buf, (counts, bounds[:-1])],
                [recv, (np.full(len(counts), counts[d]), counts[d] * np.arange(len(counts)))],
            )
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            acc = buf[lo:hi]
            acc[...] = recv[0]
            for j in range(1, len(recv)):
                acc += recv[j]
            stages.append(bounds)
        for comm, bounds in zip(reversed(comms), reversed(stages), strict=True):  # all-gather
            comm.Allgatherv(MPI.IN_PLACE, [buf, (np.diff(bounds), bounds[:-1])])
        if average:
            np.divide(buf, self._n, out=buf)
        return wrap_like(buf.reshape(arr.shape), kind)

    def _split_stages(self, factors: tuple[int, ...]) -> list[Any]:
        """One communicator per factor: the ranks that differ only in that digit."""
        comms, stride = [], 1
        for p, d in zip(factors, digits(self._rank, factors), strict=True):
            comms.append(self.comm.Split(color=self._rank - d * stride, key=d))
            stride *= p
        return comms
