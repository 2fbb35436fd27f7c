"""The base class of the distributed runtimes' backends (MPI, torch.distributed).

Both are one agent per process, composed of parts built in their constructors over their
transport: ``collectives`` (a :class:`~.collectives.RuntimeCollectives`), ``neighbors``
(:class:`~.neighbor.NeighborOps`), ``machines`` (:class:`~.machines.MachineOps`) and
``windows``. :class:`DistributedBackend` holds what the two share beside them: the world's
answers read from the parts.
"""

from __future__ import annotations

from typing import Any

from ..._handles import HandleTable
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
