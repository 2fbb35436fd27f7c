"""What the runtimes' collectives parts share: the agreement a collective starts with.

Each runtime writes its own :class:`~fogsim.backends.Collectives` part over its
library's collectives (``mpi._collectives.MpiCollectives``,
``torchdist._collectives.TorchCollectives``); :class:`RuntimeCollectives` is their base.
It holds the steps every collective takes before data moves, written once: the argument
checks, the flush of the queued neighbor calls (a collective must not pass them), and the
agreement on the value's shape, dtype, device and name, so that a call that differs
raises the same error on every rank instead of hanging. A runtime then only starts the
transfer (``start_allreduce`` and the rest); the blocking ops wait on their nonblocking
twins.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ... import _arrays
from ..._handles import Handle, HandleTable
from ..._stall import Guard
from .._base import check_rank
from .._parts import Collectives
from .agree import LocalError, agree, fingerprint, named, purpose
from .datapath import Value
from .transport import Transport

__all__ = ["RuntimeCollectives"]

V = TypeVar("V", bound=Value)


def _same(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape


def _trailing(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[1:]  # the allgather's rows may differ


class RuntimeCollectives(Collectives, abc.ABC, Generic[V]):
    """The base of a runtime's collectives part (see the module docstring).

    Built from what it needs: the world's ``transport`` (the agreements), ``handles`` (its
    handle table), ``flush`` (send the queued nonblocking neighbor calls), ``stall`` (its
    stall guard) and ``convert``: ``convert(x, op, averaging, adds)`` is this rank's ``x`` as
    the runtime's value ``V``, checked for what ``op`` takes (``adds``: the op adds values,
    a sum and not only an average).
    """

    def __init__(
        self,
        transport: Transport,
        handles: HandleTable,
        flush: Callable[[], None],
        stall: Guard,
        convert: Callable[[Any, str, bool, bool], V],
    ) -> None:
        self.transport, self.handles, self.stall = transport, handles, stall
        self.flush, self.convert = flush, convert
        self.rank, self.size = transport.rank, transport.size

    # -- the blocking ops: their nonblocking twins, waited for --------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.allreduce_nonblocking(x, average, name).wait()

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.allgather_nonblocking(x, name).wait()

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.broadcast_nonblocking(x, root_rank, name).wait()

    # -- the nonblocking ops: agreed here, then started by the runtime ------------------------
    def allreduce_nonblocking(
        self, x: Any, average: bool = True, name: str | None = None
    ) -> Handle:
        self.begin(name, average)
        value = self.checked("allreduce", x, averaging=average, adds=True, name=name)
        return self.start_allreduce(value, average, name)

    def broadcast_nonblocking(self, x: Any, root_rank: int, name: str | None = None) -> Handle:
        self.begin(name)
        root, error = self.checked_root(root_rank)
        value = self.checked(
            "broadcast", x, False, extra=(root,), error=error, name=name, said=f" from root {root}"
        )
        return self.start_broadcast(value, root, name)

    def allgather_nonblocking(self, x: Any, name: str | None = None) -> Handle:
        self.begin(name)
        value = self.checked("allgather", x, False, shape_of=_trailing, name=name)
        return self.start_allgather(value, name)

    def barrier(self) -> None:
        self.flush()
        test, wait = self.start_barrier()
        self.stall.wait(test, wait)

    @abc.abstractmethod
    def start_allreduce(self, value: V, average: bool, name: str | None) -> Handle:
        """Start the sum of every rank's agreed ``value`` (``average``: divided by the size)."""

    @abc.abstractmethod
    def start_broadcast(self, value: V, root: int, name: str | None) -> Handle:
        """Start sending rank ``root``'s agreed ``value`` to every rank."""

    @abc.abstractmethod
    def start_allgather(self, value: V, name: str | None) -> Handle:
        """Start gathering every rank's agreed ``value`` (0-d: as 1-d), rows in rank order."""

    @abc.abstractmethod
    def start_barrier(self) -> tuple[Callable[[], bool], Callable[[], Any]]:
        """Start a barrier; return its (test, wait)."""

    # -- before data moves ------------------------------------------------------------------
    def begin(self, name: Any, average: Any = True) -> None:
        """Check a collective's ``name`` and ``average`` flag; send the queued neighbor calls."""
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self.flush()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Let go of what the part holds (the backend frees it)."""

    def checked_root(self, root_rank: Any) -> tuple[int, LocalError | None]:
        """Return ``root_rank`` as a rank, or -1 and the problem with it (which the op's
        agreement raises on every rank: a root that is bad on one rank only must not
        leave the others waiting)."""
        try:
            return check_rank(root_rank, self.size, "root_rank"), None
        except (TypeError, ValueError) as exc:
            return -1, LocalError(exc)

    def checked(
        self,
        op: str,
        x: Any,
        averaging: bool,
        adds: bool = False,
        shape_of: Callable[[tuple[int, ...]], tuple[int, ...]] = _same,
        extra: tuple[Any, ...] = (),
        error: LocalError | None = None,
        name: str | None = None,
        said: str = "",
    ) -> V:
        """Convert ``x`` and agree with every rank on shape (``shape_of`` it), dtype, device,
        ``name`` and ``extra`` (``said``: how ``extra`` reads in a disagreement's message);
        raise on all ranks otherwise.

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        Nothing moves before the agreement, so a call that differs never starts a transfer.
        """
        value, fp, describe = None, 0, "an invalid argument"
        try:
            value = self.convert(x, op, averaging, adds)
            if error is None:
                shape = shape_of(value.shape)
                fp = fingerprint(
                    op, value.dtype.str, shape, averaging, repr(name), *extra, *value.key
                )
                describe = value.describe(shape) + named(name) + purpose(op, averaging)
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self.transport, fp, error, f"{describe} in {op}{said}")
        assert value is not None  # agree raised on every rank otherwise
        return value
