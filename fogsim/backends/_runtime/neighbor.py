"""The neighbor ops, written once: parse, agree, exchange send tables, transfer, combine.

:class:`NeighborOps` is a part of the MPI and torch backends. A call is parsed into this
rank's :class:`~.plan.RankPlan`, the ranks agree on a fingerprint of it
(:func:`~.agree.agree`; dynamic calls with weight dicts also exchange send tables), the
data move through the runtime's :class:`~.datapath.DataPath` and the received rows are
combined in ascending source order (``_core.combine_rows``, the simulator's bits).

Static calls (the topology's weights, or weight dicts on its edges) move through
:class:`~.static.StaticTransfers`, small nonblocking ones fused; dynamic calls and
``neighbor_allgather`` through :meth:`~.datapath.DataPath.start`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ... import _arrays, _core
from ... import timeline as _timeline
from ..._handles import Handle, HandleTable
from ..._stall import Guard
from ...topology import Topology
from .._parts import Neighbors
from .._weights import is_matrix
from .agree import LocalError, agree, fingerprint, named
from .datapath import DataPath, Value
from .exchange import check_pairs, exchange_send_tables, neighbor_rows
from .plan import RankPlan, rank_plan, rank_weights, static_rank_plan
from .static import StaticTransfers, combine, describe_array
from .transport import Request, Transport

__all__ = ["NeighborOps"]

_FP_CACHE_SIZE = 1024  # (dtype, shape, device, plan) fingerprints remembered per world
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


class NeighborOps(Neighbors):
    """``neighbor_allreduce`` and ``neighbor_allgather`` of one world (see the module doc).

    ``transport`` carries the agreements and small exchanges, ``path`` the data;
    ``handles`` is the world's handle table, ``stall`` its stall guard.
    """

    def __init__(
        self,
        transport: Transport,
        path: DataPath,
        handles: HandleTable,
        stall: Guard,
        fusion_threshold: int,
    ) -> None:
        self.transport, self.path, self.handles, self.stall = transport, path, handles, stall
        self.rank, self.size = transport.rank, transport.size
        self.topology: Topology | None = None
        self.static: RankPlan = RankPlan(1.0, np.empty(0, np.int64), np.empty(0))
        self.static_dsts: np.ndarray = np.empty(0, np.int64)
        self._transfers = StaticTransfers(transport, path, stall)
        self._fusion = _core.FusionQueue(fusion_threshold, self._transfers.send_batch, handles)
        self._fingerprints: dict[tuple[Any, ...], int] = {}
        self._fuses, self._overlaps = path.fuses, path.overlaps  # read on every call
        if path.overlaps:
            transport.repair = path.repair

    def on_topology(self, topology: Topology, is_weighted: bool) -> None:
        """Agree on ``topology`` with every rank (else raise on all), complete what is in
        flight, then use it for static calls."""
        indptr, indices, data = topology.offdiag_csr()
        fp = fingerprint(
            "topology", is_weighted, indptr.tobytes(), indices.tobytes(), data.tobytes()
        )
        agree(self.transport, fp, None, "a different topology")
        self.drain()
        self.topology = topology
        self.static = self._fusion.static_plan = static_rank_plan(topology, is_weighted, self.rank)
        self.static_dsts = np.asarray(topology.out_neighbors(self.rank), dtype=np.int64)
        self.path.on_topology(topology, self.static.srcs, self.static_dsts)

    def flush(self) -> None:
        """Send the queued nonblocking calls now (collective: all ranks flush alike)."""
        self._fusion.flush()

    def drain(self) -> None:
        """Send the queue and complete every handle in flight."""
        self._fusion.flush()
        self.handles.drain()

    def close(self) -> None:
        self.transport.repair = None
        self.path.close()

    # -- neighbor_allreduce ---------------------------------------------------------------
    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        """Return ``x_i <- w_ii x_i + sum_j w_ij x_j`` over this rank's in-neighbors."""
        if _plain(x, self_weight, src_weights, dst_weights, name) and (
            enable_topo_check is True or enable_topo_check is False
        ):  # the common case: the static topology's weights on a numpy array
            if len(self._fusion):
                self._fusion.flush()
            plan = self.static
            if enable_topo_check:
                fp = self._fingerprint(x.dtype, x.shape, (), plan, False, name)
                if self._overlaps:
                    return self._transfers.checked_exchange(x, plan, fp, name)
                agree(self.transport, fp, None, partial(describe_array, x, name))
            return self._transfers.exchange(x, plan, plan.weights)
        return self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=True
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
        """Start :meth:`neighbor_allreduce`; return its handle."""
        if (
            self_weight is None
            and src_weights is None
            and dst_weights is None
            and name is None
            and enable_topo_check is True
            and self._fuses
        ):
            # the common case, straight to the queue: ranks agree once per fused batch
            handle = self._fusion.add_static(x)
            if handle is not None:
                return handle
        started: Handle = self._neighbor_allreduce(
            x, self_weight, src_weights, dst_weights, enable_topo_check, name, blocking=False
        )
        return started

    def _parse(
        self, x: Any, self_weight: Any, src_weights: Any, dst_weights: Any, check: bool
    ) -> tuple[Value | None, RankPlan | None, LocalError | None]:
        """Return (value, plan, error) from this rank's arguments alone.

        With the check on, a bad argument is returned as ``error`` so that every rank
        can raise it together; with it off it is raised here.
        """
        try:
            value = self.path.value(x, "neighbor_allreduce", True)
            if self_weight is None and src_weights is None and dst_weights is None:
                plan = self.static
            else:
                assert self.topology is not None
                plan = rank_plan(
                    self.size,
                    self.rank,
                    self.topology,
                    self.static,
                    self_weight,
                    src_weights,
                    dst_weights,
                )
        except (TypeError, ValueError) as exc:
            if not check:
                raise
            return None, None, LocalError(exc)
        return value, plan, None

    def _neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_weights: Any,
        dst_weights: Any,
        check: Any,
        name: Any,
        blocking: bool,
    ) -> Any:
        """Blocking: return the result. Nonblocking: return a handle (static calls queue)."""
        _arrays.check_name(name)
        if check is not True and check is not False:
            raise TypeError("enable_topo_check must be a bool")
        value, plan, error = self._parse(x, self_weight, src_weights, dst_weights, check)
        if not blocking and self._fuses and dst_weights is None and not is_matrix(src_weights):
            # Static nonblocking calls are queued; ranks agree once per fused batch.
            if value is None:
                return self._fusion.add(None, plan, None, error, check, name)
            return self._fusion.add(value.arr, plan, value.fusion_wrap, error, check, name)
        if len(self._fusion):
            self._fusion.flush()
        exchange = dst_weights is not None and not is_matrix(src_weights)
        weights = self._agree_call(value, plan, error, check, exchange, name)
        assert value is not None and plan is not None  # else the agreement raised
        if plan.static and blocking and value.arr is not None:
            return value.wrap(self._transfers.exchange(value.arr, plan, weights))
        handle = self._start(value, plan, weights, not check and plan.exchange, name, blocking)
        return handle.wait() if blocking else handle

    def _agree_call(
        self,
        value: Value | None,
        plan: RankPlan | None,
        error: LocalError | None,
        check: bool,
        exchange: bool,
        name: str | None,
    ) -> np.ndarray:
        """Return the combine weights once every rank agreed, else raise on all.

        One reduction settles shapes, dtypes, devices, the kind of call and local argument
        errors; a dynamic call with weight dicts then exchanges who sends to whom (one
        all-to-all) and agrees once more on the outcome.
        """
        if not check:
            assert plan is not None  # a bad argument raised in _parse
            return plan.weights
        if error is None:
            assert value is not None and plan is not None
            fp = self._fingerprint(value.dtype, value.shape, value.key, plan, exchange, name)
            describe: Any = f"{value.describe(value.shape)}{named(name)} in neighbor_allreduce"
        else:
            fp, describe = 0, "an invalid argument"
        agree(self.transport, fp, error, describe)
        assert plan is not None
        if not exchange:
            return plan.weights
        weights, mismatch = exchange_send_tables(self.transport, plan)
        agree(self.transport, 0, mismatch, "")
        assert weights is not None
        return weights

    def _fingerprint(
        self,
        dtype: np.dtype,
        shape: tuple[int, ...],
        key: tuple[Any, ...],
        plan: RankPlan,
        exchange: bool,
        name: str | None,
    ) -> int:
        """Return the fingerprint of a call's dtype, shape, device, plan and name (cached)."""
        cache_key = (dtype, shape, key, plan.fingerprint, plan.static, exchange, name)
        fp = self._fingerprints.get(cache_key)
        if fp is None:
            if len(self._fingerprints) >= _FP_CACHE_SIZE:
                self._fingerprints.clear()
            fp = self._fingerprints[cache_key] = fingerprint(
                "neighbor_allreduce",
                dtype.str,
                shape,
                plan.fingerprint,
                plan.static,
                exchange,
                repr(name),
                *key,
            )
        return fp

    def _start(
        self,
        value: Value,
        plan: RankPlan,
        weights: np.ndarray,
        scale: bool,
        name: str | None,
        blocking: bool,
    ) -> Handle:
        """Start the transfers of one call; return a handle whose wait() combines."""
        srcs = self.static.srcs if plan.static else plan.srcs
        dsts = self.static_dsts if plan.static else plan.dsts
        recv, recv_arr = value.empty((len(srcs), *value.shape))
        # recv[k, ...]: a view even for 0-d values (recv[k] would be a read-only scalar)
        recvs = [(recv[k, ...], int(j)) for k, j in enumerate(srcs)]
        if scale:
            assert plan.send_weights is not None
            weighted = zip(dsts, plan.send_weights, strict=True)
            sends = [(value.scaled(s), int(j)) for j, s in weighted]
        else:
            sends = [(value.data, int(j)) for j in dsts]
        req = self.path.start(sends, recvs, value.device, blocking)
        self.path.sent += sum(b.nbytes for b, _ in sends)  # no self-sends: ranks refuse them
        select = plan.select if plan.static else None

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                self._wait(req)
            sends.clear()  # the scaled send buffers were held until here
            with _timeline.phase("COMPUTE_AVERAGE"):
                if recv_arr is None:
                    out = self.path.combine_device(value, plan, recv, weights, select)
                else:
                    assert value.arr is not None
                    out = combine(value.arr, plan, recv_arr, weights, select)
            return value.wrap(out)

        return self.handles.start("neighbor_allreduce", finish, req.test, name)

    # -- neighbor_allgather ---------------------------------------------------------------
    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        """Return the in-neighbors' values concatenated along the first axis."""
        return self.neighbor_allgather_nonblocking(x, src_ranks, dst_ranks, name, True).wait()

    def neighbor_allgather_nonblocking(
        self,
        x: Any,
        src_ranks: Any = None,
        dst_ranks: Any = None,
        name: str | None = None,
        blocking: bool = False,
    ) -> Handle:
        """Start :meth:`neighbor_allgather`; return its handle."""
        _arrays.check_name(name)
        self.flush()
        error, srcs, dsts = None, None, None
        try:
            if (src_ranks is None) != (dst_ranks is None):
                raise ValueError(
                    "neighbor_allgather needs both src_ranks and dst_ranks, or neither"
                )
            if src_ranks is not None:
                srcs, _ = rank_weights(src_ranks, self.size, self.rank, "src_ranks")
                dsts, _ = rank_weights(dst_ranks, self.size, self.rank, "dst_ranks")
        except (TypeError, ValueError) as exc:
            error = LocalError(exc)
        value = self._checked(src_ranks is None, x, error, name)
        if value.shape == ():
            value = value.reshaped((1,))
        if srcs is None or dsts is None:
            srcs, dsts = self.static.srcs, self.static_dsts
        else:
            check_pairs(self.transport, srcs, dsts)
        rows = neighbor_rows(self.transport, value.shape[0], srcs, dsts)
        out, out_arr = value.empty((int(rows.sum()), *value.shape[1:]))
        starts = np.concatenate([[0], np.cumsum(rows)])
        recvs = [(out[starts[k] : starts[k + 1]], int(j)) for k, j in enumerate(srcs)]
        sends = [(value.data, int(j)) for j in dsts]
        req = self.path.start(sends, recvs, value.device, blocking)
        self.path.sent += value.data.nbytes * len(dsts)

        def finish() -> Any:
            with _timeline.phase("COMMUNICATE"):
                self._wait(req)
            return value.wrap(out if out_arr is None else out_arr)

        return self.handles.start("neighbor_allgather", finish, req.test, name)

    def _wait(self, req: Request) -> None:
        """Wait for a call's transfer under the stall guard, where the path waits so
        (``DataPath.batch_wait``; a call made with ``enable_topo_check=False`` meets no
        agreement first), else in the request's own wait."""
        wait = self.path.batch_wait
        if wait is None:
            req.wait()
        else:
            wait(req.test, req.wait)

    def _checked(self, static: bool, x: Any, error: LocalError | None, name: str | None) -> Value:
        """Convert ``x`` and agree with every rank on dtype, trailing shape, device and name.

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        """
        op = "neighbor_allgather"
        value, fp, describe = None, 0, "an invalid argument"
        try:
            value = self.path.value(x, op, False)
            if error is None:
                trailing = value.shape[1:]
                fp = fingerprint(op, value.dtype.str, trailing, static, repr(name), *value.key)
                describe = value.describe(trailing) + named(name)
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self.transport, fp, error, f"{describe} in {op}")
        assert value is not None  # else the agreement raised
        return value
