"""Pure numpy versions of the kernels in ``_kernels.pyx``, bit-identical to them.

Each function performs the same floating-point operations in the same order as its compiled
twin (sums in float64 whatever the data dtype: the self term first, then one rounded product
of a float64 weight and a value added per neighbor in the stated order; a float32 result
rounded once at the end), vectorized over agents: the loops run over degree slots or
offsets, never over agents, except in ``assemble_csr``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from . import _checks

__all__ = [
    "Combiner",
    "assemble_csr",
    "circulant_combine",
    "csr_combine",
    "csr_combine_rows",
    "dicts_unchanged",
    "dicts_watch",
    "weighted_combine",
]

_F64 = np.float64


def _accumulator(out: np.ndarray) -> np.ndarray:
    """Return where the float64 sums for ``out`` are formed: ``out`` itself when float64."""
    return out if out.dtype == _F64 else np.empty(out.shape, _F64)


def _store(out: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Round the sums into ``out`` (once; nothing to do when they were formed there)."""
    if acc is not out:
        np.copyto(out, acc, casting="same_kind")
    return out


def weighted_combine(
    out: np.ndarray, self_weight: float, x: np.ndarray, weights: np.ndarray, ys: np.ndarray
) -> np.ndarray:
    """Combine a vector with received neighbor buffers, weighted.

    ``out <- self_weight * x + weights[0] * ys[0] + weights[1] * ys[1] + ...``, in that order.
    """
    sw = _checks.weighted_combine_args(out, self_weight, x, weights, ys)
    _checks.finite("weights", weights)
    acc = _accumulator(out)
    np.multiply(x, _F64(sw), out=acc, dtype=_F64)
    for k in range(weights.shape[0]):
        acc += np.multiply(weights[k], ys[k], dtype=_F64)
    return _store(out, acc)


def csr_combine(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """Apply a weight matrix given as its diagonal and its off-diagonal part in CSR form.

    ``out[i] <- self_weight[i] * x[i] + sum_{p = indptr[i]}^{indptr[i+1]-1} data[p] *
    x[indices[p]]``, accumulated in ``p`` order.
    """
    _checks.csr_combine_args(indptr, indices, data, self_weight, x, out)
    n = x.shape[0]
    _checks.csr_structure(indptr, indices, n)
    _csr_rows(indptr, indices, data, self_weight, x, out, 0, n)
    return out


def csr_combine_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> np.ndarray:
    """Compute rows ``[start, stop)`` of :func:`csr_combine`, leaving the other rows of out.

    Each of those rows gets ``csr_combine``'s operations in its order (its bits); only the
    entries those rows read are checked, so a caller may do a matrix in several ranges.
    """
    _checks.csr_combine_args(indptr, indices, data, self_weight, x, out)
    n = x.shape[0]
    start, stop = _checks.row_range(start, stop, n)
    _checks.csr_row_structure(indptr, indices, n, start, stop)
    _csr_rows(indptr, indices, data, self_weight, x, out, start, stop)
    return out


def _csr_rows(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
) -> None:
    """Rows ``[start, stop)`` of ``csr_combine``, on checked arguments."""
    out = out[start:stop]
    acc = _accumulator(out)
    np.multiply(x[start:stop], self_weight[start:stop, None], out=acc, dtype=_F64)
    n = stop - start
    first, last = int(indptr[start]), int(indptr[stop])
    if last == first or out.size == 0:
        _store(out, acc)
        return
    indptr = indptr[start : stop + 1] - first
    indices, data = indices[first:last], data[first:last]
    deg = np.diff(indptr)
    if (deg == deg[0]).all():
        # Every row has the same degree: degree slot s is column s of (n, degree) views.
        cols = indices.reshape(n, -1)
        ws = data.reshape(n, -1)
        for s in range(cols.shape[1]):
            acc += np.multiply(ws[:, s, None], np.take(x, cols[:, s], axis=0), dtype=_F64)
        _store(out, acc)
        return
    # Degree slot s adds entry indptr[i] + s of every row i with more than s entries; sorting
    # rows by decreasing degree makes those rows a prefix of `order`.
    begin = indptr[:-1]
    order = np.argsort(-deg, kind="stable")
    neg_sorted = -deg[order]
    for s in range(int(-neg_sorted[0])):
        rows = order[: int(np.searchsorted(neg_sorted, -s, side="left"))]
        p = begin[rows] + s
        acc[rows] += np.multiply(data[p, None], np.take(x, indices[p], axis=0), dtype=_F64)
    _store(out, acc)


def circulant_combine(
    offsets: np.ndarray,
    weights: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """Apply a circulant weight matrix: agent i receives from ``(i + offsets[k]) % n``.

    ``out[i] <- self_weight[i] * x[i] + sum_k weights[k](i) * x[(i + offsets[k]) % n]``,
    accumulated by ascending source index.
    """
    _checks.circulant_combine_args(offsets, weights, self_weight, x, out)
    n = x.shape[0]
    _checks.offsets(offsets, n)
    # Only weights shared by all agents are scanned (see _checks).
    if weights.ndim == 1:
        _checks.finite("weights", weights)
    if self_weight.size == 1:
        _checks.finite("self_weight", self_weight)
    acc = _accumulator(out)
    # (), (1,) and (n,) all broadcast against x as a column.
    np.multiply(x, self_weight.reshape(-1, 1), out=acc, dtype=_F64)
    if out.size == 0:
        return _store(out, acc)
    w = weights
    per_row = w.ndim == 2
    offs = offsets.tolist()
    nk = len(offs)
    # Rows [n - offs[p], n - offs[p-1]) wrap around for exactly the offsets k >= p; those
    # sources come first (smaller index), so the segment adds k = p..K-1, then k = 0..p-1.
    bounds = [n] + [n - o for o in offs] + [0]
    for p in range(nk, -1, -1):
        lo, hi = bounds[p + 1], bounds[p]
        for k in (*range(p, nk), *range(p)):
            shift = offs[k] - n if k >= p else offs[k]
            wk = w[k, lo:hi, None] if per_row else w[k]
            acc[lo:hi] += np.multiply(wk, x[lo + shift : hi + shift], dtype=_F64)
    return _store(out, acc)


def assemble_csr(
    n: int,
    rows: Sequence[Mapping[int, float] | Sequence[int] | np.ndarray | None],
    argname: str = "src_weights",
    allow_self: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Assemble per-agent {rank: weight} rows into CSR arrays with sorted column indices.

    Row ``i`` of the result holds ``rows[i]``: a dict ``{rank: weight}``, a sequence of ranks
    (weight 1.0 each) or None. Returns ``(indptr, indices, data)`` as int64, int32, float64.
    """
    n = _checks.agent_count(n)
    rows = _checks.row_items(rows, n, argname)
    indptr = np.zeros(n + 1, dtype=np.int64)
    cols: list[int] = []
    vals: list[float] = []
    for i, item in enumerate(rows):
        item = _checks.row_item(item, i, argname)
        entries = []
        if isinstance(item, dict):
            for key, v in item.items():
                r = _checks.rank(key, n, i, argname, allow_self)
                entries.append((r, _checks.weight(v, r, i, argname)))
        else:
            for key in item:
                entries.append((_checks.rank(key, n, i, argname, allow_self), 1.0))
        entries.sort(key=lambda e: e[0])
        for a in range(1, len(entries)):
            if entries[a][0] == entries[a - 1][0]:
                raise _checks.duplicate(entries[a][0], i, argname)
        cols.extend(e[0] for e in entries)
        vals.extend(e[1] for e in entries)
        indptr[i + 1] = len(cols)
    return indptr, np.array(cols, dtype=np.int32), np.array(vals, dtype=np.float64)


class Combiner:
    """One weight matrix's arrays, checked once, applied to many ``x`` (see the compiled
    ``Combiner``): :meth:`circulant` and :meth:`csr` check the arrays, :meth:`apply` only
    ``x`` and ``out``, with :func:`circulant_combine`'s and :func:`csr_combine`'s bits."""

    __slots__ = ("n", "_apply")
    n: int
    _apply: Callable[[np.ndarray, np.ndarray], np.ndarray]

    def __init__(self) -> None:
        raise TypeError("use Combiner.circulant(...) or Combiner.csr(...)")

    @staticmethod
    def circulant(
        offsets: np.ndarray, weights: np.ndarray, self_weight: np.ndarray, n: int
    ) -> Combiner:
        """Check a circulant matrix's arrays for ``n`` agents (see circulant_combine)."""
        probe = np.empty((_checks.count("n", n), 0))
        circulant_combine(offsets, weights, self_weight, probe, np.empty_like(probe))
        offsets = _frozen(offsets)
        return Combiner._made(
            int(n), lambda x, out: circulant_combine(offsets, weights, self_weight, x, out)
        )

    @staticmethod
    def csr(
        indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, self_weight: np.ndarray, n: int
    ) -> Combiner:
        """Check a CSR matrix's arrays for ``n`` agents (see csr_combine)."""
        probe = np.empty((_checks.count("n", n), 0))
        csr_combine(indptr, indices, data, self_weight, probe, np.empty_like(probe))
        indptr, indices = _frozen(indptr), _frozen(indices)
        return Combiner._made(
            int(n), lambda x, out: csr_combine(indptr, indices, data, self_weight, x, out)
        )

    @staticmethod
    def _made(n: int, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Combiner:
        c = object.__new__(Combiner)
        c.n, c._apply = n, fn
        return c

    def apply(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out <- W x`` for C-contiguous (n, m) ``x`` and ``out``; returns ``out``."""
        _checks.array("x", x, None, 2)
        if x.shape[0] != self.n:
            raise ValueError(f"x has {x.shape[0]} rows; this matrix combines {self.n}")
        return self._apply(x, out)


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only: what a Combiner checked once stays as checked."""
    if a.flags.writeable:
        a.flags.writeable = False
    return a


def dicts_watch(rows: object) -> None:
    """What the compiled ``dicts_unchanged`` needs: nothing here, where Python code cannot
    read a dict's version; callers then compare the dicts' items."""
    return None


def dicts_unchanged(rows: object, watched: object) -> bool:
    """Never reached: :func:`dicts_watch` returns None."""
    raise AssertionError("the pure-Python kernels watch no dicts")
