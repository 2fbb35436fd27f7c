"""Transfers over the static topology: blocking, overlapped with their agreement, fused.

Every rank sends its value to each out-neighbor of the topology set by ``set_topology``
and receives one row per in-neighbor (:meth:`~.datapath.DataPath.start_static`). Small
nonblocking calls are fused (``_core.FusionQueue``): their bytes are packed into one
buffer, sent in one transfer when any of them is waited on (or the buffer fills, or
another op needs the ordering), and unpacked into their owners byte for byte.

Where the data path allows it (:attr:`~.datapath.DataPath.overlaps`), the agreement on a
call travels beside its data, but only for a call of the byte size every rank agreed on
last (:attr:`~.datapath.DataPath.agreed`), which a loop repeats: the bytes that move
before the agreement then have a size and type (raw bytes) that no disagreement can
change. A call of any other size is agreed first, as on a path that does not overlap, so
a dtype or shape that differs is refused before any byte of it moves. When the
agreement fails, a rank that did not start the transfer takes part in it with as many
bytes of its own (``Transport.repair``), what arrived is discarded, and every rank raises
the agreed error.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ... import _core
from ... import timeline as _timeline
from ..._stall import Guard
from .agree import LocalError, agree, fused_terms, named, settle, start_agree
from .datapath import DataPath
from .plan import RankPlan
from .transport import Request, Transport

__all__ = ["StaticTransfers", "combine", "describe_array"]


def combine(
    arr: np.ndarray,
    plan: RankPlan,
    recv: np.ndarray,
    weights: np.ndarray,
    select: np.ndarray | None,
) -> np.ndarray:
    """Return ``self_weight * arr + sum_k weights[k] * y_k`` in ascending source order,
    ``y_k`` row ``select[k]`` (``k`` without select) of ``recv``."""
    return _core.combine_rows(np.empty_like(arr), plan.self_weight, arr, weights, recv, 0, select)


def describe_array(arr: np.ndarray, name: str | None = None) -> str:
    """Say what a rank passed to ``neighbor_allreduce`` (for a disagreement's message)."""
    return f"{arr.dtype} {arr.shape}{named(name)} in neighbor_allreduce"


def _done(data: Request, agreement: Request) -> bool:
    """Whether a transfer and the agreement started beside it are both complete."""
    return agreement.test() and data.test()


class _Batch:
    """A :class:`~.transport.Request` spelled as :class:`fogsim._core.FusedBatch` calls it."""

    __slots__ = ("Test", "Wait")

    def __init__(self, req: Request) -> None:
        self.Test, self.Wait = req.test, req.wait


class StaticTransfers:
    """The static topology's transfers of one world, over ``path`` (see the module doc);
    ``transport`` carries the agreements, ``stall`` waits."""

    def __init__(self, transport: Transport, path: DataPath, stall: Guard) -> None:
        self.transport, self.path, self.stall = transport, path, stall

    def exchange(self, arr: np.ndarray, plan: RankPlan, weights: np.ndarray) -> np.ndarray:
        """Blocking: every in-neighbor's ``arr``, combined (agreed before)."""
        path = self.path
        recv = np.empty((len(path.srcs), *arr.shape), dtype=arr.dtype)
        tl = _timeline.active
        if tl is None:
            path.static_allgather(arr, recv)
            path.sent += arr.nbytes * len(path.dsts)
            return combine(arr, plan, recv, weights, plan.select)
        t = tl.clock_ns()
        path.static_allgather(arr, recv)
        path.sent += arr.nbytes * len(path.dsts)
        t = tl.since("COMMUNICATE", t)
        out = combine(arr, plan, recv, weights, plan.select)
        tl.since("COMPUTE_AVERAGE", t)
        return out

    def checked_exchange(
        self, arr: np.ndarray, plan: RankPlan, fp: int, name: str | None = None
    ) -> np.ndarray:
        """:meth:`exchange` with the agreement on the call (fingerprint ``fp``) travelling
        while the data do (the topology was agreed by ``set_topology``), where the path
        :attr:`~.datapath.DataPath.overlaps` and ``arr`` has the byte size agreed last;
        else the agreement comes first (see the module doc). A rank that meets this call
        with another op takes part in the transfer once the agreement failed
        (``Transport.repair``). On a running timeline: COMMUNICATE (the agreement and the
        data travel together), NEGOTIATE (the agreement's outcome), COMPUTE_AVERAGE."""
        if arr.nbytes != self.path.agreed:
            agree(self.transport, fp, None, partial(describe_array, arr, name))
            self.path.agreed = arr.nbytes
            return self.exchange(arr, plan, plan.weights)
        tl = _timeline.active
        t = 0 if tl is None else tl.clock_ns()
        flags, agreement = start_agree(self.transport, fp, None, posted=True)
        recv = np.empty((len(self.path.srcs), *arr.shape), dtype=arr.dtype)
        self._wait_overlapped(self.path.start_static(arr, recv), agreement)
        describe = partial(describe_array, arr, name)
        if tl is None:
            settle(self.transport, flags, None, describe, posted=True)
            self.path.sent += arr.nbytes * len(self.path.dsts)  # agreed: the call counts
            return combine(arr, plan, recv, plan.weights, plan.select)
        t = tl.since("COMMUNICATE", t)
        try:
            settle(self.transport, flags, None, describe, posted=True)
        finally:
            t = tl.since("NEGOTIATE", t)
        self.path.sent += arr.nbytes * len(self.path.dsts)
        out = combine(arr, plan, recv, plan.weights, plan.select)
        tl.since("COMPUTE_AVERAGE", t)
        return out

    def _wait_overlapped(self, data: Request, agreement: Request) -> None:
        """Wait for a transfer, then for the agreement started beside it.

        The request's own test/wait are polled (no wrapper: this is the hot path of a
        checked static call).
        """
        self.stall.wait(data.test, data.wait)
        self.stall.wait(agreement.test, agreement.wait)

    def send_batch(
        self, entries: list[Any], total: int, layout: int | None, error: Exception | None
    ) -> None:
        """Agree on the queued calls (``layout``: see :class:`fogsim._core.FusionQueue`),
        pack them and start one transfer; overlapped as in :meth:`checked_exchange` where
        the path allows it (the first wait then settles the agreement).

        ``error``: the first queued call's argument error, a :class:`~.agree.LocalError`
        (the queue holds what :class:`~.neighbor.NeighborOps` gave it)."""
        assert error is None or isinstance(error, LocalError)
        overlap = (
            layout is not None
            and error is None
            and self.path.overlaps
            and total == self.path.agreed
        )
        if layout is not None:
            fp, describe = fused_terms(layout, error, entries)
            if overlap:
                flags, agreement = start_agree(self.transport, fp, None, posted=True)
            else:
                # refused: the queue makes every call of the batch raise it, not only this one
                agree(self.transport, fp, error, describe)
                self.path.agreed = total
        with _timeline.phase("ALLOCATE"):
            send = np.empty(total, dtype=np.uint8)
            recv = np.empty((len(self.path.srcs), total), np.uint8)
        with _timeline.phase("FUSION_COPY_IN"):
            _core.pack(send, [e.arr for e in entries], [e.offset for e in entries])
        data = self.path.start_static(send, recv)
        # the fused calls' own bytes (not the buffer's alignment padding), per out-neighbor
        self.path.sent += sum(e.arr.nbytes for e in entries) * len(self.path.dsts)
        if not overlap:
            wait = self.path.batch_wait
            _core.FusedBatch(entries, send, recv, _Batch(data), wait, None, _timeline.running)
            return

        def settle_batch(test: Any, block: Any) -> None:
            self._wait_overlapped(data, agreement)
            settle(self.transport, flags, None, describe, posted=True)

        _core.FusedBatch(
            entries,
            send,
            recv,
            _Batch(data),
            settle_batch,
            partial(_done, data, agreement),
            _timeline.running,
        )
