"""Random-k sparsification: k entries chosen uniformly, scaled to be unbiased."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._simple import KSparse

__all__ = ["RandomK", "random_k"]


class RandomK(KSparse):
    """Keep ``k`` entries chosen uniformly at random without replacement (``k`` a count, or
    a fraction in (0, 1] of the entries). The payload is ``KSparse``'s: the values
    (x's dtype or ``value_dtype``) and the smallest unsigned indices.

    With ``scale=True`` (the default) the kept values are multiplied by ``d/k`` on
    decompression, so the compressor is unbiased: ``E[C(x)] = x``, with
    ``E||C(x) - x||^2 = (d/k - 1) ||x||^2``. With ``scale=False`` it is CHOCO's ``rand_k``
    (Koloskova et al. 2019), biased, ``E[C(x)] = (k/d) x``, a contraction with
    ``omega = k/d``. The scale is applied by the receiver: the payload holds x's entries
    as they are. Agent r's entries come from its own generator
    (``rng.choice(d, k, replace=False)``), so every mode picks the same ones.
    """

    randomized = True

    def __init__(
        self, k: float, scale: bool = True, *, value_dtype: npt.DTypeLike | None = None
    ) -> None:
        super().__init__(k, value_dtype=value_dtype)
        if not isinstance(scale, bool | np.bool_):
            raise TypeError(f"scale must be True or False, got {type(scale).__name__}")
        self.scale = bool(scale)

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        d = x.shape[1]
        k = self.count(d)
        idx = np.asarray(rng.choice(d, size=k, replace=False)).reshape(x.shape[0], k)
        idx = np.sort(idx, axis=1)  # the same set, read in memory order
        return self._parts(x, idx)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        values, idx = parts
        values = values.astype(dtype, copy=False)
        if self.scale:
            values = values * dtype.type(d / idx.shape[1])
        out = np.zeros((values.shape[0], d), dtype=dtype)
        np.put_along_axis(out, idx.astype(np.intp), values.astype(dtype, copy=False), axis=1)
        return out


def random_k(k: float, scale: bool = True, *, value_dtype: npt.DTypeLike | None = None) -> RandomK:
    """Return the random-k compressor (``k`` entries, or a fraction ``k`` of them), unbiased
    (values scaled by ``d/k``) unless ``scale=False``; values sent in x's dtype or in
    ``value_dtype``."""
    return RandomK(k, scale, value_dtype=value_dtype)
