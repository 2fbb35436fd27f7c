"""Turn ``neighbor_allreduce``'s weight arguments into one combine plan for all agents.

A plan is the step's weight matrix in the form the kernels consume: a circulant form
(shifted diagonals: rings, exponential graphs, one-peer schedules; no index arrays) or
CSR of the off-diagonal part plus a self-weight vector. Building a plan is vectorized;
the only per-agent Python work is reading user dicts, done in ``fogsim._core``.

A plan read from a :class:`~fogsim.topology.Topology` keeps it as its ``pattern`` (the
messages it sends), so what else needs the step (the cost model) gets it back as it was,
never rebuilt from the plan; the fault injector's whole matrix (:func:`plan_matrix`) is
the one conversion, made only while faults are injected.
"""

from __future__ import annotations

import dataclasses
import numbers
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import _core, _weightcheck
from ..._arrays import is_tensor
from ...topology import CirculantForm, Topology, as_topology
from .._weights import check_partners, is_matrix

__all__ = [
    "CsrPlan",
    "CircPlan",
    "PlanCache",
    "apply_plan",
    "check_plan",
    "check_same_pattern",
    "plan_matrix",
    "plan_messages",
    "rank_rows",
    "resolve_plan",
    "self_weights",
    "slot_add",
    "static_plan",
    "transpose",
]


@dataclass(frozen=True)
class CsrPlan:
    """out_i = self_weight_i x_i + sum_p data_p x_{indices_p}, p over row i."""

    self_weight: np.ndarray  # (n,) float64
    indptr: np.ndarray  # (n+1,) int64
    indices: np.ndarray  # (nnz,) int32, ascending per row
    data: np.ndarray  # (nnz,) float64
    #: the topology the plan was read from (its off-diagonal entries are the plan's), or
    #: None for one assembled from weight dicts (see :func:`plan_messages`)
    pattern: Topology | None = field(default=None, compare=False, repr=False)
    #: the checked kernel of the plan's arrays, made at its first use (see :func:`apply_plan`)
    kernel: Any = field(default=None, init=False, compare=False, repr=False)
    #: the out-degrees of its pattern, made at their first use (``_sent.plan_degrees``)
    degrees: np.ndarray | None = field(default=None, init=False, compare=False, repr=False)
    #: whether its whole matrix was found row- or column-stochastic (:func:`check_plan`)
    fine: bool = field(default=False, init=False, compare=False, repr=False)
    #: what a step with it counts as sent: its own out-degrees, or (per-agent dicts without
    #: dst_weights) the topology's; set by the simulator at the plan's first step
    sends: np.ndarray | None = field(default=None, init=False, compare=False, repr=False)


@dataclass(frozen=True)
class CircPlan:
    """out_i = self_weight x_i + sum_k w_k x_{(i + offset_k) mod n}."""

    form: CirculantForm
    pattern: Topology = field(compare=False, repr=False)  # the topology of ``form``
    kernel: Any = field(default=None, init=False, compare=False, repr=False)  # see CsrPlan
    degrees: np.ndarray | None = field(default=None, init=False, compare=False, repr=False)
    fine: bool = field(default=False, init=False, compare=False, repr=False)
    sends: np.ndarray | None = field(default=None, init=False, compare=False, repr=False)


Plan = CsrPlan | CircPlan

#: CSR arrays ``(indptr int64, indices int32, data float64)`` in receiver rows.
Csr = tuple[np.ndarray, np.ndarray, np.ndarray]


def _plan_of(topo: Topology, self_weight: np.ndarray | None = None) -> Plan:
    form = topo.circulant_form()
    if form is not None:
        if self_weight is not None:
            form = dataclasses.replace(form, self_weight=self_weight)
        return CircPlan(form, topo)
    sw = topo.self_weights if self_weight is None else self_weight
    return CsrPlan(sw, *topo.offdiag_csr(), pattern=topo)


def static_plan(topo: Topology, is_weighted: bool) -> Plan:
    """Return the plan for the static topology (its weights, or uniform 1/(in-degree+1))."""
    return _plan_of(topo if is_weighted else topo.uniform())


def apply_plan(plan: Plan, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Compute ``out = W x`` for a C-contiguous (n, m) ``x``.

    The plan's arrays are checked once, when its kernel is made at its first use; a call
    then checks only ``x`` and ``out`` (on small states the checks cost more than the sums).
    """
    kernel = plan.kernel
    if kernel is None or kernel.n != x.shape[0]:
        kernel = plan_kernel(plan, x.shape[0])
    return kernel.apply(x, out)  # type: ignore[no-any-return]


def plan_kernel(plan: Plan, n: int) -> Any:
    """Return the plan's checked :class:`fogsim._core.Combiner` for ``n`` agents (made once)."""
    if isinstance(plan, CircPlan):
        f = plan.form
        kernel = _core.Combiner.circulant(f.offsets, f.weights, f.self_weight, n)
    else:
        kernel = _core.Combiner.csr(plan.indptr, plan.indices, plan.data, plan.self_weight, n)
    object.__setattr__(plan, "kernel", kernel)  # frozen: what is cached is derived
    return kernel


def plan_messages(plan: Plan, n: int) -> Topology:
    """Return a topology whose off-diagonal entries are the plan's messages (the cost model's).

    A plan read from a topology returns it; one assembled from weight dicts is converted
    once, its zero weights sending no message, as in every other topology.
    """
    if plan.pattern is not None:
        return plan.pattern
    assert isinstance(plan, CsrPlan)
    return as_topology(sp.csr_array((plan.data, plan.indices, plan.indptr), shape=(n, n)))


def plan_matrix(plan: Plan, n: int) -> sp.csr_array:
    """Return the step's weight matrix ``W`` (self weights on the diagonal) as CSR."""
    if isinstance(plan, CircPlan):
        f = plan.form
        rows = np.repeat(np.arange(n), len(f.offsets))
        cols = (rows + np.tile(np.asarray(f.offsets), n)) % n
        w = np.asarray(f.weights, dtype=np.float64)
        data = w.T.ravel() if w.ndim == 2 else np.tile(w, n)
        self_weight = np.broadcast_to(np.asarray(f.self_weight, dtype=np.float64), (n,))
    else:
        rows = np.repeat(np.arange(n), np.diff(plan.indptr))
        cols, data = plan.indices, plan.data
        self_weight = np.asarray(plan.self_weight, dtype=np.float64)
    off = sp.csr_array((data, (rows, cols)), shape=(n, n))
    return sp.csr_array(off + sp.diags_array(self_weight))


def check_plan(plan: Plan, n: int, key: Any) -> None:
    """Warn (or raise) when the step's whole matrix is neither row- nor column-stochastic.

    ``key`` (a Topology or None): a step already checked is not checked again; nor is a
    plan found fine before (a plan is immutable: ``plan.fine``).
    """
    if plan.fine or (key is not None and _weightcheck.checked(key)):
        return
    rows: np.ndarray
    cols: Callable[[], np.ndarray] | np.ndarray
    if isinstance(plan, CircPlan):
        form = plan.form
        if form.weights.ndim == 1 and form.self_weight.size == 1:
            # Weights shared by all agents: every row and every column holds the same
            # numbers, so row 0 is summed, in the kernel's order (itself, then ascending
            # offsets), in O(offsets) rather than O(agents): a one-peer schedule meets a
            # new matrix at every step of its first pass.
            total = float(form.self_weight.reshape(-1)[0])
            for w in form.weights.tolist():
                total += w
            rows = cols = np.array([total])
        else:
            rows = apply_plan(plan, np.ones((n, 1)), np.empty((n, 1)))[:, 0]  # W 1
            cols = lambda: _weightcheck.circulant_sums(form, n)[1]  # noqa: E731
    else:
        csr = plan
        rows = apply_plan(plan, np.ones((n, 1)), np.empty((n, 1)))[:, 0]  # W 1, by the kernel
        cols = lambda: csr.self_weight + np.bincount(csr.indices, csr.data, minlength=n)  # noqa: E731
    if _weightcheck.check_sums("neighbor_allreduce", rows, cols, key=key):
        object.__setattr__(plan, "fine", True)  # frozen: what is cached is derived


# -- argument parsing ---------------------------------------------------------------------
def self_weights(value: Any, n: int) -> np.ndarray | None:
    """Return ``self_weight`` as a finite float64 vector of n (None stays None)."""
    if value is None:
        return None
    if is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, bool) or (not isinstance(value, numbers.Real | np.ndarray | list | tuple)):
        raise TypeError(
            f"self_weight must be a number or a sequence of {n} numbers, got {type(value).__name__}"
        )
    try:
        # a copy: a plan is kept for later calls, so it must not hold the caller's array
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"self_weight must hold real numbers, got {value!r:.60}") from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    elif arr.shape != (n,):
        raise ValueError(f"self_weight has shape {arr.shape}; expected one weight per agent ({n},)")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"self_weight[{bad[0]}] is {arr[bad[0]]}; weights must be finite")
    return arr


def rank_rows(obj: Any, n: int, argname: str) -> Csr:
    """Return CSR arrays from a sequence of n per-agent dicts (or lists of ranks, weight 1)."""
    if isinstance(obj, dict) or not isinstance(obj, list | tuple):
        raise TypeError(
            f"{argname} must be a sequence of {n} per-agent dicts {{rank: weight}} (or rank "
            f"lists) or an {n}x{n} weight matrix, got {type(obj).__name__}"
        )
    indptr, indices, data = _core.assemble_csr(n, obj, argname=argname, allow_self=False)
    return indptr, indices, data


def transpose(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n: int) -> Csr:
    """Return the CSR arrays of the transposed matrix (sender rows become receiver rows)."""
    t = sp.csr_array((data, indices, indptr), shape=(n, n)).T.tocsr()
    t.sort_indices()
    return t.indptr.astype(np.int64), t.indices.astype(np.int32), t.data


def _keys(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    keys: np.ndarray = rows * n + indices
    return keys


def check_same_pattern(
    recv: Csr, send: Csr, n: int, names: tuple[str, str] = ("src_weights", "dst_weights")
) -> None:
    """Raise ValueError naming the agents when the send and receive edges differ.

    ``recv`` and ``send`` are CSR arrays in receiver rows (row i: who i hears from).
    """
    src, dst = names
    if np.array_equal(recv[0], send[0]) and np.array_equal(recv[1], send[1]):
        return
    rkeys, skeys = _keys(recv[0], recv[1], n), _keys(send[0], send[1], n)
    only_send = np.setdiff1d(skeys, rkeys, assume_unique=True)
    if only_send.size:
        i, j = divmod(int(only_send[0]), n)
        raise ValueError(
            f"topology check failed: agent {j} sends to agent {i} ({dst}[{j}]) "
            f"but agent {i} does not receive from {j} ({src}[{i}])"
        )
    i, j = divmod(int(np.setdiff1d(rkeys, skeys, assume_unique=True)[0]), n)
    raise ValueError(
        f"topology check failed: agent {i} receives from agent {j} ({src}[{i}]) "
        f"but agent {j} does not send to {i} ({dst}[{j}])"
    )


def _send_scaling(dst: Any, n: int) -> Csr:
    """Return dst weights as receiver rows: row i holds s_ij for each sender j."""
    if is_matrix(dst):
        m = as_topology(dst, size=n, argname="dst_weights")
        return m.offdiag_csr()
    return transpose(*rank_rows(dst, n, "dst_weights"), n)


def resolve_plan(
    n: int,
    topo: Topology,
    is_weighted: bool,
    cached_static: Plan,
    self_weight: Any,
    src_weights: Any,
    dst_weights: Any,
) -> Plan:
    """Return the plan for one call (see :func:`fogsim.neighbor_allreduce` for the rules)."""
    sw = self_weights(self_weight, n)
    if check_partners(sw, src_weights, dst_weights):
        return cached_static

    if is_matrix(src_weights):
        step = as_topology(src_weights, size=n, argname="src_weights")
        if dst_weights is None:
            return _plan_of(step, sw)
        recv = step.offdiag_csr()
        if sw is None:
            sw = step.self_weights
    else:
        if sw is None:
            raise ValueError("src_weights was given without self_weight; give both")
        recv = rank_rows(src_weights, n, "src_weights")
        if dst_weights is None:
            _check_static_subset(recv, topo, n)
            return CsrPlan(sw, *recv)
    if sw is None:
        raise ValueError("dst_weights was given without self_weight; give self_weight too")
    send = _send_scaling(dst_weights, n)
    check_same_pattern(recv, send, n)
    return CsrPlan(sw, recv[0], recv[1], recv[2] * send[2])


def _check_static_subset(recv: Csr, topo: Topology, n: int) -> None:
    """Without dst_weights the senders are the topology's: src keys must be in-neighbors."""
    tptr, tidx, _ = topo.offdiag_csr()
    rkeys, tkeys = _keys(recv[0], recv[1], n), _keys(tptr, tidx, n)
    missing = rkeys[~np.isin(rkeys, tkeys, assume_unique=True)]
    if missing.size:
        i, j = divmod(int(missing[0]), n)
        raise ValueError(
            f"src_weights[{i}] names rank {j}, which is not an in-neighbor of agent {i} in "
            f"the topology (in-neighbors {topo.in_neighbors(i)}); pass dst_weights for a "
            "dynamic topology or set_topology() first"
        )


def slot_add(
    out: np.ndarray, indptr: np.ndarray, eids: np.ndarray, w: np.ndarray, src: np.ndarray
) -> None:
    """``out[r] += w[k] * src[eids[k]]`` for k over CSR row r, one rounded add at a time.

    Rows are combined in parallel by degree slot: slot s adds entry ``indptr[r] + s`` of
    every row with more than s entries, so each row sums in its own entry order.
    """
    if not eids.size:
        return
    col = (slice(None),) + (None,) * (out.ndim - 1)
    deg = np.diff(indptr)
    if (deg == deg[0]).all():
        e2, w2 = eids.reshape(deg.size, -1), w.reshape(deg.size, -1)
        for s in range(e2.shape[1]):
            out += w2[:, s][col] * src[e2[:, s]]
        return
    start = indptr[:-1]
    order = np.argsort(-deg, kind="stable")
    neg_sorted = -deg[order]
    for s in range(int(deg.max())):
        rows = order[: int(np.searchsorted(neg_sorted, -s, side="left"))]
        k = start[rows] + s
        out[rows] += w[k][col] * src[eids[k]]


class PlanCache:
    """The device copies of plans' arrays, built once per (plan, device, dtype).

    Entries are keyed by the plan's identity and checked through a weak reference, so a
    plan that is gone (a per-call one) is never mistaken for a new one at its address.
    """

    def __init__(self, max_items: int = 8) -> None:
        self._items: dict[tuple[int, str, Any], tuple[weakref.ref[Any], Any]] = {}
        self._max_items = max_items

    def get(self, owner: Any, device: Any, dtype: Any, build: Callable[[], Any]) -> Any:
        """Return what ``build()`` made for ``owner`` on ``device`` in ``dtype``."""
        key = (id(owner), str(device), dtype)
        hit = self._items.pop(key, None)
        if hit is None or hit[0]() is not owner:
            hit = (weakref.ref(owner), build())
        self._items[key] = hit  # most recently used last
        if len(self._items) > self._max_items:
            del self._items[next(iter(self._items))]
        return hit[1]

    def clear(self) -> None:
        """Forget every cached array."""
        self._items.clear()
