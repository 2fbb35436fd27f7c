"""The base class of the distributed runtimes' backends (MPI, torch.distributed).

Both are one agent per process, composed of parts built in their constructors over their
transport: ``collectives`` (a :class:`~.collectives.RuntimeCollectives`), ``neighbors``
(:class:`~.neighbor.NeighborOps`), ``machines`` (:class:`~.machines.MachineOps`) and
``windows``. :class:`DistributedBackend` holds what the two share beside them: the world
answers read from the parts, and the public ops forwarded to them.
"""

from __future__ import annotations

from typing import Any

from ..._handles import Handle, HandleTable
from .._base import OneAgentEach
from .collectives import RuntimeCollectives
from .machines import MachineLink, MachineOps
from .neighbor import NeighborOps
from .transport import Transport

__all__ = ["DistributedBackend"]


class DistributedBackend(OneAgentEach):
    """A backend of one agent per process whose ops are run by its parts."""

    transport: Transport
    collectives: RuntimeCollectives[Any]
    neighbors: NeighborOps
    machines: MachineOps[Any]
    handles: HandleTable

    def machine_ops(self, link: MachineLink[Any]) -> MachineOps[Any]:
        """Return the machines part over ``link``, once ``collectives`` and ``neighbors`` are
        built (collective: the machine layout is checked on every rank)."""
        return MachineOps(
            self.transport,
            link,
            self.collectives.checked,
            self.neighbors.flush,
            self.load_machine_topology,
            self.is_machine_topology_weighted,
        )

    def bytes_sent(self, reset: bool = False) -> int:
        """Return the bytes of values this rank handed to the transport in the neighbor
        ops, once per destination, hierarchical steps' exchanges among machines included."""
        path = self.neighbors.path
        sent = path.sent + self.machines.bytes_sent(reset)
        if reset:
            path.sent = 0
        return sent

    def in_neighbor_ranks(self) -> list[int]:
        return self.load_topology().in_neighbors(self.neighbors.rank)

    def out_neighbor_ranks(self) -> list[int]:
        return self.load_topology().out_neighbors(self.neighbors.rank)

    def local_size(self) -> int:
        return self.machines.local_size

    def local_rank(self) -> int:
        return self.machines.local_rank

    def check_machines(self, op: str) -> None:
        self.machines.check(op)

    # -- the public ops, forwarded to the parts ---------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.collectives.allreduce(x, average, name)

    def allreduce_nonblocking(
        self, x: Any, average: bool = True, name: str | None = None
    ) -> Handle:
        return self.collectives.allreduce_nonblocking(x, average, name)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.collectives.allgather(x, name)

    def allgather_nonblocking(self, x: Any, name: str | None = None) -> Handle:
        return self.collectives.allgather_nonblocking(x, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.collectives.broadcast(x, root_rank, name)

    def broadcast_nonblocking(self, x: Any, root_rank: int, name: str | None = None) -> Handle:
        return self.collectives.broadcast_nonblocking(x, root_rank, name)

    def barrier(self) -> None:
        self.collectives.barrier()

    def barrier_nonblocking(self) -> Handle:
        return self.collectives.barrier_nonblocking()

    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        return self.neighbors.neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name
        )

    def neighbor_allreduce_nonblocking(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Handle:
        return self.neighbors.neighbor_allreduce_nonblocking(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name
        )

    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        return self.neighbors.neighbor_allgather(x, src_ranks, dst_ranks, name)

    def neighbor_allgather_nonblocking(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Handle:
        return self.neighbors.neighbor_allgather_nonblocking(x, src_ranks, dst_ranks, name)

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_machine_weights: Any = None,
        dst_machine_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        return self.machines.hierarchical_neighbor_allreduce(
            x, self_weight, src_machine_weights, dst_machine_weights, enable_topo_check, name
        )

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.machines.local_allreduce(x, average, name)

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        return self.machines.decomposed_allreduce(x, average, name, factors)
