"""One rank's view of a ``neighbor_allreduce`` call: whom to hear, whom to tell, weights.

The rules are the simulator's (see :func:`fogsim.neighbor_allreduce`), applied to one
agent: ``self_weight`` is a number, ``src_weights`` a dict ``{rank: weight}`` and
``dst_weights`` a dict or a list of ranks, or ``src_weights`` is one ``n x n`` matrix
(or Topology) that every rank passes for the step. Combined weights are ordered by
ascending source rank, the simulator's accumulation order, so both give the same bits.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import _weightcheck
from ..._arrays import is_tensor
from ...topology import Topology, as_topology
from .._weights import check_partners, is_matrix
from .agree import LocalError, fingerprint

__all__ = [
    "RankPlan",
    "check_senders",
    "rank_plan",
    "rank_weights",
    "row_of",
    "scalar_weight",
    "send_table",
    "static_rank_plan",
]


@dataclass
class RankPlan:
    """What this rank does in one call."""

    self_weight: float
    srcs: np.ndarray  # int64, ascending: the ranks combined into the result
    weights: np.ndarray  # float64, aligned with srcs (receiver weight x sender weight)
    static: bool = True  # True: data moves over the static topology's graph communicator
    select: np.ndarray | None = None  # static: rows of the received block to combine
    dsts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    send_weights: np.ndarray | None = None  # dynamic: s_ij per entry of dsts
    exchange: bool = False  # dynamic dicts: ranks must exchange who sends to whom
    fingerprint: int = 0  # what every rank must agree on beyond shape and dtype


def row_of(topo: Topology, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Return agent i's in-neighbors (ascending) and their weights W[i, j]."""
    indptr, indices, data = topo.offdiag_csr()
    lo, hi = indptr[i], indptr[i + 1]
    return indices[lo:hi].astype(np.int64), np.array(data[lo:hi], dtype=np.float64)


def static_rank_plan(topo: Topology, is_weighted: bool, i: int) -> RankPlan:
    """Return the plan for the static topology on agent i."""
    used = topo if is_weighted else topo.uniform()
    srcs, weights = row_of(used, i)
    return RankPlan(float(used.self_weights[i]), srcs, weights)


def scalar_weight(value: Any, argname: str) -> float:
    """Return ``value`` as a finite float, or raise naming ``argname``."""
    if is_tensor(value):
        value = value.item() if value.numel() == 1 else value
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())[()]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argname} must be a number on each rank, got {type(value).__name__}")
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(f"{argname} is {number}; weights must be finite")
    return number


def rank_weights(obj: Any, n: int, i: int, argname: str) -> tuple[np.ndarray, np.ndarray]:
    """Return (ranks ascending, weights) from a dict {rank: weight} or a list of ranks."""
    if isinstance(obj, dict):
        items = list(obj.items())
    elif isinstance(obj, list | tuple | np.ndarray):
        items = [(r, 1.0) for r in obj]
    else:
        raise TypeError(
            f"{argname} must be a dict {{rank: weight}} or a list of ranks on each rank, "
            f"or one {n}x{n} matrix, got {type(obj).__name__}"
        )
    ranks = np.empty(len(items), dtype=np.int64)
    weights = np.empty(len(items), dtype=np.float64)
    for k, (r, w) in enumerate(items):
        if isinstance(r, bool) or not isinstance(r, numbers.Integral):
            raise TypeError(f"{argname}: rank {r!r} is not an integer")
        if not 0 <= int(r) < n:
            raise ValueError(f"{argname}: rank {r} is out of range for {n} agents")
        if r == i:
            raise ValueError(f"{argname} contains agent {i}'s own rank; give it as self_weight")
        weights[k] = scalar_weight(w, f"{argname}[{r}]")
        ranks[k] = r
    order = np.argsort(ranks, kind="stable")
    ranks, weights = ranks[order], weights[order]
    if ranks.size > 1 and np.any(ranks[1:] == ranks[:-1]):
        raise ValueError(f"{argname} lists rank {ranks[1:][ranks[1:] == ranks[:-1]][0]} twice")
    return ranks, weights


def _congestion_order(dsts: np.ndarray, i: int, n: int) -> np.ndarray:
    """Order destinations by distance (j - i) mod n, so no receiver gets everyone first."""
    return dsts[np.argsort((dsts - i) % n, kind="stable")]


def rank_plan(
    n: int,
    i: int,
    topo: Topology,
    static: RankPlan,
    self_weight: Any,
    src_weights: Any,
    dst_weights: Any,
) -> RankPlan:
    """Return agent i's plan for one call; raise ValueError/TypeError on bad arguments."""
    sw = None if self_weight is None else scalar_weight(self_weight, "self_weight")
    if check_partners(sw, src_weights, dst_weights):
        return static

    if is_matrix(src_weights):
        return _matrix_plan(n, i, src_weights, sw, dst_weights)
    if sw is None:
        raise ValueError("src_weights was given without self_weight; give both")
    srcs, weights = rank_weights(src_weights, n, i, "src_weights")
    if dst_weights is None:
        if _weightcheck.enabled():  # this rank's row is all it knows (dynamic: not even that)
            _weightcheck.check_row("neighbor_allreduce", i, sw + float(np.sum(weights)))
        missing = srcs[~np.isin(srcs, static.srcs)]
        if missing.size:
            raise ValueError(
                f"src_weights[{i}] names rank {missing[0]}, which is not an in-neighbor of "
                f"agent {i} in the topology (in-neighbors {static.srcs.tolist()}); pass "
                "dst_weights for a dynamic topology or set_topology() first"
            )
        select = np.searchsorted(static.srcs, srcs)
        return RankPlan(sw, srcs, weights, static=True, select=select)
    if is_matrix(dst_weights):
        d = as_topology(dst_weights, size=n, argname="dst_weights")
        dsts, send_w = row_of(d.transpose(), i)
    else:
        dsts, send_w = rank_weights(dst_weights, n, i, "dst_weights")
    order = np.argsort((dsts - i) % n, kind="stable")
    return RankPlan(
        sw,
        srcs,
        weights,
        static=False,
        dsts=dsts[order],
        send_weights=send_w[order],
        exchange=True,
    )


def _matrix_plan(n: int, i: int, src: Any, sw: float | None, dst: Any) -> RankPlan:
    """Every rank holds the step's whole W: row i says whom to hear, column i whom to tell."""
    step = as_topology(src, size=n, argname="src_weights")
    srcs, weights = row_of(step, i)
    dsts, _ = row_of(step.transpose(), i)
    fp_parts: list[Any] = [_matrix_fingerprint(step)]
    if dst is not None:
        d = as_topology(dst, size=n, argname="dst_weights")
        d_srcs, d_recv = row_of(d, i)
        if not np.array_equal(d_srcs, srcs):
            raise ValueError(
                f"dst_weights and src_weights matrices have different edges into agent {i}"
            )
        weights = weights * d_recv
        fp_parts.append(_matrix_fingerprint(d))
    self_weight = float(step.self_weights[i]) if sw is None else sw
    if _weightcheck.enabled():
        if sw is None and dst is None:  # every rank holds the whole step: all raise alike
            _weightcheck.check_topology("neighbor_allreduce", step)
        else:
            _weightcheck.check_row("neighbor_allreduce", i, self_weight + float(np.sum(weights)))
    return RankPlan(
        self_weight,
        srcs,
        weights,
        static=False,
        dsts=_congestion_order(dsts, i, n),
        fingerprint=fingerprint(*fp_parts),
    )


def _matrix_fingerprint(topo: Topology) -> int:
    form = topo.circulant_form()
    if form is not None:
        return fingerprint(
            "circ",
            form.offsets.tobytes(),
            np.asarray(form.weights).tobytes(),
            np.asarray(form.self_weight).tobytes(),
        )
    indptr, indices, data = topo.offdiag_csr()
    return fingerprint("csr", indptr.tobytes(), indices.tobytes(), data.tobytes())


def send_table(plan: RankPlan, n: int) -> np.ndarray:
    """Return the (n, 2) table this rank sends in the topology check: [sends to j, s_ij]."""
    table = np.zeros((n, 2), dtype=np.float64)
    table[plan.dsts, 0] = 1.0
    table[plan.dsts, 1] = plan.send_weights
    return table


def check_senders(
    plan: RankPlan, got: np.ndarray, i: int
) -> tuple[np.ndarray | None, LocalError | None]:
    """Compare who said they send to agent i (``got``, the exchanged tables) with its plan.

    Returns the combined weights ``r_ij * s_ij`` (the simulator's product, so every backend
    gives the same bits), or the mismatch as a :class:`LocalError`.
    """
    senders = np.flatnonzero(got[:, 0])
    extra = np.setdiff1d(senders, plan.srcs)
    if extra.size:
        j = int(extra[0])
        return None, LocalError(
            ValueError(
                f"topology check failed: agent {j} sends to agent {i} (dst_weights[{j}]) "
                f"but agent {i} does not receive from {j} (src_weights[{i}])"
            )
        )
    missing = np.setdiff1d(plan.srcs, senders)
    if missing.size:
        j = int(missing[0])
        return None, LocalError(
            ValueError(
                f"topology check failed: agent {i} receives from agent {j} (src_weights[{i}]) "
                f"but agent {j} does not send to {i} (dst_weights[{j}])"
            )
        )
    return plan.weights * got[plan.srcs, 1], None
