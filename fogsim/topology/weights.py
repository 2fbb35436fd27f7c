"""Weight rules: turn a communication pattern into a weight matrix ``W``.

Every rule accepts anything :func:`~fogsim.topology.as_topology` accepts, uses only the
structurally nonzero off-diagonal entries (the pattern) unless it says otherwise, and returns a
:class:`~fogsim.topology.Topology`. Circulant inputs give circulant (lazy) outputs.

Every rule is exact: the sums it promises to be 1 (rows, columns, or both) are exactly 1.0 in
floating point, in any summation order. The weights are rounded to multiples of ``2**-53``
(a change of at most ``2**-54``) and one weight per row (the self weight, or the largest where
a rule says so) is one minus the others, so a mean-preserving rule keeps the mean of
``x <- W x`` with no drift from its weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ._circulant import row_weights
from ._exact import exact_rows, exact_rows_and_columns, largest_pivots, uniform_split
from ._topology import Topology, _from_coo, as_topology
from ._util import check_positive_int

if TYPE_CHECKING:
    from ._topology import TopologyData

__all__ = [
    "column_normalize",
    "doubly_stochastic",
    "max_degree_weights",
    "metropolis_hastings_weights",
    "row_normalize",
    "uniform_weights",
]


def uniform_weights(topology: TopologyData) -> Topology:
    """Return the pattern with weight ``1 / (d_i + 1)`` on self and each in-neighbor.

    ``w_ij = 1 / (1 + d_i)`` for ``j`` in ``N_in(i) + {i}``; row-stochastic, every row
    exactly (``w_ii = 1 - sum_j w_ij``); doubly stochastic, exactly, on regular symmetric
    patterns.
    """
    return as_topology(topology).uniform()


def metropolis_hastings_weights(topology: TopologyData) -> Topology:
    """Return Metropolis-Hastings weights on the symmetrized pattern (doubly stochastic).

    ``w_ij = 1 / (1 + max(d_i, d_j))`` for neighbors, ``w_ii = 1 - sum_j w_ij``. The matrix
    is symmetric and its rows and columns sum to exactly 1.0.
    """
    topo = as_topology(topology)
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        offsets = np.union1d(form.offsets, n - form.offsets)
        w, w_self = uniform_split(offsets.shape[0])
        return Topology.circulant(n, offsets, float(w), float(w_self))
    rows, cols = _symmetric_pattern(topo)
    degrees = np.bincount(rows, minlength=n)
    data = 1.0 / (1.0 + np.maximum(degrees[rows], degrees[cols]))
    return _with_diagonal(n, rows, cols, data)


def max_degree_weights(topology: TopologyData) -> Topology:
    """Return max-degree weights on the pattern (doubly stochastic if the pattern is symmetric).

    ``w_ij = 1 / (1 + d_max)`` for in-neighbors, ``w_ii = 1 - d_i / (1 + d_max)``; rows (and,
    for a symmetric pattern, columns) sum to exactly 1.0.
    """
    topo = as_topology(topology)
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        w, w_self = uniform_split(form.num_offsets)
        return Topology.circulant(n, form.offsets, float(w), float(w_self))
    indptr, indices, _ = topo.offdiag_csr()
    degrees = np.diff(indptr)
    w = 1.0 / (1.0 + degrees.max())
    rows = np.repeat(np.arange(n), degrees)
    return _with_diagonal(n, rows, indices, np.full(rows.shape[0], w))


def row_normalize(topology: TopologyData) -> Topology:
    """Return ``W`` with every row scaled to sum to 1 (pull weights).

    ``w_ij <- w_ij / sum_k w_ik``. A row of nonnegative weights then sums to exactly 1.0: its
    largest weight (the self weight on ties) is one minus the others.
    """
    topo = as_topology(topology)
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        weights = row_weights(form, n)
        sums = form.self_weight + weights.sum(axis=0)
        _check_sums(sums, "row")
        return _exact_circulant(n, form.offsets, weights / sums, form.self_weight / sums)
    csr = topo.to_sparse()
    sums = np.asarray(csr.sum(axis=1)).ravel()
    _check_sums(sums, "row")
    return _exact_csr(sp.csr_array(sp.diags_array(1.0 / sums) @ csr))


def column_normalize(topology: TopologyData) -> Topology:
    """Return ``W`` with every column scaled to sum to 1 (push weights).

    ``w_ij <- w_ij / sum_k w_kj``. A column of nonnegative weights then sums to exactly 1.0:
    its largest weight (the self weight on ties) is one minus the others.
    """
    topo = as_topology(topology)
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        weights = row_weights(form, n)
        self_weight = np.broadcast_to(form.self_weight, (n,))
        agents = np.arange(n)
        # Column j collects w_k[j - o_k] from row j - o_k.
        sent = (agents[None, :] - form.offsets[:, None]) % n
        sums = self_weight + np.take_along_axis(weights, sent, axis=1).sum(axis=0)
        _check_sums(sums, "column")
        scaled = weights / sums[(agents[None, :] + form.offsets[:, None]) % n]
        # The columns of W are the rows of W^T, a circulant too.
        pushed = Topology.circulant(n, form.offsets, scaled, self_weight / sums).transpose()
        pushed_form = pushed.circulant_form()
        if pushed_form is None:  # some per-agent weights are zero: a matrix-backed topology
            return _exact_csr(sp.csr_array(pushed.to_sparse())).transpose()
        exact = _exact_circulant(
            n, pushed_form.offsets, row_weights(pushed_form, n), pushed_form.self_weight
        )
        return exact.transpose()
    csr = topo.to_sparse()
    sums = np.asarray(csr.sum(axis=0)).ravel()
    _check_sums(sums, "column")
    return _exact_csr(sp.csr_array((csr @ sp.diags_array(1.0 / sums)).T)).transpose()


def doubly_stochastic(
    topology: TopologyData, tol: float = 1e-12, max_iter: int = 10000
) -> Topology:
    """Return the doubly stochastic matrix with the pattern plus self loops (Sinkhorn scaling).

    ``W = diag(r) P diag(c)`` with ``P`` the 0/1 pattern plus identity, ``W 1 = W^T 1 = 1``.
    The converged scaling is then made exact: rows and columns sum to exactly 1.0.
    """
    topo = as_topology(topology)
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    max_iter = check_positive_int(max_iter, "max_iter")
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        w, w_self = uniform_split(form.num_offsets)
        return Topology.circulant(n, form.offsets, float(w), float(w_self))
    indptr, indices, _ = topo.offdiag_csr()
    rows = np.repeat(np.arange(n), np.diff(indptr))
    cols = indices.astype(np.int64)
    # With self loops, a doubly stochastic matrix of this pattern exists iff no edge joins two
    # strongly connected components; otherwise Sinkhorn only creeps towards zeroing it.
    _, label = connected_components(topo.to_sparse(), directed=True, connection="strong")
    across = np.flatnonzero(label[rows] != label[cols])
    if across.size:
        k = across[0]
        raise ValueError(
            f"topology has no doubly stochastic weights with its pattern: edge {cols[k]} -> "
            f"{rows[k]} joins two strongly connected components"
        )
    rows = np.concatenate([rows, np.arange(n)])
    cols = np.concatenate([cols, np.arange(n)])
    pattern = sp.csr_array((np.ones(rows.shape[0]), (rows, cols)), shape=(n, n))
    pattern_t = sp.csr_array(pattern.T)
    r, c = np.ones(n), np.ones(n)
    for _ in range(max_iter):
        r = 1.0 / (pattern @ c)
        c = 1.0 / (pattern_t @ r)
        error = np.abs(r * (pattern @ c) - 1.0).max()  # columns sum to 1 after the c update
        if error <= tol:
            break
    else:
        raise ValueError(
            f"Sinkhorn scaling did not converge in {max_iter} iterations "
            f"(row sums off by {error:.3g} > tol={tol})"
        )
    return _from_coo(n, rows, cols, exact_rows_and_columns(n, rows, cols, r[rows] * c[cols]))


def _symmetric_pattern(topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    n = topo.size
    indptr, indices, _ = topo.offdiag_csr()
    adjacency = sp.csr_array((np.ones(indices.shape[0]), indices, indptr), shape=(n, n))
    both = sp.csr_array(adjacency + adjacency.T).tocoo()
    return both.row.astype(np.int64), both.col.astype(np.int64)


def _with_diagonal(n: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> Topology:
    """Return the off-diagonal ``data`` plus self weights ``1 - sum_j w_ij``, rows exact."""
    all_rows = np.concatenate([rows, np.arange(n)])
    pivot = np.concatenate([np.zeros(rows.shape[0], dtype=bool), np.ones(n, dtype=bool)])
    data = np.concatenate([data, np.zeros(n)])
    return _from_coo(
        n, all_rows, np.concatenate([cols, np.arange(n)]), exact_rows(n, all_rows, data, pivot)
    )


def _exact_csr(csr: sp.csr_array) -> Topology:
    """Return the row-normalized ``csr`` with its nonnegative rows summing to exactly 1."""
    n = csr.shape[0]
    rows = np.repeat(np.arange(n), np.diff(csr.indptr))
    cols = csr.indices.astype(np.int64)
    pivot = largest_pivots(n, rows, cols, csr.data)
    return _from_coo(n, rows, cols, exact_rows(n, rows, csr.data, pivot))


def _exact_circulant(
    n: int, offsets: np.ndarray, weights: np.ndarray, self_weight: np.ndarray
) -> Topology:
    """Return the row-normalized circulant with its nonnegative rows summing to exactly 1."""
    k = offsets.shape[0]
    if weights.ndim == 1:
        weights = weights[:, None]
    # Entry (slot, agent): slot 0 is the self weight, slot 1 + m the weight of offset m.
    values = np.vstack([np.broadcast_to(self_weight, (1, n)), np.broadcast_to(weights, (k, n))])
    slots = np.repeat(np.arange(k + 1), n)
    agents = np.tile(np.arange(n), k + 1)
    data = values.ravel()
    pivot = largest_pivots(n, agents, np.where(slots == 0, agents, -1), data)
    exact = exact_rows(n, agents, data, pivot).reshape(k + 1, n)
    return Topology.circulant(n, offsets, exact[1:], exact[0])


def _check_sums(sums: np.ndarray, kind: str) -> None:
    zero = np.flatnonzero(sums == 0)
    if zero.size:
        raise ValueError(f"{kind} {zero[0]} of the topology sums to 0 and cannot be normalized")
