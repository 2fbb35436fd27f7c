"""The deterministic compressors: identity and top-k."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._base import FLOATS, Compressor

__all__ = ["Identity", "KSparse", "TopK", "identity", "index_dtype", "top_k"]


class Identity(Compressor):
    """Send the value as it is: the payload is the values, ``d`` of x's dtype."""

    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        return ((np.dtype(dtype), int(np.prod(shape, dtype=np.int64))),)

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        return (x.copy(),)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        return np.array(parts[0], dtype=dtype)


class KSparse(Compressor):
    """Base of the compressors that send ``k`` of a value's entries (``k`` a count, or a
    fraction in (0, 1] of the entries, at least one).

    The payload is the ``k`` values, in x's dtype or in ``value_dtype`` (float32 or
    float64) when given, then their ``k`` indices in the smallest unsigned integer type
    that holds ``d - 1`` (:func:`index_dtype`: uint8 up to 256 entries, uint16 up to
    65,536, then uint32, uint64). Values sent in float32 come back as x's dtype; the
    rounding is part of the compression, so error feedback (CHOCO) corrects it.
    """

    def __init__(self, k: float, *, value_dtype: npt.DTypeLike | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, numbers.Real):
            raise TypeError(f"k must be a count or a fraction, got {type(k).__name__}")
        if isinstance(k, numbers.Integral):
            if k < 1:
                raise ValueError(f"k must be >= 1 (a count) or in (0, 1] (a fraction), got {k}")
        elif not 0 < k <= 1:
            raise ValueError(f"k must be >= 1 (a count) or in (0, 1] (a fraction), got {k}")
        self.k: int | float = int(k) if isinstance(k, numbers.Integral) else float(k)
        self.value_dtype: np.dtype | None = None
        if value_dtype is not None:
            try:
                self.value_dtype = np.dtype(value_dtype)
            except TypeError:
                raise TypeError(f"value_dtype must be a numpy dtype, got {value_dtype!r}") from None
            if self.value_dtype not in FLOATS:
                raise TypeError(
                    f"value_dtype must be float32 or float64 (or None: x's dtype), "
                    f"got {self.value_dtype}"
                )

    def count(self, d: int) -> int:
        """Return how many of ``d`` entries are kept."""
        if isinstance(self.k, int):
            if self.k > d:
                raise ValueError(f"k={self.k} is more than the value's {d} entries")
            return self.k
        return max(1, int(round(self.k * d)))

    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        d = int(np.prod(shape, dtype=np.int64))
        k = self.count(d)
        return ((self._sent(dtype), k), (index_dtype(d), k))

    def _sent(self, dtype: Any) -> np.dtype:
        """Return the dtype the values travel in for values of ``dtype``."""
        return np.dtype(dtype) if self.value_dtype is None else self.value_dtype

    def _parts(self, x: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return the payload's parts: ``x``'s entries at ``idx`` and the indices."""
        values = np.take_along_axis(x, idx, axis=1).astype(self._sent(x.dtype), copy=False)
        return values, idx.astype(index_dtype(x.shape[1]))


class TopK(KSparse):
    """Keep the ``k`` entries of largest magnitude (``k`` a count, or a fraction in (0, 1]
    of the entries, at least one); ties go to the lower index. The payload is
    ``KSparse``'s: the values (x's dtype or ``value_dtype``) and the smallest
    unsigned indices."""

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
        return self._parts(x, idx)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        values, idx = parts
        out = np.zeros((values.shape[0], d), dtype=dtype)
        np.put_along_axis(out, idx.astype(np.intp), values.astype(dtype, copy=False), axis=1)
        return out


def identity() -> Identity:
    """Return the compressor that sends values unchanged."""
    return Identity()


def top_k(k: float, *, value_dtype: npt.DTypeLike | None = None) -> TopK:
    """Return the top-k compressor (``k`` entries, or a fraction ``k`` of them; values sent
    in x's dtype, or in ``value_dtype``: ``top_k(0.01, value_dtype=np.float32)``)."""
    return TopK(k, value_dtype=value_dtype)


def index_dtype(d: int) -> np.dtype:
    """Return the smallest unsigned integer dtype that holds the indices ``0..d-1``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if d - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)
