"""The parts a backend is composed of, each a protocol declared once.

A backend is one world (:class:`~fogsim.backends.Backend`: size, ranks, topology, agent-local
values) composed of parts, each built in the backend's constructor from what it needs:

* :class:`Collectives`: ``allreduce``, ``allgather``, ``broadcast``, ``barrier``;
* :class:`Neighbors`: ``neighbor_allreduce``, ``neighbor_allgather``;
* :class:`Machines`: the machine-level ops (``hierarchical_neighbor_allreduce``, the
  machine-local and the decomposed allreduce);
* :class:`~fogsim.backends._windows.WindowPart`: the one-sided window ops.

The public ops (:mod:`fogsim._api`) reach an implementing method through a typed reference to
its part (``lambda world: world.neighbors.neighbor_allreduce``), so mypy checks each route.

Each op has a ``*_nonblocking`` twin returning a :class:`~fogsim.Handle`. A part that runs its
ops at once (the simulator's, the SPMD agents') subclasses the protocol explicitly and
inherits the twins written here, which run the blocking op and return a completed handle; a
part that overlaps communication with computation (MPI, torch.distributed) writes its own.

What a world can do is declared in its :class:`Capabilities`, never probed with
``isinstance`` or ``hasattr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._handles import Handle

if TYPE_CHECKING:
    from .._types import ArrayLike, Ranks, SelfWeight, Weights

__all__ = ["Capabilities", "Collectives", "Machines", "Neighbors"]


@dataclass(frozen=True)
class Capabilities:
    """What a world can do, declared by its backend."""

    #: Agent-local values are stacked along a leading agent axis (the simulators); else each
    #: process or thread holds its own agent's value.
    stacked: bool
    #: The one-sided window ops run (``win_create`` and the rest).
    windows: bool
    #: Torch tensors on CUDA devices are combined where they live.
    cuda: bool = False
    #: The ``*_nonblocking`` ops overlap with what the caller does until ``wait``.
    overlaps: bool = False


class Collectives(Protocol):
    """Ops every agent takes part in: ``allreduce``, ``allgather``, ``broadcast``,
    ``barrier``, with the public functions' arguments."""

    def allreduce(self, x: ArrayLike, average: bool = True, name: str | None = None) -> Any: ...

    def allgather(self, x: ArrayLike, name: str | None = None) -> Any: ...

    def broadcast(self, x: ArrayLike, root_rank: int, name: str | None = None) -> Any: ...

    def barrier(self) -> None: ...

    def allreduce_nonblocking(
        self, x: ArrayLike, average: bool = True, name: str | None = None
    ) -> Handle:
        return Handle.completed("allreduce", self.allreduce(x, average, name), name)

    def allgather_nonblocking(self, x: ArrayLike, name: str | None = None) -> Handle:
        return Handle.completed("allgather", self.allgather(x, name), name)

    def broadcast_nonblocking(
        self, x: ArrayLike, root_rank: int, name: str | None = None
    ) -> Handle:
        return Handle.completed("broadcast", self.broadcast(x, root_rank, name), name)

    def barrier_nonblocking(self) -> Handle:
        self.barrier()
        return Handle.completed("barrier", None)


class Neighbors(Protocol):
    """The neighbor ops, with the public functions' arguments."""

    def neighbor_allreduce(
        self,
        x: ArrayLike,
        self_weight: SelfWeight = None,
        src_weights: Weights = None,
        dst_weights: Weights = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any: ...

    def neighbor_allgather(
        self,
        x: ArrayLike,
        src_ranks: Ranks = None,
        dst_ranks: Ranks = None,
        name: str | None = None,
    ) -> Any: ...

    def neighbor_allreduce_nonblocking(
        self,
        x: ArrayLike,
        self_weight: SelfWeight = None,
        src_weights: Weights = None,
        dst_weights: Weights = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Handle:
        result = self.neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name
        )
        return Handle.completed("neighbor_allreduce", result, name)

    def neighbor_allgather_nonblocking(
        self,
        x: ArrayLike,
        src_ranks: Ranks = None,
        dst_ranks: Ranks = None,
        name: str | None = None,
    ) -> Handle:
        result = self.neighbor_allgather(x, src_ranks, dst_ranks, name)
        return Handle.completed("neighbor_allgather", result, name)


class Machines(Protocol):
    """The machine-level ops, with the public functions' arguments.

    Machine m holds ranks ``m * local_size .. (m + 1) * local_size - 1``; every machine holds
    the same number of agents (``check`` raises a ValueError naming the op otherwise).
    """

    def check(self, op: str) -> None: ...

    def hierarchical_neighbor_allreduce(
        self,
        x: ArrayLike,
        self_weight: SelfWeight,
        src_machine_weights: Weights,
        dst_machine_weights: Weights,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any: ...

    def local_allreduce(self, x: ArrayLike, average: bool, name: str | None) -> Any: ...

    def decomposed_allreduce(
        self, x: ArrayLike, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any: ...

    def hierarchical_neighbor_allreduce_nonblocking(
        self,
        x: ArrayLike,
        self_weight: SelfWeight,
        src_machine_weights: Weights,
        dst_machine_weights: Weights,
        enable_topo_check: bool,
        name: str | None,
    ) -> Handle:
        result = self.hierarchical_neighbor_allreduce(
            x, self_weight, src_machine_weights, dst_machine_weights, enable_topo_check, name
        )
        return Handle.completed("hierarchical_neighbor_allreduce", result, name)
