"""PowerSGD: rank-r compression of matrices by one warm-started power iteration."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._base import Compressor

__all__ = ["PowerSGD", "power_sgd"]


class PowerSGD(Compressor):
    """Send a rank-``r`` approximation ``P Q^T`` of each agent's matrix (PowerSGD, Vogels
    et al. 2019): one step of subspace iteration, warm-started from the previous call.

    For an agent's value ``M`` of shape ``(m, n)`` (a value of more dimensions is read as
    ``(shape[0], prod(shape[1:]))``, as the paper does for convolutions):
    ``P = orth(M Q)``, ``Q <- M^T P``, payload ``P`` ``(m, r)`` and ``Q`` ``(n, r)`` in x's
    dtype, decompressed to ``P Q^T`` (``= P P^T M``, the projection of ``M`` on ``P``'s
    columns), both flattened column by column (``P^T``, ``Q^T`` in C order). ``orth`` is
    Gram-Schmidt, deterministic; a column with nothing but rounding left stays zero (and so
    does its warm start). Exact on matrices of rank ``<= r``; on a fixed matrix the error decreases
    from call to call towards the best rank-``r`` error.

    The object is **stateful**: it keeps the ``Q`` of the last call, keyed by the number of
    stacked rows (agents; 1 for :meth:`~fogsim.compress.Compressor.compress`) and the value's
    shape, and starts the next call with the same key from it; :meth:`reset` forgets it. Use
    one object per parameter: two parameters of one shape on one object share (and disturb)
    each other's warm start.
    The first ``Q`` of a key is drawn from each agent's generator
    (``rng.standard_normal((n, r))``), so every mode draws the same; later calls draw
    nothing. Receivers need no state: the payload holds ``P`` and ``Q``.

    A value with fewer than two dimensions is refused with a ``ValueError`` (no silent
    fallback: wrap such values with :func:`~fogsim.compress.identity` yourself).
    """

    randomized = True

    def __init__(self, rank: int = 1) -> None:
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral):
            raise TypeError(f"rank must be an int, got {type(rank).__name__}")
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        self.rank: int = int(rank)
        self._q: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}

    def reset(self) -> None:
        """Forget the warm starts: the next call draws its ``Q`` afresh."""
        self._q.clear()

    def _matrix(self, shape: tuple[int, ...], argname: str) -> tuple[int, int]:
        if len(shape) < 2:
            raise ValueError(
                f"power_sgd compresses matrices: {argname} must have 2 dimensions per agent "
                f"(m, n), got shape {shape}; use identity() (or another compressor) for it"
            )
        m, n = shape[0], int(np.prod(shape[1:], dtype=np.int64))
        if self.rank > min(m, n):
            raise ValueError(
                f"rank={self.rank} is more than min(m, n) = {min(m, n)} of a {m} x {n} matrix"
            )
        return m, n

    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        m, n = self._matrix(shape, "shape")
        dt = np.dtype(dtype)
        return ((dt, m * self.rank), (dt, n * self.rank))

    def _compress_shaped(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        rows, shape = x.shape[0], tuple(x.shape[1:])
        m, n = self._matrix(shape, "x")
        mat = np.ascontiguousarray(x.reshape(rows, m, n))
        key = (rows, shape)
        q = self._q.get(key)
        if q is None:
            draw = rng.standard_normal((n, self.rank))
            q = np.asarray(draw, dtype=np.float64).reshape(rows, n, self.rank)
        # columns as contiguous rows: (rows, r, m) and (rows, r, n)
        qt = np.ascontiguousarray(np.swapaxes(q, 1, 2), dtype=x.dtype)
        pt = _orthonormal_rows(np.matmul(qt, np.swapaxes(mat, 1, 2)))
        qt = np.matmul(pt, mat)
        self._q[key] = np.swapaxes(qt, 1, 2)
        return pt.reshape(rows, -1), qt.reshape(rows, -1)

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        raise AssertionError("PowerSGD compresses through _compress_shaped")  # pragma: no cover

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        pflat, qflat = parts
        rows, r = pflat.shape[0], self.rank
        pt = pflat.reshape(rows, r, -1).astype(dtype, copy=False)
        qt = qflat.reshape(rows, r, -1).astype(dtype, copy=False)
        out: np.ndarray = np.matmul(np.swapaxes(pt, 1, 2), qt).reshape(rows, d)
        return out


def _orthonormal_rows(a: np.ndarray) -> np.ndarray:
    """Return ``a`` ``(rows, r, m)`` with each stack's r rows orthonormalized in order.

    Gram-Schmidt with the projections done twice ("twice is enough": orthogonal to working
    precision); a row with no more than rounding left after them (a rank-deficient ``M Q``)
    is set to zero rather than normalized noise.
    """
    a = a.copy()
    noise = a.shape[2] * np.finfo(a.dtype).eps
    for j in range(a.shape[1]):
        start = np.sqrt(np.einsum("sm,sm->s", a[:, j], a[:, j]))
        for _ in range(2):
            for i in range(j):
                dots = np.einsum("sm,sm->s", a[:, i], a[:, j])
                a[:, j] -= dots[:, None] * a[:, i]
        norm = np.sqrt(np.einsum("sm,sm->s", a[:, j], a[:, j]))
        keep = (norm > noise * start) & (norm > 0)
        a[:, j] = np.divide(a[:, j], norm[:, None], out=np.zeros_like(a[:, j]), where=keep[:, None])
    return a


def power_sgd(rank: int = 1) -> PowerSGD:
    """Return the PowerSGD compressor of rank ``rank`` for matrix values (stateful: it keeps
    its warm starts between calls)."""
    return PowerSGD(rank)
