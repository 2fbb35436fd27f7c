"""Quantizers: QSGD (s levels, stochastic rounding) and scaled sign."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._base import Compressor

__all__ = ["QSGD", "ScaledSign", "qsgd", "scaled_sign"]

_MAX_LEVELS = np.iinfo(np.int32).max


class QSGD(Compressor):
    """Quantize to ``s`` levels of the norm with stochastic rounding (QSGD, Alistarh et al.
    2017): ``Q(x)_i = ||x||_2 sign(x_i) l_i / s``.

    ``l_i`` is ``floor(s |x_i| / ||x||)`` or one more, the latter with probability the
    fraction dropped, so ``E[Q(x)] = x`` (unbiased) and
    ``E||Q(x) - x||^2 <= min(d / s^2, sqrt(d) / s) ||x||^2``. The payload is the norm (one
    value of x's dtype, rounded to it first, so the levels are drawn against the norm the
    receiver uses) and the signed levels ``sign(x_i) l_i`` as small integers: two per byte
    (4-bit two's complement, low nibble first) when ``s <= 7``, else int8 (``s <= 127``),
    int16 (``s <= 32767``) or int32. A zero value decompresses to zeros. Each agent draws
    ``d`` uniforms from its generator (``rng.random(d)``) on every call, whatever ``x``
    holds, so every mode draws the same numbers.

    ``scaled=True`` decompresses to ``Q(x) / (1 + tau)``, ``tau = min(d / s^2, sqrt(d) / s)``
    (Koloskova et al. 2019, as CHOCO uses QSGD): biased, but a contraction,
    ``E||C(x) - x||^2 <= (1 - 1 / (1 + tau)) ||x||^2``. Plain QSGD is none once
    ``tau >= 1`` (``d >= s^2``), and error feedback then diverges whatever gamma: use
    ``scaled=True`` with error feedback (CHOCO-gossip, CHOCO-SGD), plain QSGD where
    unbiasedness matters (averaged gradients). Same payload, bytes and random draws.
    """

    randomized = True

    def __init__(self, s: int = 16, scaled: bool = False) -> None:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f"s (the number of levels) must be an int, got {type(s).__name__}")
        if not 1 <= s <= _MAX_LEVELS:
            raise ValueError(f"s (the number of levels) must be in [1, {_MAX_LEVELS}], got {s}")
        if not isinstance(scaled, bool):
            raise TypeError(f"scaled must be a bool, got {type(scaled).__name__}")
        self.s: int = int(s)
        self.scaled: bool = scaled

    def tau(self, d: int) -> float:
        """Return QSGD's variance factor for ``d`` entries: ``min(d / s^2, sqrt(d) / s)``."""
        return min(d / self.s**2, float(np.sqrt(d)) / self.s)

    @property
    def nibbles(self) -> bool:
        """Whether two levels share a byte (``s <= 7``: 4 bits hold -7..7)."""
        return self.s <= 7

    def _level_dtype(self) -> np.dtype:
        for dt in (np.int8, np.int16, np.int32):
            if self.s <= np.iinfo(dt).max:
                return np.dtype(dt)
        raise AssertionError(self.s)  # __init__ bounds s

    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        d = int(np.prod(shape, dtype=np.int64))
        levels = (np.dtype(np.uint8), (d + 1) // 2) if self.nibbles else (self._level_dtype(), d)
        return ((np.dtype(dtype), 1), levels)

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        n, d = x.shape
        u = np.asarray(rng.random(d), dtype=np.float64).reshape(n, d)
        x64 = x.astype(np.float64, copy=False)
        norm = np.sqrt(np.einsum("ij,ij->i", x64, x64)).astype(x.dtype)
        sent = norm.astype(np.float64)[:, None]
        # |x_i| <= ||x|| rounded to x's dtype, so r stays in [0, s]
        r = np.divide(np.abs(x64) * self.s, sent, out=np.zeros_like(x64), where=sent > 0)
        low = np.floor(r)
        levels = (low + (u < r - low)).astype(np.int64)
        levels = np.where(x64 < 0, -levels, levels)
        return norm[:, None], self._encode(levels)

    def _encode(self, levels: np.ndarray) -> np.ndarray:
        if not self.nibbles:
            return levels.astype(self._level_dtype())
        n, d = levels.shape
        nib = np.zeros((n, d + d % 2), dtype=np.uint8)
        nib[:, :d] = levels & 0xF
        packed: np.ndarray = nib[:, 0::2] | (nib[:, 1::2] << 4)
        return packed

    def _decode(self, codes: np.ndarray, d: int) -> np.ndarray:
        if not self.nibbles:
            return codes.astype(np.int64)
        nib = np.empty((codes.shape[0], 2 * codes.shape[1]), dtype=np.int64)
        nib[:, 0::2] = codes & 0xF
        nib[:, 1::2] = codes >> 4
        nib = nib[:, :d]
        return np.where(nib >= 8, nib - 16, nib)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        norm, codes = parts
        levels = self._decode(codes, d).astype(dtype)
        step = norm.reshape(-1, 1).astype(dtype) / dtype.type(self.s)
        out: np.ndarray = (step * levels).astype(dtype, copy=False)
        if self.scaled:
            out = (out / dtype.type(1.0 + self.tau(d))).astype(dtype, copy=False)
        return out


class ScaledSign(Compressor):
    """Send the signs and one scale, the mean magnitude (EF-SignSGD, Karimireddy et al.
    2019): ``C(x) = (||x||_1 / d) sign(x)``.

    The payload is the scale (one value of x's dtype) and one bit per entry, packed eight
    to a byte (``np.packbits``, big-endian bit order): 1 for ``x_i >= 0``, so a zero entry
    comes back as ``+scale``. Biased, a contraction: use it with error feedback.
    """

    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        d = int(np.prod(shape, dtype=np.int64))
        return ((np.dtype(dtype), 1), (np.dtype(np.uint8), (d + 7) // 8))

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        d = x.shape[1]
        l1 = np.abs(x).astype(np.float64).sum(axis=1)
        scale = (l1 / d if d else l1).astype(x.dtype)
        return scale[:, None], np.packbits(x >= 0, axis=1)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        scale, bits = parts
        signs = np.unpackbits(bits, axis=1, count=d).astype(dtype) * 2 - 1
        out: np.ndarray = (scale.reshape(-1, 1).astype(dtype) * signs).astype(dtype, copy=False)
        return out


def qsgd(s: int = 16, scaled: bool = False) -> QSGD:
    """Return the QSGD quantizer with ``s`` levels (``s = 7``: 4 bits an entry).

    ``scaled=True``: divided by ``1 + tau`` on receipt, a contraction for error feedback
    (CHOCO); see :class:`QSGD`.
    """
    return QSGD(s, scaled)


def scaled_sign() -> ScaledSign:
    """Return the scaled-sign compressor (one bit an entry and the mean magnitude)."""
    return ScaledSign()
