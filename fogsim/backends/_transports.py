"""The transports a job's processes open among themselves, by name (see
:func:`fogsim.backends.open_transport`): each opener imports its runtime when called."""

from __future__ import annotations

from .. import _settings
from ._runtime.transport import Transport

__all__ = ["open_mpi", "open_torch"]


def open_mpi(settings: _settings.Settings) -> Transport:
    """Return a transport over a duplicate of MPI's ``COMM_WORLD``."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - mpi4py is a dependency
        raise ValueError("a transport over MPI needs mpi4py, which is missing") from exc
    from .mpi._transport import MpiTransport

    return MpiTransport(MPI.COMM_WORLD.Dup(), MPI)


def open_torch(settings: _settings.Settings) -> Transport:
    """Return a transport over torch.distributed (started from ``settings``: torchrun's
    variables, or fogrun's)."""
    from .torchdist import _world
    from .torchdist._transport import TorchTransport

    rank, size = _world.start(settings)
    group, _ = _world.new_groups(rank, size)
    return TorchTransport(group, size, rank)
