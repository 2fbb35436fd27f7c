"""What every compressor is: a payload layout, a stacked compress and decompress.

A compressor turns one agent's value ``x`` (any shape, float32 or float64) into a
*payload*: a few flat arrays (values, indices, scales) whose sizes depend only on ``x``'s
shape and dtype (its :meth:`Compressor.layout`), so every agent's payload has the same
bytes, :meth:`Compressor.payload_bytes` counts them exactly, and :func:`pack` lays them out
as one ``uint8`` buffer for the wire. Compressors are written once for stacked agents
(a leading agent axis, one vectorized call for all of them); one agent's call is the
stacked call with one row, its generator standing in for the stacked ones, so agent r draws
the same numbers in every mode.

Values may be numpy arrays or torch tensors on any device that holds data (CPU, CUDA):
compressing works in host memory, so a tensor off the CPU is copied there first, and the
payload's parts are numpy arrays (what goes on the wire). The payload's ``kind`` records
what the value came in as and where, so decompressing gives back a tensor on the value's
device. A ``meta`` tensor holds no values: it gets a ``TypeError``.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._arrays import Kind, is_tensor, to_numpy, wrap_like

if TYPE_CHECKING:
    import torch

    from .._rng import StackedGenerator
    from .._types import ArrayLike

__all__ = ["Compressor", "Payload", "pack", "unpack"]

#: dtypes a compressor takes (values are kept in their own precision on the wire).
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class Payload:
    """A compressed value: ``parts`` in the order of the compressor's layout.

    ``shape`` and ``dtype`` are one agent's value's; ``stacked`` payloads carry a leading
    agent axis on every part. ``kind`` is what the value came in as (None: a numpy array;
    else a :class:`fogsim._arrays.Kind`: a tensor and its device): decompressing returns that.
    It is not sent: :func:`pack` writes the parts only.
    """

    parts: tuple[np.ndarray, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    stacked: bool = False
    kind: Kind | None = None


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
    ``_compress`` and ``_decompress`` for stacked values ``(n, d)``."""

    #: Whether compressing draws random numbers (then an ``rng`` is required).
    randomized: bool = False

    # -- what subclasses define -------------------------------------------------------------
    @abc.abstractmethod
    def layout(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[np.dtype, int], ...]:
        """Return the payload's parts for one agent's value: ``(dtype, count)`` each."""

    @abc.abstractmethod
    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        """Compress stacked flat values ``x`` ``(n, d)``; parts with a leading axis n."""

    def _compress_shaped(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        """Compress stacked values ``x`` ``(n, *shape)``: flat ``(n, d)`` to :meth:`_compress`
        unless a compressor needs the shape (PowerSGD's matrices)."""
        return self._compress(np.ascontiguousarray(x.reshape(x.shape[0], -1)), rng)

    @abc.abstractmethod
    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        """Return the stacked flat values ``(n, d)`` of stacked ``parts``."""

    # -- the public surface -----------------------------------------------------------------
    def payload_bytes(self, shape: int | Sequence[int], dtype: npt.DTypeLike = np.float64) -> int:
        """Return the exact bytes one agent's payload of a ``shape``/``dtype`` value takes."""
        parts = self.layout(_shape(shape), _float(dtype, "dtype"))
        return int(sum(dt.itemsize * count for dt, count in parts))

    def compress(self, x: ArrayLike, rng: np.random.Generator | None = None) -> Payload:
        """Compress one agent's value ``x`` (``rng``: its generator, e.g. ``fs.rng()``)."""
        arr, kind = _values(x)
        stacked = self._stacked(arr[None], None if rng is None else _OneAgent(rng))
        return Payload(tuple(p[0] for p in stacked), arr.shape, arr.dtype, kind=kind)

    def decompress(self, payload: Payload) -> np.ndarray | torch.Tensor:
        """Return the value a payload of :meth:`compress` stands for (a tensor for a tensor)."""
        parts = tuple(p[None] for p in payload.parts)
        flat = self._decompress(parts, _size(payload.shape), payload.dtype)
        return _wrap(flat.reshape(payload.shape), payload.kind)

    def compress_stacked(
        self, x: ArrayLike, rng: StackedGenerator | np.random.Generator | None = None
    ) -> Payload:
        """Compress every agent's row of ``x`` (leading agent axis) in one call; ``rng``
        is a stacked generator (``fs.rng()`` in simulation) drawing agent r's row from
        agent r's generator."""
        arr, kind = _values(x)
        if arr.ndim == 0:
            raise ValueError("compress_stacked needs a leading agent axis")
        parts = self._stacked(arr, rng)
        return Payload(parts, arr.shape[1:], arr.dtype, stacked=True, kind=kind)

    def decompress_stacked(self, payload: Payload) -> np.ndarray | torch.Tensor:
        """Return the stacked values ``(n, *shape)`` of a stacked payload."""
        flat = self._decompress(payload.parts, _size(payload.shape), payload.dtype)
        return _wrap(flat.reshape(flat.shape[0], *payload.shape), payload.kind)

    def _stacked(self, arr: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        if self.randomized:
            if rng is None:
                raise TypeError(
                    f"{type(self).__name__} draws random numbers: pass rng (e.g. fs.rng())"
                )
            if isinstance(rng, np.random.Generator):
                if arr.shape[0] != 1:
                    raise TypeError(
                        f"rng is one Generator for {arr.shape[0]} stacked rows: pass a stacked "
                        f"generator (fs.rng() in simulation), one generator per row"
                    )
                rng = _OneAgent(rng)
            elif len(rng) != arr.shape[0]:
                raise ValueError(
                    f"rng holds {len(rng)} generators for {arr.shape[0]} stacked rows of x"
                )
        return tuple(self._compress_shaped(arr, rng))

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
    compressor: Compressor,
    buf: np.ndarray,
    shape: int | Sequence[int],
    dtype: npt.DTypeLike,
    stacked: bool = False,
    like: ArrayLike | None = None,
) -> Payload:
    """Return the payload :func:`pack` wrote into ``buf`` for values of ``shape``/``dtype``.

    Decompressing it gives a numpy array, or a value of ``like``'s kind (a tensor) if given.
    """
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
    kind = None if like is None else _kind(like)
    return Payload(tuple(parts), shape, dtype, stacked, kind)


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
    dt: np.dtype = np.dtype(dtype)
    if dt not in FLOATS:
        raise TypeError(f"{argname} must be float32 or float64 to be compressed, got {dt}")
    return dt


def _values(x: Any, argname: str = "x") -> tuple[np.ndarray, Kind | None]:
    """``x`` as a float32/float64 numpy array (tensors: their values, copied to the host
    from another device) and its kind."""
    arr, kind = _to_host(x, argname)
    if arr.dtype not in FLOATS or kind.half is not None:
        got = kind.half or arr.dtype
        raise TypeError(
            f"{argname} must hold float32 or float64 values to be compressed, got dtype {got}"
        )
    return arr, (kind if kind.torch else None)


def _to_host(x: Any, argname: str = "x") -> tuple[np.ndarray, Kind]:
    """``x`` as a numpy array, a tensor's values copied from its device if need be."""
    if is_tensor(x) and x.device.type == "meta":
        raise TypeError(
            f"{argname} is on the meta device: it holds no values to compress; "
            f"materialize it first (e.g. {argname}.to_empty(device='cpu') and fill it)"
        )
    return to_numpy(x, argname, allow_cuda=True)


def _kind(like: Any) -> Kind | None:
    """How values like ``like`` come in (checked as :func:`_values` checks them)."""
    if is_tensor(like):
        like = like.detach().reshape(-1)[:0]  # its kind, without copying a device's values
    return _values(like, "like")[1]


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _wrap(arr: np.ndarray, kind: Kind | None) -> np.ndarray | torch.Tensor:
    if kind is None:
        return arr
    value: torch.Tensor = wrap_like(np.ascontiguousarray(arr), kind)
    return value
