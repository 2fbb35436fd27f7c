"""Neighbor ops of the torch runtime: point-to-point transfers, fusion, the handle table.

Every call posts its receives and sends in one ``batch_isend_irecv`` (NCCL runs them as
one group; gloo one by one). Static calls receive from the topology's in-neighbors and
send to its out-neighbors; dynamic ones use the plan's partners (``rank_plan``, shared
with the MPI runtime). The combine is the simulator's: self first, then ascending source
rank, one rounded product of the float64 weight and the value added per neighbor, summed in
float64 (a float32 result rounded once), so the bits match; CPU values run the compiled
``combine_rows``, CUDA tensors the same steps in torch. Small nonblocking static calls on
CPU values are queued and fused as in the MPI runtime (``_core.FusionQueue``) in worlds
without CUDA; with CUDA every call is agreed on (devices included) on its own, so mixing
devices across ranks raises instead of hanging.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ... import _arrays, _core
from ... import timeline as _timeline
from ..._handles import HandleTable
from .._runtime.agree import LocalError, agree, fingerprint, fused_terms
from .._runtime.exchange import check_pairs, exchange_send_tables, neighbor_rows
from .._runtime.plan import RankPlan, rank_plan, rank_weights
from .._weights import is_matrix
from ._values import Value

__all__ = ["NeighborOps", "as_bytes", "p2p"]

_FP_CACHE_SIZE = 1024  # (dtype, shape, device, plan) fingerprints remembered per backend


def as_bytes(tensor: Any) -> Any:
    """Return a contiguous tensor's bytes as a flat uint8 view (gloo moves any dtype so)."""
    if not tensor.numel():  # torch will not view every empty layout as bytes
        return torch.empty(0, dtype=torch.uint8, device=tensor.device)
    flat = tensor.reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def p2p(op: Any, tensor: Any, peer: int, group: Any) -> Any:
    """Return one transfer with ``peer``, a rank of ``group`` (not of the whole job)."""
    return dist.P2POp(op, tensor, group=group, group_peer=int(peer))


def _wait_all(works: list) -> None:
    for work in works:
        work.wait()


class _Transfer:
    """The Work objects of one call's point-to-point transfers, waited on once.

    ``Wait``/``Test`` are the request calls :class:`fogsim._core.FusedBatch` makes. gloo's
    send/recv Works report completion only from their own ``wait()``, so a transfer that
    may be polled is waited on by the backend's waiter thread (``waiter``), and ``Test``
    asks that thread; NCCL's Works and blocking calls need no thread.
    """

    __slots__ = ("_works", "_future")

    def __init__(self, works: list, waiter: ThreadPoolExecutor | None = None) -> None:
        self._works = works
        self._future = waiter.submit(_wait_all, works) if waiter is not None and works else None

    def Wait(self) -> None:
        if self._future is not None:
            self._future.result()
        else:
            _wait_all(self._works)
            self._works = []

    def Test(self) -> bool:
        if self._future is not None:
            return self._future.done()
        return all(work.is_completed() for work in self._works)


def _combine_cuda(
    value: Value, plan: RankPlan, recv: Any, weights: np.ndarray, select: np.ndarray | None
) -> Any:
    """``self_weight * x + sum_k w_k * y_k`` in combine_rows' order and roundings, in torch:
    summed in float64, a float32 result rounded once at the end."""
    w = np.concatenate([[plan.self_weight], weights]).astype(np.float64)
    w = torch.from_numpy(w).to(value.tensor.device)
    out = value.tensor.to(torch.float64) * w[0]
    rows = range(len(weights)) if select is None else select.tolist()
    for k, row in enumerate(rows):
        out += w[k + 1] * recv[row].to(torch.float64)  # the product is rounded first: no FMA
    return out.to(value.tensor.dtype)


class NeighborOps:
    """Mixin of :class:`TorchBackend`: neighbor ops, fusion queue, handle table."""

    _n: int
    _rank: int
    _static: RankPlan
    _static_dsts: np.ndarray
    _fusion_threshold: int
    group: Any
    nccl_group: Any

    def _init_neighbor_ops(self) -> None:
        self.handles = HandleTable()
        self._fusion = _core.FusionQueue(self._fusion_threshold, self._send_batch, self.handles)
        self._fingerprints: dict[tuple, int] = {}
        self._nccl_ready = False
        self._waiter: ThreadPoolExecutor | None = None

    def _close_neighbor_ops(self) -> None:
        if self._waiter is not None:
            self._waiter.shutdown(wait=True)
            self._waiter = None

    def _flush(self) -> None:
        """Send the queued nonblocking calls now (collective: all ranks flush alike)."""
        self._fusion.flush()

    def _drain(self) -> None:
        self._fusion.flush()
        self.handles.drain()

    def _p2p(self, ops: list, cuda: bool, blocking: bool) -> _Transfer:
        """Start ``ops`` as one batch (every rank calls this, even with no ops)."""
        if cuda and not self._nccl_ready:
            # NCCL wants its first call on a group to involve every rank: a tiny collective.
            dist.all_reduce(torch.zeros(1, device="cuda"), group=self.nccl_group)
            self._nccl_ready = True
        works = dist.batch_isend_irecv(ops) if ops else []
        if blocking or cuda or not works:
            return _Transfer(works)
        if self._waiter is None:
            self._waiter = ThreadPoolExecutor(1, thread_name_prefix="fogsim-torch-waiter")
        return _Transfer(works, self._waiter)

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
        return self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=True
        )

    def neighbor_allreduce_nonblocking(
        self,
        x,
        self_weight=None,
        src_weights=None,
        dst_weights=None,
        enable_topo_check=True,
        name=None,
    ):
        return self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=False
        )

    def _parse(self, x, self_weight, src_weights, dst_weights, check):
        """Return (value, plan, error) from this rank's arguments alone.

        With the check on, a bad argument is returned as ``error`` so that every rank
        can raise it together; with it off it is raised here.
        """
        try:
            value = self._value(x, "neighbor_allreduce", averaging=True)
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
            return None, None, LocalError(exc)
        return value, plan, None

    def _neighbor_allreduce(self, x, self_weight, src_weights, dst_weights, check, name, blocking):
        """Blocking: return the result. Nonblocking: return a handle (static calls queue)."""
        _arrays.check_name(name)
        if check is not True and check is not False:
            raise TypeError("enable_topo_check must be a bool")
        value, plan, error = self._parse(x, self_weight, src_weights, dst_weights, check)
        exchange = dst_weights is not None and not is_matrix(src_weights)
        if (
            not blocking
            and self.nccl_group is None
            and dst_weights is None
            and not is_matrix(src_weights)
        ):
            # Static nonblocking calls are queued; ranks agree once per fused batch.
            wrap = (
                None
                if value is None or (value.kind == "numpy" and value.half is None)
                else value.wrap
            )
            arr = None if value is None else value.arr
            return self._fusion.add(arr, plan, wrap, error, check, name)
        self._flush()
        weights = self._agree_call(value, plan, error, check, exchange)
        handle = self._exchange_data(
            value, plan, weights, scale=not check and plan.exchange, name=name, blocking=blocking
        )
        return handle.wait() if blocking else handle

    def _agree_call(self, value, plan, error, check, exchange) -> np.ndarray:
        """Return the combine weights once every rank agreed, else raise on all.

        One reduction settles shapes, dtypes, devices, the kind of call and local argument
        errors; a dynamic call with weight dicts then exchanges who sends to whom (one
        all-to-all) and agrees once more on the outcome.
        """
        if not check:
            return plan.weights
        if error is None:
            fp = self._fingerprint(value, plan, exchange)
            describe = f"{value.describe()} in neighbor_allreduce"
        else:
            fp, describe = 0, "an invalid argument"
        agree(self._transport, fp, error, describe)
        if not exchange:
            return plan.weights
        weights, mismatch = exchange_send_tables(self._transport, plan)
        agree(self._transport, 0, mismatch, "")
        return weights

    def _fingerprint(self, value: Value, plan: RankPlan, exchange: bool) -> int:
        """Return the fingerprint of a call's dtype, shape, device and plan (cached)."""
        key = (value.dtype, value.shape, value.cuda, plan.fingerprint, plan.static, exchange)
        fp = self._fingerprints.get(key)
        if fp is None:
            if len(self._fingerprints) >= _FP_CACHE_SIZE:
                self._fingerprints.clear()
            fp = self._fingerprints[key] = fingerprint(
                "neighbor_allreduce",
                value.dtype.str,
                value.shape,
                plan.fingerprint,
                plan.static,
                exchange,
                value.cuda,
            )
        return fp

    def _exchange_data(
        self,
        value: Value,
        plan: RankPlan,
        weights: np.ndarray,
        scale: bool,
        name: str | None,
        blocking: bool,
    ):
        """Start the transfers of one call; return a handle whose wait() combines."""
        srcs = self._static.srcs if plan.static else plan.srcs
        dsts = self._static_dsts if plan.static else plan.dsts
        group = self.nccl_group if value.cuda else self.group
        recv, recv_arr = value.empty((len(srcs), *value.shape))
        ops = []
        if value.nbytes:
            ops = [p2p(dist.irecv, recv[k], j, group) for k, j in enumerate(srcs)]
            sends = plan.send_weights if scale else np.ones(len(dsts))
            for j, s in zip(dsts, sends, strict=True):
                ops.append(p2p(dist.isend, self._scaled(value, s), j, group))
        transfer = self._p2p(ops, value.cuda, blocking)
        select = plan.select if plan.static else None

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                transfer.Wait()
            ops.clear()  # the scaled send buffers were held until here
            with _timeline.phase("COMPUTE_AVERAGE"):
                if recv_arr is None:
                    return value.wrap(_combine_cuda(value, plan, recv, weights, select))
                out = _core.combine_rows(
                    np.empty_like(value.arr),
                    plan.self_weight,
                    value.arr,
                    weights,
                    recv_arr,
                    0,
                    select,
                )
            return value.wrap(out)

        return self.handles.start("neighbor_allreduce", finish, transfer.Test, name)

    @staticmethod
    def _scaled(value: Value, s: float) -> Any:
        """Return ``x`` to send, times the sender's weight (numpy's rounding on CPU)."""
        if s == 1.0:
            return value.tensor
        if value.arr is not None:
            return torch.from_numpy(np.multiply(value.arr, value.dtype.type(s)))
        factor = torch.from_numpy(np.array(s, dtype=value.dtype)).to(value.tensor.device)
        return value.tensor * factor

    # -- fusion ---------------------------------------------------------------------------
    def _send_batch(self, entries: list, total: int, layout: int | None, error) -> None:
        """Agree on the queued calls (``layout``: see :class:`fogsim._core.FusionQueue`),
        pack them and post one transfer per neighbor."""
        if layout is not None:
            fp, describe = fused_terms(layout, error, entries)
            # refused: the queue makes every call of the batch raise it, not only this one
            agree(self._transport, fp, error, describe)
        srcs, dsts = self._static.srcs, self._static_dsts
        with _timeline.phase("ALLOCATE"):
            send = np.empty(total, dtype=np.uint8)
            recv = np.empty((len(srcs), total), np.uint8)
        with _timeline.phase("FUSION_COPY_IN"):
            _core.pack(send, [e.arr for e in entries], [e.offset for e in entries])
        rt, st = torch.from_numpy(recv), torch.from_numpy(send)
        ops = [p2p(dist.irecv, rt[k], j, self.group) for k, j in enumerate(srcs)]
        ops += [p2p(dist.isend, st, j, self.group) for j in dsts]
        _core.FusedBatch(
            entries,
            send,
            recv,
            self._p2p(ops if total else [], False, False),
            None,
            None,
            _timeline.running,
        )

    # -- neighbor_allgather ---------------------------------------------------------------
    def neighbor_allgather(self, x, src_ranks=None, dst_ranks=None, name=None):
        return self._neighbor_allgather(x, src_ranks, dst_ranks, name, blocking=True).wait()

    def neighbor_allgather_nonblocking(self, x, src_ranks=None, dst_ranks=None, name=None):
        return self._neighbor_allgather(x, src_ranks, dst_ranks, name, blocking=False)

    def _neighbor_allgather(self, x, src_ranks, dst_ranks, name, blocking):
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
        value = self._checked(
            "neighbor_allgather",
            x,
            averaging=False,
            shape_of=lambda s: s[1:],
            extra=(src_ranks is None,),
            error=error,
        )
        if value.shape == ():
            value = value.reshaped((1,))
        if srcs is None:
            srcs, dsts = self._static.srcs, self._static_dsts
        else:
            check_pairs(self._transport, srcs, dsts)
        rows = neighbor_rows(self._transport, value.shape[0], srcs, dsts)
        out, out_arr = value.empty((int(rows.sum()), *value.shape[1:]))
        starts = np.concatenate([[0], np.cumsum(rows)])
        group = self.nccl_group if value.cuda else self.group
        ops = []
        if out.numel():  # every rank knows whether anything moves: the row counts agree
            ops = [
                p2p(dist.irecv, as_bytes(out[starts[k] : starts[k + 1]]), j, group)
                for k, j in enumerate(srcs)
                if rows[k]
            ]
        if value.nbytes:
            ops += [p2p(dist.isend, as_bytes(value.tensor), j, group) for j in dsts]
        transfer = self._p2p(ops, value.cuda, blocking)

        def finish() -> Any:
            transfer.Wait()
            return value.wrap(out if out_arr is None else out_arr)

        return self.handles.start("neighbor_allgather", finish, transfer.Test, name)
