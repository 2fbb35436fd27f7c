"""The small interface through which the distributed runtime moves bytes.

A :class:`Transport` connects the ``size`` processes of one world, this one being
``rank``. Everything the shared protocol (:mod:`.agree`, the plans, the exchanges) needs
from a communication library is here; what it does not need (graph communicators, NCCL
streams) stays in the backend that has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Request", "Transport", "WindowTransport"]


@runtime_checkable
class Request(Protocol):
    """A started nonblocking operation."""

    def test(self) -> bool:
        """Return whether the operation has completed (without blocking)."""
        ...

    def wait(self) -> None:
        """Block until the operation has completed."""
        ...


@runtime_checkable
class Transport(Protocol):
    """Point-to-point and small collective communication among ``size`` processes.

    Buffers are C-contiguous numpy arrays; a receive writes into the array it is given.
    Messages between one pair of ranks with one ``tag`` arrive in the order they were sent.
    Collectives (:meth:`iallreduce_max`, :meth:`allgather_object`, :meth:`alltoall`,
    :meth:`barrier`) are called by every rank in the same order.
    """

    rank: int
    size: int

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending ``buf``'s bytes to rank ``dest``; ``buf`` must live until done."""
        ...

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving a message from rank ``source`` into ``buf`` (same byte size)."""
        ...

    def exchange(
        self,
        sends: Sequence[tuple[Any, int]],
        recvs: Sequence[tuple[Any, int]],
        tag: int = 0,
    ) -> Request:
        """Start one batch of point-to-point messages: each ``(buf, dest)`` of ``sends``
        goes to rank ``dest``, each ``(buf, source)`` of ``recvs`` is filled from rank
        ``source``; return one request for the whole batch (the neighbor ops' data path).

        Buffers are those :meth:`isend`/:meth:`irecv` take; a transport may take more (the
        torch transport also takes tensors on their device). Every buffer must live until
        the request completes.
        """
        ...

    def iallreduce_max(self, flags: np.ndarray) -> Request:
        """Start replacing the int64 array ``flags``, in place, by its elementwise maximum
        over all ranks (a few integers of metadata, e.g. fingerprints)."""
        ...

    def allgather_object(self, obj: Any) -> list[Any]:
        """Return every rank's ``obj`` (a small picklable value), by rank."""
        ...

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        """Send block ``k`` of ``send`` (its first axis has ``size`` blocks) to rank ``k``;
        receive rank ``k``'s block for this rank into ``recv[k]`` (small tables)."""
        ...

    def barrier(self) -> None:
        """Block until every rank has called it."""
        ...


@runtime_checkable
class WindowTransport(Protocol):
    """The one-sided capability (windows), apart: a transport may lack it.

    ``window(buffer)`` exposes ``buffer`` to the other ranks (collective) and returns an
    object with ``put(origin, target, offset)``, ``accumulate(origin, target, offset)``,
    ``get(result, target, offset)``, ``lock(target)``/``unlock(target)``, ``flush(target)``
    and ``free()``; offsets count elements of ``buffer``.
    """

    def window(self, buffer: np.ndarray) -> Any:
        """Expose ``buffer`` to the other ranks (collective); return the window."""
        ...
