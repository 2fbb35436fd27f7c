"""The base class of the distributed runtimes' backends (MPI, torch.distributed).

Both are one agent per process and hold a :class:`~.neighbor.NeighborOps` part
(``self.neighbors``, built in their constructors over their transport);
:class:`DistributedBackend` answers the public neighbor ops with it, written once, with the
flush and drain their other ops need before a collective, and the machine-level ops with
its ``machines`` part.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..._handles import Handle, HandleTable
from .._base import OneAgentEach
from .._parts import Machines
from .agree import LocalError
from .neighbor import NeighborOps

__all__ = ["DistributedBackend", "MachineOps"]


class MachineOps(Machines, Protocol):
    """The part that runs a runtime's machine-level ops (``MpiMachineOps``,
    ``TorchMachineOps``), with the public functions' arguments."""

    local_size: int  # processes on this rank's machine
    local_rank: int  # this rank's place among them

    def check(self, op: str) -> None: ...

    def close(self) -> None: ...

    def bytes_sent(self, reset: bool) -> int:
        """The bytes this rank sent among machines (as its machine's local rank 0)."""
        ...

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_machine_weights: Any,
        dst_machine_weights: Any,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any: ...

    def local_allreduce(self, x: Any, average: bool, name: str | None) -> Any: ...

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any: ...


class DistributedBackend(OneAgentEach):
    """A backend of one agent per process whose neighbor ops are its ``neighbors`` part."""

    neighbors: NeighborOps
    machines: MachineOps
    handles: HandleTable

    def _flush(self) -> None:
        """Send the queued nonblocking calls now (collective: all ranks flush alike)."""
        self.neighbors.flush()

    def _drain(self) -> None:
        """Send the queue and complete every handle in flight."""
        self.neighbors.drain()

    def checked_root(self, root_rank: Any) -> tuple[int, LocalError | None]:
        """Return ``root_rank`` as a rank, or -1 and the problem with it (which the op's
        agreement raises on every rank: a root that is bad on one rank only must not
        leave the others waiting)."""
        try:
            return self.check_rank(root_rank, "root_rank"), None
        except (TypeError, ValueError) as exc:
            return -1, LocalError(exc)

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

    # -- machine level: run by the ``machines`` part --------------------------------------
    def local_size(self) -> int:
        return self.machines.local_size

    def local_rank(self) -> int:
        return self.machines.local_rank

    def check_machines(self, op: str) -> None:
        self.machines.check(op)

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
