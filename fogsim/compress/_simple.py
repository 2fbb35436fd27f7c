"""The deterministic compressors: identity and top-k."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._base import Compressor

__all__ = ["Identity", "KSparse", "TopK", "identity", "top_k"]


class Identity(Compressor):
    """Send the value as it is: the payload is the values, ``d`` of x's dtype."""

    def layout(self, shape: tuple[int, ...], dtype: Any) -> tuple[tuple[np.dtype, int], ...]:
        return ((np.dtype(dtype), int(np.prod(shape, dtype=np.int64))),)

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        return (x.copy(),)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        return np.array(parts[0], dtype=dtype)


class KSparse(Compressor):
    """Base of the compressors that send ``k`` of a value's entries (``k`` a count, or a
    fraction in (0, 1] of the entries, at least one): values in x's dtype, int32 indices."""

    def __init__(self, k: float) -> None:
        if isinstance(k, bool) or not isinstance(k, numbers.Real):
            raise TypeError(f"k must be a count or a fraction, got {type(k).__name__}")
        if isinstance(k, numbers.Integral):
            if k < 1:
                raise ValueError(f"k must be >= 1 (a count) or in (0, 1] (a fraction), got {k}")
        elif not 0 < k <= 1:
            raise ValueError(f"k must be >= 1 (a count) or in (0, 1] (a fraction), got {k}")
        self.k: int | float = int(k) if isinstance(k, numbers.Integral) else float(k)

    def count(self, d: int) -> int:
        """Return how many of ``d`` entries are kept."""
        if isinstance(self.k, int):
            if self.k > d:
                raise ValueError(f"k={self.k} is more than the value's {d} entries")
            return self.k
        return max(1, int(round(self.k * d)))

    def layout(self, shape: tuple[int, ...], dtype: Any) -> tuple[tuple[np.dtype, int], ...]:
        k = self.count(int(np.prod(shape, dtype=np.int64)))
        return ((np.dtype(dtype), k), (np.dtype(np.int32), k))


class TopK(KSparse):
    """Keep the ``k`` entries of largest magnitude (``k`` a count, or a fraction in (0, 1]
    of the entries, at least one): values in x's dtype and int32 indices."""

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        n, d = x.shape
        k = self.count(d)
        mag = np.abs(x)
        if k >= d or np.isnan(mag).any():
            # ties broken by the lower index: a stable order of decreasing magnitude
            idx = np.argsort(-mag, axis=1, kind="stable")[:, :k]
            idx.sort(axis=1)
        else:
            # the same entries in O(d): all above the k-th largest magnitude, then the
            # lowest-indexed of those equal to it (a full sort per step dominated CHOCO)
            kth = np.partition(mag, d - k, axis=1)[:, d - k : d - k + 1]
            above = mag > kth
            ties = mag == kth
            room = k - above.sum(axis=1, keepdims=True)
            keep = above | (ties & (np.cumsum(ties, axis=1) <= room))
            idx = np.nonzero(keep)[1].reshape(n, k)
        return np.take_along_axis(x, idx, axis=1), idx.astype(np.int32)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        values, idx = parts
        out = np.zeros((values.shape[0], d), dtype=dtype)
        np.put_along_axis(out, idx.astype(np.intp), values, axis=1)
        return out


def identity() -> Identity:
    """Return the compressor that sends values unchanged."""
    return Identity()


def top_k(k: float) -> TopK:
    """Return the top-k compressor (``k`` entries, or a fraction ``k`` of them)."""
    return TopK(k)
