"""What every compressor is: a payload layout, a stacked compress and decompress.

A compressor turns one agent's value ``x`` (any shape, float32 or float64) into a
*payload*: a few flat arrays (values, indices, scales) whose sizes depend only on ``x``'s
shape and dtype (its :meth:`Compressor.layout`), so every agent's payload has the same
bytes, :meth:`Compressor.payload_bytes` counts them exactly, and :func:`pack` lays them out
as one ``uint8`` buffer for the wire. Compressors are written once for stacked agents
(a leading agent axis, one vectorized call for all of them); one agent's call is the
stacked call with one row, its generator standing in for the stacked ones, so agent r draws
the same numbers in every mode.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Compressor", "Payload", "pack", "unpack"]

#: dtypes a compressor takes (values are kept in their own precision on the wire).
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class Payload:
    """A compressed value: ``parts`` in the order of the compressor's layout.

    ``shape`` and ``dtype`` are one agent's value's; ``stacked`` payloads carry a leading
    agent axis on every part.
    """

    parts: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    stacked: bool = False


class _OneAgent:
    """One agent's ``numpy.random.Generator`` seen as a stacked generator of one row."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def __len__(self) -> int:
        return 1

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._rng, name)

        def one_row(*args: Any, **kwargs: Any) -> Any:
            return np.asarray(method(*args, **kwargs))[None]

        return one_row


class Compressor(abc.ABC):
    """Base class: see the module docstring. Subclasses define :meth:`layout`,
    :meth:`_compress` and :meth:`_decompress` for stacked values ``(n, d)``."""

    #: Whether compressing draws random numbers (then an ``rng`` is required).
    randomized: bool = False

    # -- what subclasses define -------------------------------------------------------------
    @abc.abstractmethod
    def layout(self, shape: tuple[int, ...], dtype: Any) -> tuple[tuple[np.dtype, int], ...]:
        """Return the payload's parts for one agent's value: ``(dtype, count)`` each."""

    @abc.abstractmethod
    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        """Compress stacked flat values ``x`` ``(n, d)``; parts with a leading axis n."""

    @abc.abstractmethod
    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        """Return the stacked flat values ``(n, d)`` of stacked ``parts``."""

    # -- the public surface -----------------------------------------------------------------
    def payload_bytes(self, shape: Any, dtype: Any = np.float64) -> int:
        """Return the exact bytes one agent's payload of a ``shape``/``dtype`` value takes."""
        parts = self.layout(_shape(shape), _float(dtype, "dtype"))
        return int(sum(dt.itemsize * count for dt, count in parts))

    def compress(self, x: Any, rng: Any = None) -> Payload:
        """Compress one agent's value ``x`` (``rng``: its generator, e.g. ``fs.rng()``)."""
        arr = _values(x)
        stacked = self.compress_stacked(arr[None], None if rng is None else _OneAgent(rng))
        return Payload(tuple(p[0] for p in stacked.parts), arr.shape, arr.dtype)

    def decompress(self, payload: Payload) -> np.ndarray:
        """Return the value a payload of :meth:`compress` stands for."""
        parts = tuple(p[None] for p in payload.parts)
        one = Payload(parts, payload.shape, payload.dtype, stacked=True)
        return self.decompress_stacked(one)[0]

    def compress_stacked(self, x: Any, rng: Any = None) -> Payload:
        """Compress every agent's row of ``x`` (leading agent axis) in one call; ``rng``
        is a stacked generator (``fs.rng()`` in simulation) drawing agent r's row from
        agent r's generator."""
        arr = _values(x)
        if arr.ndim == 0:
            raise ValueError("compress_stacked needs a leading agent axis")
        if self.randomized and rng is None:
            raise TypeError(f"{type(self).__name__} draws random numbers: pass rng (e.g. fs.rng())")
        flat = np.ascontiguousarray(arr.reshape(arr.shape[0], -1))
        parts = self._compress(flat, rng)
        return Payload(tuple(parts), arr.shape[1:], arr.dtype, stacked=True)

    def decompress_stacked(self, payload: Payload) -> np.ndarray:
        """Return the stacked values ``(n, *shape)`` of a stacked payload."""
        d = int(np.prod(payload.shape, dtype=np.int64))
        flat = self._decompress(payload.parts, d, payload.dtype)
        return flat.reshape(flat.shape[0], *payload.shape)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


def pack(payload: Payload) -> np.ndarray:
    """Return the payload as ``uint8`` bytes: ``(payload_bytes,)``, or one row per agent."""
    lead = payload.parts[0].shape[0] if payload.stacked else None
    rows = [
        np.ascontiguousarray(p).view(np.uint8).reshape(-1 if lead is None else (lead, -1))
        for p in payload.parts
    ]
    return np.concatenate(rows, axis=-1)


def unpack(
    compressor: Compressor, buf: np.ndarray, shape: Any, dtype: Any, stacked: bool = False
) -> Payload:
    """Return the payload :func:`pack` wrote into ``buf`` for values of ``shape``/``dtype``."""
    shape, dtype = _shape(shape), _float(dtype, "dtype")
    data = np.ascontiguousarray(buf).view(np.uint8)
    rows = data.reshape(-1 if not stacked else (data.shape[0], -1))
    want = compressor.payload_bytes(shape, dtype)
    if rows.shape[-1] != want:
        raise ValueError(f"the buffer holds {rows.shape[-1]} bytes per agent, expected {want}")
    parts, at = [], 0
    for dt, count in compressor.layout(shape, dtype):
        size = dt.itemsize * count
        raw = np.ascontiguousarray(rows[..., at : at + size])
        parts.append(raw.view(dt).reshape((-1, count) if stacked else (count,)))
        at += size
    return Payload(tuple(parts), shape, dtype, stacked)


# -- argument checks --------------------------------------------------------------------------
def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    try:
        dims = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in dims):
        raise ValueError(f"shape must not be negative, got {dims}")
    return dims


def _float(dtype: Any, argname: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in FLOATS:
        raise TypeError(f"{argname} must be float32 or float64 to be compressed, got {dt}")
    return dt


def _values(x: Any) -> np.ndarray:
    """``x`` as a float32/float64 numpy array (tensors: their CPU values)."""
    from .._arrays import to_numpy

    arr, _ = to_numpy(x)
    if arr.dtype not in FLOATS:
        raise TypeError(
            f"x must hold float32 or float64 values to be compressed, got dtype {arr.dtype}"
        )
    return arr
