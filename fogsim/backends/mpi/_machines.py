"""Machine-level ops of the MPI runtime: machine layout, hierarchical and decomposed ops.

A machine is a group of ranks on one shared-memory node (``Split_type``), or an emulated
block of ``local_size`` ranks. Its ranks average on the machine's local rank 0 over the
machine's communicator; the exchange among machines runs in a second world of one
process per machine (the local ranks 0, made on the first hierarchical call) with the
machine topology, where a machine is a rank, so the machine-level arguments get the
rank-level checks and agreement of ``neighbor_allreduce``. The decomposed all-reduce runs
its reduce-scatter/all-gather stages on one communicator per factor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..._arrays import Kind, check_name, wrap_like
from ..._stall import Guard
from ...topology import Topology
from .._base import Backend
from .._decomposed import digits, piece_bounds
from .._layout import layout_error
from .._runtime.agree import LocalError
from .._runtime.backend import MachineOps
from .._weights import exchange_between_machines
from .._wire import mpi_bcast_json

__all__ = ["MpiMachineOps"]

#: ``MPIBackend._checked``: convert ``x`` and agree on its shape and dtype with every rank.
Checked = Callable[..., tuple[np.ndarray, Kind]]


class MpiMachineOps(MachineOps):
    """The machine-level part of :class:`MPIBackend` (see the module docstring).

    Built from what it needs: the backend's communicator ``comm`` (``mpi``: the ``mpi4py.MPI``
    module), ``local_size`` (None: by shared-memory node), the world's stall ``guard``,
    the backend's ``checked``, ``flush``, ``start_op`` (``Backend._start_machine_op``) and
    ``decomposition`` (``Backend._decomposition``), readers of the machine topology in use,
    and ``new_world``, which makes the machines' world on the local ranks 0's communicator.
    Its construction is collective (the machine layout is checked on every rank).
    """

    def __init__(
        self,
        comm: Any,
        mpi: Any,
        local_size: int | None,
        guard: Guard,
        checked: Checked,
        flush: Callable[[], None],
        start_op: Callable[..., None],
        decomposition: Callable[[Any], tuple[tuple[int, ...] | None, Exception | None]],
        machine_topology: Callable[[], Topology],
        machine_weighted: Callable[[], bool],
        new_world: Callable[[Any], Backend],
    ) -> None:
        self._comm, self._mpi, self._guard = comm, mpi, guard
        self._rank, self._n = comm.Get_rank(), comm.Get_size()
        self._checked, self._flush = checked, flush
        self._start_op, self._decomposition = start_op, decomposition
        self._topology, self._weighted, self._new_world = (
            machine_topology,
            machine_weighted,
            new_world,
        )
        self.local_comm = self._split(local_size)
        self.local_size = int(self.local_comm.Get_size())
        self.local_rank = int(self.local_comm.Get_rank())
        layout = np.empty((self._n, 2), np.int64)
        comm.Allgather(np.array([self.local_size, self.local_rank], np.int64), layout)
        # why the machine-level ops cannot run here, or None
        self.error = layout_error([(int(k), int(lr)) for k, lr in layout.tolist()])
        self._world: Backend | None = None  # the local ranks 0 as one world (on use)
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

    def bytes_sent(self, reset: bool) -> int:
        """The bytes this rank sent in the machines' world (hierarchical steps)."""
        world = self._world
        return 0 if world is None else int(world.bytes_sent(reset))

    def check(self, op: str) -> None:
        """Raise a ValueError naming ``op`` when the machines are not alike."""
        if self.error is not None:
            raise ValueError(f"{op}: {self.error}")

    def close(self) -> None:
        """Free the machines' world and the communicators made here."""
        null = self._mpi.COMM_NULL
        if self._world is not None:
            self._world.close()
            self._world = None
        for comm in [*(c for cs in self._stage_comms.values() for c in cs), self._roots_comm]:
            if comm is not None and comm != null:
                comm.Free()
        self._stage_comms.clear()
        self._roots_comm = None
        if self.local_comm is not None and self.local_comm != null:
            self.local_comm.Free()
        self.local_comm = None

    # -- among machines -------------------------------------------------------------------
    # The machine topology needs nothing when it is set: the machines' world re-wires on
    # its next op.
    def _is_machine_root(self) -> bool:
        """Whether this is its machine's local rank 0 (collective on first call)."""
        if self._roots_comm is None:
            color = 0 if self.local_comm.Get_rank() == 0 else self._mpi.UNDEFINED
            self._roots_comm = self._comm.Split(color=color, key=self._rank)
        return bool(self._roots_comm != self._mpi.COMM_NULL)

    def _machine_world(self) -> Backend:
        """The local ranks 0, one per machine, as one world with the machine topology.

        Collective over those ranks only (built on first use).
        """
        topo, weighted = self._topology(), self._weighted()
        if self._world is None:
            self._world = self._new_world(self._roots_comm)
        world = self._world
        if world._topology is not topo or world.is_topology_weighted() != weighted:
            world.set_topology(topo, weighted)
        return world

    def _local_bcast(self, buf: np.ndarray) -> np.ndarray:
        """Broadcast ``buf`` from local rank 0, waiting through the stall guard: ranks
        that only wait give up their core to the ones working (processes may share cores)."""
        self._wait(self.local_comm.Ibcast(buf, root=0))
        return buf

    def _wait(self, req: Any) -> None:
        """Wait for an MPI request under the world's stall guard."""
        self._guard.wait(req.Test, req.Wait)

    # -- the ops --------------------------------------------------------------------------
    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_machine_weights: Any,
        dst_machine_weights: Any,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any:
        """Gather and average on local rank 0; exchange among machines; broadcast back."""
        op = "hierarchical_neighbor_allreduce"
        self._start_op(op, name, enable_topo_check)
        self._flush()
        arr, kind = self._checked(op, x, averaging=True, name=name)
        root = self._is_machine_root()
        k = self.local_comm.Get_size()
        mean = arr  # one process per machine: its value is the machine's average
        if k > 1:
            gathered = np.empty((k, *arr.shape), arr.dtype) if root else None
            self._wait(self.local_comm.Igather(arr, gathered, root=0))
            if gathered is not None:
                mean = gathered[0].copy()
                for j in range(1, k):
                    mean += gathered[j]
                np.divide(mean, k, out=mean)
        out: np.ndarray | None = None
        report: tuple[str, str] | None = None  # an error's type name and message
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
                report = (type(error).__name__, str(error))
        if k > 1:  # the other local ranks wait yielding the core (see _local_bcast)
            failed = self._local_bcast(np.array([report is not None], dtype=np.int8))
            if failed[0]:
                told = mpi_bcast_json(self.local_comm, None if report is None else [*report])
                report = (str(told[0]), str(told[1]))
        if report is not None:
            raise (TypeError if report[0] == "TypeError" else ValueError)(report[1])
        if k > 1:
            out = self._local_bcast(np.empty_like(arr) if out is None else out)
        assert out is not None  # the exchange's result, here or from local rank 0
        return wrap_like(out, kind)

    def local_allreduce(self, x: Any, average: bool, name: str | None) -> Any:
        """Return the average (or sum) of ``x`` over this agent's machine."""
        self._start_op("allreduce(is_hierarchical_local=True)", name, average=average)
        self._flush()
        arr, kind = self._checked("allreduce-local", x, averaging=average, adds=True, name=name)
        out = np.empty_like(arr)
        self._wait(self.local_comm.Iallreduce(arr, out, op=self._mpi.SUM))
        if average:
            np.divide(out, self.local_comm.Get_size(), out=out)
        return wrap_like(out, kind)

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        """Return the allreduce computed in reduce-scatter/all-gather stages."""
        check_name(name)
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
            name=name,
        )
        assert factors is not None  # the agreement raised the error on every rank
        comms = self._stage_comms.get(factors)
        if comms is None:
            comms = self._stage_comms[factors] = self._split_stages(factors)
        buf = arr.reshape(-1).copy()
        lo, hi, stages = 0, buf.size, []
        for comm, d in zip(comms, digits(self._rank, factors), strict=True):  # reduce-scatter
            bounds = piece_bounds(lo, hi, comm.Get_size())
            counts = np.diff(bounds)
            recv = np.empty((comm.Get_size(), counts[d]), buf.dtype)
            req = comm.Ialltoallv(
                [buf, (counts, bounds[:-1])],
                [recv, (np.full(len(counts), counts[d]), counts[d] * np.arange(len(counts)))],
            )
            self._wait(req)
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            acc = buf[lo:hi]
            acc[...] = recv[0]
            for j in range(1, len(recv)):
                acc += recv[j]
            stages.append(bounds)
        for comm, bounds in zip(reversed(comms), reversed(stages), strict=True):  # all-gather
            self._wait(comm.Iallgatherv(self._mpi.IN_PLACE, [buf, (np.diff(bounds), bounds[:-1])]))
        if average:
            np.divide(buf, self._n, out=buf)
        return wrap_like(buf.reshape(arr.shape), kind)

    def _split_stages(self, factors: tuple[int, ...]) -> list[Any]:
        """One communicator per factor: the ranks that differ only in that digit."""
        comms, stride = [], 1
        for p, d in zip(factors, digits(self._rank, factors), strict=True):
            comms.append(self._comm.Split(color=self._rank - d * stride, key=d))
            stride *= p
        return comms
