"""The transports a job's processes open among themselves, by name (see
:func:`fogsim.backends.open_transport`): each opener imports its runtime when called."""

from __future__ import annotations

from typing import Protocol

from .. import _settings
from ._runtime.transport import Transport

__all__ = ["OpenedTransport", "open_mpi", "open_torch"]


class OpenedTransport(Transport, Protocol):
    """A transport opened for a job, which whoever opened it frees when done."""

    def free(self) -> None:
        """Release what the transport holds (its communicator, its process groups)."""
        ...


def open_mpi(settings: _settings.Settings) -> OpenedTransport:
    """Return a transport over a duplicate of MPI's ``COMM_WORLD``."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - mpi4py is a dependency
        raise ValueError("a transport over MPI needs mpi4py, which is missing") from exc
    from .mpi._transport import MpiTransport

    return MpiTransport(MPI.COMM_WORLD.Dup(), MPI)


def open_torch(settings: _settings.Settings) -> OpenedTransport:
    """Return a transport over torch.distributed (started from ``settings``: torchrun's
    variables, or fogrun's)."""
    from .torchdist import _world
    from .torchdist._transport import TorchTransport

    rank, size = _world.start(settings)
    group, _ = _world.new_groups(rank, size)
    return TorchTransport(group, size, rank)
