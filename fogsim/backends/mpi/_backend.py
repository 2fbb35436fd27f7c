"""The MPI runtime: one process per agent over mpi4py, raw buffers on the data path.

Collectives map to their MPI namesakes; the static topology lives in a distributed-graph
communicator (``Create_dist_graph_adjacent``) whose ``Ineighbor_allgather`` feeds the
weighted combine; dynamic calls use ``Isend``/``Irecv`` set up per call. Before data
moves, ranks agree on shapes, dtypes and (dynamic calls) who sends to whom, so a bad
call raises the same error on every rank instead of hanging (see ``_runtime.agree``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ... import _settings
from ..._arrays import to_numpy, wrap_like
from ..._handles import HandleTable
from ..._stall import Guard
from .._base import launched_size
from .._parts import Capabilities
from .._runtime.backend import DistributedBackend
from .._runtime.neighbor import NeighborOps
from .._runtime.windows import WindowOps
from ._collectives import MpiCollectives, mpi_array
from ._machines import MpiMachineLink
from ._neighbor import MpiDataPath
from ._peers import MPIPeers
from ._rma import MpiRma
from ._transport import MpiTransport

if TYPE_CHECKING:
    from ..._types import ArrayLike

__all__ = ["MPIBackend"]


class MPIBackend(DistributedBackend):
    """One agent per MPI process (see the module docstring).

    Its parts: ``collectives`` (``MpiCollectives`` on the world's communicator),
    ``neighbors`` (the runtime's, over ``MpiDataPath``), ``machines`` (the runtime's,
    over ``MpiMachineLink``) and ``windows`` (the runtime's, over MPI-3 RMA).
    """

    name = "mpi"
    capabilities = Capabilities(stacked=False, windows=True, overlaps=True)
    transport: MpiTransport
    collectives: MpiCollectives

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        comm: MPI.Intracomm | None = None,
    ) -> None:
        own = (MPI.COMM_WORLD if comm is None else comm).Dup()
        super().__init__(own.Get_size(), own.Get_rank())
        self._settings = settings or _settings.Settings()
        #: this world's communicator: a duplicate of ``comm`` (default the whole job's)
        self.comm: Any = own
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
        self.handles = HandleTable()
        self.neighbors = NeighborOps(
            self.transport,
            MpiDataPath(self.comm, mpi_array, self.stall),
            self.handles,
            self.stall,
            self._settings.fusion_threshold,
        )
        self.collectives = MpiCollectives(
            self.comm, MPI, self.transport, self.handles, self.neighbors.flush, self.stall
        )
        try:  # refused on every rank alike (a machine layout that cannot be)
            link = MpiMachineLink(self.comm, MPI, local_size, self.stall, self._new_machine_world)
            self.machines = self.machine_ops(link)
        except BaseException:
            self.neighbors.close()
            self._free_world()
            raise
        self.windows = WindowOps(
            self.transport,
            MpiRma(self.comm, MPI),
            self.load_topology,
            self.is_topology_weighted,
            self.neighbors.drain,
            self.check_rank,
            self.stall,
        )

    def _stall_guard(self, world: bool) -> Guard:
        """The world's stall guard (sub-worlds wait without one: the world reports)."""
        timeout = self._settings.stall_timeout if world else None
        peers = MPIPeers(self.comm.Dup(), MPI) if timeout is not None and self._n > 1 else None
        guard = Guard(self._rank, self._n, timeout, self._settings.stall_warn_only, peers)
        if peers is not None:  # the agreements wait under it
            self.transport.guard = guard
        return guard

    def _new_machine_world(self, roots_comm: Any) -> MPIBackend:
        """The machines' world: one agent per local rank 0, on ``roots_comm``."""
        return MPIBackend(local_size=1, settings=self._settings, comm=roots_comm)

    # -- world ----------------------------------------------------------------------------
    def close(self) -> None:
        """Free every communicator and window this world made (collective)."""
        self.neighbors.drain()
        self.neighbors.close()
        self.windows.close()
        self.machines.close()
        self._free_world()

    def _free_world(self) -> None:
        """Free the stall guard's side channel and the world's communicator."""
        peers = self.stall.peers
        self.transport.guard = None
        if isinstance(peers, MPIPeers):
            peers.close()
        if self.comm is not None and self.comm != MPI.COMM_NULL:
            self.comm.Free()
        self.comm = None

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        assert self._topology is not None
        self.neighbors.on_topology(self._topology, self._is_weighted)

    # -- agent-local data -----------------------------------------------------------------
    def global_view(self, x: ArrayLike) -> Any:
        arr, kind = to_numpy(x)
        return wrap_like(self.collectives.allgather(arr[None]), kind)
