"""Exact stochasticity: weights whose rows (or columns) sum to exactly 1.0 in floating point.

Every weight rule rounds the weights of a row to multiples of ``2**-53`` and gives the row's
pivot (the self weight, or the largest entry where a rule says so) one minus the others,
computed in integers. A sum of nonnegative multiples of ``2**-53`` that never exceeds 1 is
exact at every partial sum, so such a row adds up to exactly 1.0 in every order: with
``math.fsum``, ``numpy.sum``, or the kernels' own combine order. A mean-preserving rule then
preserves the mean of ``x <- W x`` up to the rounding of the products, with no drift from the
weights themselves. Rounding moves a weight by at most ``2**-54``; weights that already are
such multiples (1/2, 1/4, anything >= 1/2) keep their value.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import breadth_first_order, connected_components

__all__ = ["UNIT", "exact_rows", "exact_rows_and_columns", "largest_pivots", "uniform_split"]

#: The grid of exact weights: every weight is a multiple of this.
UNIT = 2.0**-53
_ONE = 1 << 53  # 1.0 in units


def _to_units(values: np.ndarray) -> np.ndarray:
    # Scaling by a power of two and rint are exact; a nonzero weight keeps at least one unit
    # so that no edge of the pattern disappears.
    k = np.rint(values * float(_ONE)).astype(np.int64)
    return np.where((values > 0) & (k == 0), 1, k)


def _sums(index: np.ndarray, k: np.ndarray, n: int) -> np.ndarray:
    # In int64: a column may exceed 2**53 units by a few, where float64 would round.
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, index, k)
    return out


def _from_units(k: np.ndarray) -> np.ndarray:
    return k.astype(np.float64) * UNIT  # |k| <= 2**53: both steps are exact


def uniform_split(degrees: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(w, w_self)``: ``w ~ 1 / (d + 1)`` per neighbor, ``w_self = 1 - d w`` exactly.

    Works elementwise on an array of in-degrees ``d`` (or one int); ``w`` is ``1 / (d + 1)``
    rounded to a multiple of ``2**-53``, so a row of ``d`` such weights and ``w_self`` sums to
    exactly 1.0 in every order.
    """
    d = np.asarray(degrees, dtype=np.int64)
    k = np.rint(float(_ONE) / (d + 1.0)).astype(np.int64)
    return _from_units(k), _from_units(_ONE - d * k)


def largest_pivots(n: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Return a mask with one entry per nonempty row: its largest, the diagonal on ties."""
    order = np.lexsort((cols, rows != cols, -data, rows))
    sorted_rows = rows[order]
    first = np.ones(order.shape[0], dtype=bool)
    first[1:] = sorted_rows[1:] != sorted_rows[:-1]
    mask = np.zeros(rows.shape[0], dtype=bool)
    mask[order[first]] = True
    return mask


def exact_rows(n: int, rows: np.ndarray, data: np.ndarray, pivot: np.ndarray) -> np.ndarray:
    """Return ``data`` with every row of weights in ``[0, 1]`` summing to exactly 1.0.

    ``rows[p]`` is the row of entry ``p``; ``pivot`` marks one entry per row, which becomes
    one minus the others after they are rounded to multiples of ``2**-53``. Rows with a weight
    outside ``[0, 1]``, without a pivot, or whose others exceed 1 are returned unchanged.
    """
    data = np.asarray(data, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.int64)
    k = _to_units(np.clip(data, 0.0, 1.0))
    others = np.where(pivot, 0, k)
    sums = _sums(rows, others, n)
    outside = np.bincount(rows, weights=(data < 0) | (data > 1), minlength=n) > 0
    has_pivot = np.zeros(n, dtype=bool)
    has_pivot[rows[pivot]] = True
    eligible = has_pivot & ~outside & (sums < _ONE)
    out = _from_units(np.where(pivot, _ONE - sums[rows], k))
    return np.where(eligible[rows], out, data)


def exact_rows_and_columns(
    n: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray, argname: str = "topology"
) -> np.ndarray:
    """Return nearly doubly stochastic ``data`` with rows and columns summing to exactly 1.0.

    Every agent needs a diagonal entry and no edge may join two weakly connected parts (the
    input of a Sinkhorn scaling). The off-diagonal weights are rounded to multiples of
    ``2**-53``, the diagonal makes each row exact, and each column's remaining excess (a few
    units) is moved along a spanning tree of the pattern: adding ``a`` to ``w_ij`` and taking
    it from ``w_ii`` keeps row i and moves ``a`` from column i to column j.
    """
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    diag = rows == cols
    k = _to_units(np.asarray(data, dtype=np.float64))
    k[diag] = 0
    k[diag] = _ONE - _sums(rows, k, n)[rows[diag]]
    where = {(int(i), int(j)): p for p, (i, j) in enumerate(zip(rows, cols, strict=True))}
    diag_at = np.empty(n, dtype=np.int64)
    diag_at[rows[diag]] = np.flatnonzero(diag)
    excess = _sums(cols, k, n) - _ONE
    pattern = csr_array((np.ones(rows.shape[0]), (rows, cols)), shape=(n, n))
    count, label = connected_components(pattern, directed=False)
    for part in range(count):
        root = int(np.flatnonzero(label == part)[0])
        order, parent = breadth_first_order(pattern, root, directed=False)
        for v in order[:0:-1].tolist():  # leaves first; the subtree's excess leaves through v
            p, a = int(parent[v]), int(excess[v])
            if a == 0:
                continue
            if (v, p) in where:  # w_vp += a, w_vv -= a: column v gives a to column p
                k[where[v, p]] += a
                k[diag_at[v]] -= a
            else:  # w_pv -= a, w_pp += a: the same move through the entry of row p
                k[where[p, v]] -= a
                k[diag_at[p]] += a
            excess[p] += a
            excess[v] = 0
    if (k <= 0).any():
        raise ValueError(
            f"the doubly stochastic weights of {argname} are too close to zero to be made "
            "exact; lower tol"
        )
    return _from_units(k)
