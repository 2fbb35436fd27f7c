"""The small interface through which the distributed runtime moves bytes.

A :class:`Transport` connects the ``size`` processes of one world, this one being
``rank``. Everything the shared protocol (:mod:`.agree`, the plans, the exchanges) needs
from a communication library is here; what it does not need (graph communicators, NCCL
streams) stays in the backend that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..._stall import Guard

__all__ = ["Messages", "Request", "RmaWindow", "Transport", "WindowTransport"]

#: Point-to-point messages of one batch: ``(buffer, peer rank)`` each.
Messages = Sequence[tuple[Any, int]]


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
    Collectives (:meth:`iallreduce_max`, :meth:`allgather_json`, :meth:`alltoall`,
    :meth:`barrier`) are called by every rank in the same order. Nothing received is
    ever unpickled: buffers are raw bytes of a known dtype, and the one exchange of
    structured values (:meth:`allgather_json`) is JSON text.

    Two attributes belong to the world the transport serves, which sets them (an
    implementation starts them at None): :attr:`guard` and :attr:`repair`.
    """

    rank: int
    size: int
    #: Whether :meth:`exchange` moves torch tensors where they live (NCCL or gloo), so that
    #: a caller with device tensors need not copy them to host memory first.
    takes_tensors: bool
    #: The world's stall guard (see `fogsim._stall`), under which the agreements wait, so
    #: that a rank that never comes is reported; None: they block.
    guard: Guard | None
    #: Completes, from a rank that did not start it, the data transfer that calls
    #: overlapping their agreement (``agree.start_agree(..., posted=True)``) start beside
    #: it: their ranks wait for it before they see that the agreement failed. Set by the
    #: neighbor ops of a data path that overlaps; None otherwise.
    repair: Callable[[], None] | None

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Start sending ``buf``'s bytes to rank ``dest``; ``buf`` must live until done."""
        ...

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        """Start receiving a message from rank ``source`` into ``buf`` (same byte size)."""
        ...

    def exchange(self, sends: Messages, recvs: Messages, tag: int = 0) -> Request:
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

    def allgather_json(self, value: Any) -> list[Any]:
        """Return every rank's ``value``, by rank, as ``json.loads`` reads it back.

        ``value`` is plain JSON data (None, bools, ints, floats, strings, and lists and
        dicts with string keys of these; tuples come back as lists), small (reports,
        host names). It travels as UTF-8 JSON bytes in fixed-format buffers (their
        lengths as int64, then the bytes), so a peer cannot make this rank run code;
        a message that is not JSON raises :class:`fogsim.backends._wire.BadMessage`
        (a ValueError) naming its rank.
        """
        ...

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        """Send block ``k`` of ``send`` (its first axis has ``size`` blocks) to rank ``k``;
        receive rank ``k``'s block for this rank into ``recv[k]`` (small tables)."""
        ...

    def barrier(self) -> None:
        """Block until every rank has called it."""
        ...


@runtime_checkable
class RmaWindow(Protocol):
    """One window of :class:`WindowTransport`: ``memory`` on every rank, open to the others.

    Offsets and counts are in elements of the window's dtype. The RMA calls are
    nonblocking: an ``origin`` buffer must live, unchanged, and a ``result`` buffer must not
    be read, until :meth:`flush` of that target returns. Between :meth:`open` and
    :meth:`free` every rank may access every other rank's memory at any time (one
    passive-target epoch: no target takes part in a transfer).
    """

    #: This rank's part of the window, flat, in the window's dtype (loads and stores of
    #: it are ordered with the other ranks' RMA calls by :meth:`sync`).
    memory: np.ndarray

    def open(self) -> None:
        """Start the epoch in which all ranks access the window, then :meth:`sync`.

        Call it after storing the initial values into ``memory``, before the barrier
        that lets the other ranks write.
        """
        ...

    def accumulate(self, origin: np.ndarray, target: int, offset: int, replace: bool) -> None:
        """Start adding ``origin`` (``replace``: writing it) into ``target``'s memory at
        ``offset``, atomically per element with the other accumulates and swaps."""
        ...

    def get(self, result: np.ndarray, target: int, offset: int) -> None:
        """Start reading ``result.size`` elements of ``target``'s memory at ``offset``."""
        ...

    def compare_and_swap(self, compare: int, new: int, target: int, offset: int) -> int:
        """Atomically set ``target``'s element ``offset`` to ``new`` if it is ``compare``;
        return the value it held (blocking: the swap is complete at ``target``)."""
        ...

    def flush(self, target: int) -> None:
        """Complete every started call to ``target``, at this rank *and* at ``target``."""
        ...

    def sync(self) -> None:
        """Synchronize ``memory`` with the window: this rank's stores become visible to
        the others' RMA, and their completed (flushed) writes to its loads."""
        ...

    def free(self) -> None:
        """End the epoch and free the window (collective); ``memory`` is gone after."""
        ...


@runtime_checkable
class WindowTransport(Protocol):
    """The one-sided capability (windows), apart: a transport may lack it.

    The window ops of a runtime (:mod:`.windows`) run over it; see
    :class:`RmaWindow` for what a window does and the completion rules.
    """

    def allocate(self, count: int, dtype: np.dtype) -> RmaWindow:
        """Return a new window of ``count`` elements of ``dtype`` on every rank
        (collective); its memory holds no defined values until stored."""
        ...
