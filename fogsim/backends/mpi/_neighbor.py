"""Neighbor ops of the MPI runtime, tensor fusion, and the handle table.

Static calls move data with the graph communicator's ``(I)neighbor_allgather``; dynamic
calls with ``Isend``/``Irecv`` per call. Small nonblocking static calls are queued and
fused: their bytes are packed into one buffer, sent in one collective when any of them is
waited on (or the buffer fills, or another op needs the ordering), and unpacked into their
owners byte for byte. Every rank flushes at the same points of the program, since the
triggers are ops, never timing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from ... import _arrays, _core
from ... import timeline as _timeline
from ..._arrays import wrap_like
from ..._handles import Handle, HandleTable
from .._runtime.agree import (
    REPAIRS,
    LocalError,
    agree,
    fingerprint,
    fused_terms,
    settle,
    start_agree,
)
from .._runtime.exchange import check_pairs, exchange_send_tables, neighbor_rows
from .._runtime.plan import RankPlan, rank_plan, rank_weights
from .._weights import is_matrix

__all__ = ["NeighborOps"]

# MPICH's neighbor collectives truncate a longer message quietly (tests/dual_cases.py,
# case_shapes_that_differ_raise_everywhere, checks it); others may fail on it.
_TRUNCATES_QUIETLY = "MPICH" in MPI.Get_library_version()

_FP_CACHE_SIZE = 1024  # (dtype, shape, plan) fingerprints remembered per backend
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def _plain(x: Any, self_weight: Any, src_weights: Any, dst_weights: Any, name: Any) -> bool:
    """Whether a call is the common case: a float numpy array and the topology's weights
    (a name only labels the call on the timeline)."""
    return (
        type(x) is np.ndarray
        and self_weight is None
        and src_weights is None
        and dst_weights is None
        and (name is None or type(name) is str)
        and x.dtype in _FLOATS
        and x.flags.c_contiguous
    )


def _describe(arr: np.ndarray) -> str:
    return f"{arr.dtype} {arr.shape} in neighbor_allreduce"


def _done(data: Any, agreement: Any) -> bool:
    """Whether the mpi4py request ``data`` and the transport request ``agreement`` are both
    complete (a truncated message counts as complete)."""
    if not agreement.test():
        return False
    for req in (data,):
        try:
            if not req.Test():
                return False
        except MPI.Exception:
            pass
    return True


def combine(
    arr: np.ndarray,
    plan: RankPlan,
    recv: np.ndarray,
    weights: np.ndarray,
    offset: int = 0,
    select: np.ndarray | None = None,
) -> np.ndarray:
    """Return ``self_weight * arr + sum_k weights[k] * y_k`` in ascending source order.

    ``y_k`` is row ``select[k]`` (``k`` without select) of ``recv``, read in place from byte
    ``offset`` (see :func:`fogsim._core.combine_rows`).
    """
    return _core.combine_rows(
        np.empty_like(arr), plan.self_weight, arr, weights, recv, offset, select
    )


class NeighborOps:
    """Mixin of :class:`MPIBackend`: neighbor ops, fusion queue, handle table."""

    comm: Any
    graph_comm: Any
    _n: int
    _rank: int
    _static: RankPlan
    _fusion_threshold: int

    def _init_neighbor_ops(self) -> None:
        self.handles = HandleTable()
        self.p2p_comm = self.comm.Dup()  # dynamic transfers never meet collectives
        self._fusion = _core.FusionQueue(self._fusion_threshold, self._send_batch, self.handles)
        self._fingerprints: dict[tuple, int] = {}
        REPAIRS[id(self.transport)] = self._complete_exchange

    def _close_neighbor_ops(self) -> None:
        REPAIRS.pop(id(self.transport), None)

    def _complete_exchange(self) -> None:
        """Take part, sending nothing, in the graph collective that the other ranks started
        beside an agreement this rank failed (see ``_runtime.agree.REPAIRS``)."""
        recv = np.empty((len(self._static.srcs), 0), np.uint8)
        req = self.graph_comm.Ineighbor_allgather(np.empty(0, np.uint8), recv)
        try:
            self.stall.wait(req.Test, req.Wait)
        except MPI.Exception:  # their bytes do not fit in none: discarded, as meant
            pass

    def _flush(self) -> None:
        """Send the queued nonblocking calls now (collective: all ranks flush alike)."""
        self._fusion.flush()

    def _drain(self) -> None:
        self._fusion.flush()
        self.handles.drain()

    # -- neighbor_allreduce ---------------------------------------------------------------
    def neighbor_allreduce(
        self,
        x,
        self_weight=None,
        src_weights=None,
        dst_weights=None,
        enable_topo_check=True,
        name=None,
    ):
        if _plain(x, self_weight, src_weights, dst_weights, name) and (
            enable_topo_check is True or enable_topo_check is False
        ):  # the common case: the static topology's weights on a numpy array
            if len(self._fusion):
                self._fusion.flush()
            plan = self._static
            if enable_topo_check:
                if _TRUNCATES_QUIETLY:
                    tl = _timeline.active
                    if tl is None:
                        return self._checked_static_exchange(x, plan)
                    return self._traced_checked_static_exchange(tl, x, plan)
                agree(
                    self.transport, self._fingerprint(x, plan, False), None, partial(_describe, x)
                )
            return self._static_exchange(x, plan, plan.weights)
        return self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=True
        )

    def _static_exchange(self, arr: np.ndarray, plan: RankPlan, weights: np.ndarray):
        """Blocking: every in-neighbor's ``arr`` over the graph communicator, combined."""
        tl = _timeline.active
        if tl is not None:
            return self._traced_static_exchange(tl, arr, plan, weights)
        recv = np.empty((len(self._static.srcs), *arr.shape), dtype=arr.dtype)
        self.graph_comm.Neighbor_allgather(arr, recv)
        return combine(arr, plan, recv, weights, select=plan.select)

    def _checked_static_exchange(self, arr: np.ndarray, plan: RankPlan):
        """:meth:`_static_exchange` with the agreement on shapes and dtypes travelling
        while the data do (the topology was agreed by ``set_topology``): on a mismatch
        the received bytes are discarded and every rank raises the agreed error. Only
        where a neighbor's larger value is truncated quietly (MPICH; Open MPI's
        nonblocking neighbor collectives crash on a truncated message), else the
        agreement comes first. A rank that meets this call with another op completes the
        transfer for it once the agreement failed (``_runtime.agree.REPAIRS``)."""
        flags, agreement = start_agree(
            self.transport, self._fingerprint(arr, plan, False), None, posted=True
        )
        recv = np.empty((len(self._static.srcs), *arr.shape), dtype=arr.dtype)
        self._wait_overlapped(self.graph_comm.Ineighbor_allgather(arr, recv), agreement)
        settle(self.transport, flags, None, partial(_describe, arr), posted=True)
        return combine(arr, plan, recv, plan.weights, select=plan.select)

    def _wait_overlapped(self, data: Any, agreement: Any) -> None:
        """Wait for a transfer, then for the agreement started beside it."""
        try:
            self.stall.wait(data.Test, data.Wait)
        except MPI.Exception:  # a truncated message: the agreement tells why
            pass
        self.stall.wait(agreement.test, agreement.wait)

    def _traced_checked_static_exchange(self, tl, arr: np.ndarray, plan: RankPlan):
        """:meth:`_checked_static_exchange` with its phases on the timeline: COMMUNICATE
        (the agreement and the data travel together), NEGOTIATE (the agreement's outcome),
        COMPUTE_AVERAGE."""
        t = tl.clock_ns()
        flags, agreement = start_agree(
            self.transport, self._fingerprint(arr, plan, False), None, posted=True
        )
        recv = np.empty((len(self._static.srcs), *arr.shape), dtype=arr.dtype)
        self._wait_overlapped(self.graph_comm.Ineighbor_allgather(arr, recv), agreement)
        t = tl.since("COMMUNICATE", t)
        try:
            settle(self.transport, flags, None, partial(_describe, arr), posted=True)
        finally:
            t = tl.since("NEGOTIATE", t)
        out = combine(arr, plan, recv, plan.weights, select=plan.select)
        tl.since("COMPUTE_AVERAGE", t)
        return out

    def _traced_static_exchange(self, tl, arr, plan, weights):
        recv = np.empty((len(self._static.srcs), *arr.shape), dtype=arr.dtype)
        t = tl.clock_ns()
        self.graph_comm.Neighbor_allgather(arr, recv)
        t = tl.since("COMMUNICATE", t)
        out = combine(arr, plan, recv, weights, select=plan.select)
        tl.since("COMPUTE_AVERAGE", t)
        return out

    def neighbor_allreduce_nonblocking(
        self,
        x,
        self_weight=None,
        src_weights=None,
        dst_weights=None,
        enable_topo_check=True,
        name=None,
    ):
        if (
            self_weight is None
            and src_weights is None
            and dst_weights is None
            and name is None
            and enable_topo_check is True
        ):
            # the common case, straight to the queue: ranks agree once per fused batch
            handle = self._fusion.add_static(x)
            if handle is not None:
                return handle
        return self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=False
        )

    def _parse(self, x, self_weight, src_weights, dst_weights, check):
        """Return (array, kind, plan, error) from this rank's arguments alone.

        With the check on, a bad argument is returned as ``error`` so that every rank
        can raise it together; with it off it is raised here.
        """
        try:
            arr, kind = self._value(x, "neighbor_allreduce", averaging=True)
            if self_weight is None and src_weights is None and dst_weights is None:
                plan = self._static
            else:
                plan = rank_plan(
                    self._n,
                    self._rank,
                    self._topology,
                    self._static,
                    self_weight,
                    src_weights,
                    dst_weights,
                )
        except (TypeError, ValueError) as exc:
            if not check:
                raise
            return None, None, None, LocalError(exc)
        return arr, kind, plan, None

    def _plan_call(self, x, self_weight, src_weights, dst_weights, check):
        """Return (array, kind, plan, weights) once every rank agreed, else raise on all.

        One ``Allreduce`` settles shapes, dtypes, the kind of call and local argument
        errors; a dynamic call with weight dicts then exchanges who sends to whom (one
        ``Alltoall``) and agrees once more on the outcome.
        """
        arr, kind, plan, error = self._parse(x, self_weight, src_weights, dst_weights, check)
        if not check:
            return arr, kind, plan, plan.weights
        exchange = dst_weights is not None and not is_matrix(src_weights)
        if error is None:
            fp = self._fingerprint(arr, plan, exchange)
            describe = partial(_describe, arr)
        else:
            fp, describe = 0, "an invalid argument"
        agree(self.transport, fp, error, describe)
        if not exchange:
            return arr, kind, plan, plan.weights
        weights, mismatch = exchange_send_tables(self.transport, plan)
        agree(self.transport, 0, mismatch, "")
        return arr, kind, plan, weights

    def _fingerprint(self, arr: np.ndarray, plan: RankPlan, exchange: bool) -> int:
        """Return the fingerprint of a call's dtype, shape and plan (computed once each)."""
        key = (arr.dtype, arr.shape, plan.fingerprint, plan.static, exchange)
        fp = self._fingerprints.get(key)
        if fp is None:
            if len(self._fingerprints) >= _FP_CACHE_SIZE:
                self._fingerprints.clear()
            fp = self._fingerprints[key] = fingerprint(
                "neighbor_allreduce",
                arr.dtype.str,
                arr.shape,
                plan.fingerprint,
                plan.static,
                exchange,
            )
        return fp

    def _neighbor_allreduce(self, x, self_weight, src_weights, dst_weights, check, name, blocking):
        """Blocking: return the result. Nonblocking: return a handle (static calls queue)."""
        if name is not None:
            _arrays.check_name(name)
        if check is not True and check is not False:
            raise TypeError("enable_topo_check must be a bool")
        if (
            not blocking
            and dst_weights is None
            and (src_weights is None or not is_matrix(src_weights))
        ):
            # Static nonblocking calls are queued; ranks agree once per fused batch.
            arr, kind, plan, error = self._parse(x, self_weight, src_weights, dst_weights, check)
            wrap = (
                None
                if kind is None or not (kind.torch or kind.half)
                else partial(wrap_like, kind=kind)
            )
            return self._fusion.add(arr, plan, wrap, error, check, name)
        if len(self._fusion):
            self._fusion.flush()
        arr, kind, plan, weights = self._plan_call(x, self_weight, src_weights, dst_weights, check)
        if plan.static:  # only blocking calls get here
            return wrap_like(self._static_exchange(arr, plan, weights), kind)
        handle = self._start_dynamic(
            arr, kind, plan, weights, scale=not check and plan.exchange, name=name
        )
        return handle.wait() if blocking else handle

    def _start_dynamic(self, arr, kind, plan, weights, scale, name) -> Handle:
        recv = np.empty((len(plan.srcs), *arr.shape), dtype=arr.dtype)
        # recv[k, ...]: a view even for 0-d values (recv[k] would be a read-only scalar)
        reqs = [self.p2p_comm.Irecv(recv[k, ...], source=int(j)) for k, j in enumerate(plan.srcs)]
        keep = []
        for j, s in zip(
            plan.dsts, plan.send_weights if scale else [1.0] * len(plan.dsts), strict=True
        ):
            buf = arr if s == 1.0 else np.multiply(arr, arr.dtype.type(s))
            keep.append(buf)
            reqs.append(self.p2p_comm.Isend(buf, dest=int(j)))

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                MPI.Request.Waitall(reqs)
            keep.clear()
            with _timeline.phase("COMPUTE_AVERAGE"):
                out = combine(arr, plan, recv, weights)
            return wrap_like(out, kind)

        return self.handles.start(
            "neighbor_allreduce", finish, partial(MPI.Request.Testall, reqs), name
        )

    # -- fusion ---------------------------------------------------------------------------
    def _send_batch(self, entries: list, total: int, layout: int | None, error) -> None:
        """Agree on the queued calls (``layout``: see :class:`fogsim._core.FusionQueue`),
        pack them and start one neighbor collective. Where a larger message is truncated
        quietly (MPICH), the agreement travels beside the data, as in
        :meth:`_checked_static_exchange`, and the first wait settles it."""
        overlap = layout is not None and error is None and _TRUNCATES_QUIETLY
        if layout is not None:
            fp, describe = fused_terms(layout, error, entries)
            if overlap:
                flags, agreement = start_agree(self.transport, fp, None, posted=True)
            else:
                agree(self.transport, fp, error, describe)
        with _timeline.phase("ALLOCATE"):
            send = np.empty(total, dtype=np.uint8)
            recv = np.empty((len(self._static.srcs), total), np.uint8)
        with _timeline.phase("FUSION_COPY_IN"):
            _core.pack(send, [e.arr for e in entries], [e.offset for e in entries])
        data = self.graph_comm.Ineighbor_allgather(send, recv)
        if not overlap:
            _core.FusedBatch(entries, send, recv, data, self.stall.wait, None, _timeline.running)
            return

        def wait(test: Any, block: Any) -> None:
            self._wait_overlapped(data, agreement)
            settle(self.transport, flags, None, describe, posted=True)

        _core.FusedBatch(
            entries, send, recv, data, wait, partial(_done, data, agreement), _timeline.running
        )

    # -- neighbor_allgather ---------------------------------------------------------------
    def neighbor_allgather(self, x, src_ranks=None, dst_ranks=None, name=None):
        return self.neighbor_allgather_nonblocking(x, src_ranks, dst_ranks, name).wait()

    def neighbor_allgather_nonblocking(self, x, src_ranks=None, dst_ranks=None, name=None):
        _arrays.check_name(name)
        self._flush()
        error, srcs, dsts = None, None, None
        try:
            if (src_ranks is None) != (dst_ranks is None):
                raise ValueError(
                    "neighbor_allgather needs both src_ranks and dst_ranks, or neither"
                )
            if src_ranks is not None:
                srcs, _ = rank_weights(src_ranks, self._n, self._rank, "src_ranks")
                dsts, _ = rank_weights(dst_ranks, self._n, self._rank, "dst_ranks")
        except (TypeError, ValueError) as exc:
            error = LocalError(exc)
        arr, kind = self._checked(
            "neighbor_allgather",
            x,
            averaging=False,
            shape_of=lambda a: a.shape[1:],
            extra=(src_ranks is None,),
            error=error,
        )
        arr = arr.reshape(1) if arr.ndim == 0 else arr
        if srcs is None:
            srcs = np.asarray(self._static.srcs)
            comm, counts_comm = self.graph_comm, self.graph_comm
        else:
            check_pairs(self.transport, srcs, dsts)
            comm, counts_comm = None, None
        rows = self._neighbor_rows(arr.shape[0], srcs, dsts, counts_comm)
        per_row = int(np.prod(arr.shape[1:], dtype=np.int64))
        out = np.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        if comm is not None:
            displs = (np.cumsum(rows) - rows) * per_row
            reqs = [comm.Ineighbor_allgatherv(arr, [out, (rows * per_row, displs)])]
        else:
            starts = np.concatenate([[0], np.cumsum(rows)])
            reqs = [
                self.p2p_comm.Irecv(out[starts[k] : starts[k + 1]], source=int(j))
                for k, j in enumerate(srcs)
            ]
            reqs += [self.p2p_comm.Isend(arr, dest=int(j)) for j in dsts]

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                MPI.Request.Waitall(reqs)
            return wrap_like(out, kind)

        return self.handles.start(
            "neighbor_allgather", finish, lambda: MPI.Request.Testall(reqs), name
        )

    def _neighbor_rows(self, mine: int, srcs, dsts, graph_comm) -> np.ndarray:
        """Return the first-dimension length of each source's value (they may differ)."""
        if graph_comm is None:
            return neighbor_rows(self.transport, mine, srcs, dsts)
        rows = np.empty(len(srcs), dtype=np.int64)
        graph_comm.Neighbor_allgather(np.array([mine], dtype=np.int64), rows)
        return rows
