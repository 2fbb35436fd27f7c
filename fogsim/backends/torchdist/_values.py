"""What an op was given, as a contiguous torch tensor (and a numpy view of it on CPU).

numpy arrays, Python scalars and CPU tensors share memory with a numpy array, so the
combine runs on the compiled kernels of :mod:`fogsim._core` and results are the
simulator's bits; CUDA tensors stay on their device and are combined by torch in the same
order. A result goes back as the type it came in: numpy, CPU tensor or CUDA tensor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ... import _arrays

__all__ = ["SUMMABLE", "Value", "as_value", "torch_dtype"]

# dtypes torch.distributed's gloo can sum (it refuses int16 and the wide unsigned ones).
_SUMMABLE_TYPES = (
    np.bool_,
    np.int8,
    np.uint8,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
)
SUMMABLE = frozenset(np.dtype(t) for t in _SUMMABLE_TYPES)
_NUMPY, _CPU, _CUDA = "numpy", "cpu", "cuda"


class Value:
    """One rank's ``x``: ``tensor`` (contiguous), ``arr`` (its numpy view, None on CUDA).

    ``half`` is the torch dtype (float16 or bfloat16) of a half-precision ``x`` held here
    as float32, to which :meth:`wrap` rounds the result once; None otherwise.
    """

    __slots__ = ("tensor", "arr", "kind", "dtype", "shape", "half")

    def __init__(
        self, tensor: Any, arr: np.ndarray | None, kind: str, dtype: np.dtype, half: Any = None
    ) -> None:
        self.tensor, self.arr, self.kind, self.dtype = tensor, arr, kind, dtype
        self.shape = tuple(tensor.shape)
        self.half = half

    @property
    def cuda(self) -> bool:
        return self.kind == _CUDA

    @property
    def device(self) -> bool:
        return self.kind == _CUDA

    @property
    def key(self) -> tuple[Any, ...]:
        """What the ranks agree on beyond dtype and shape: the device (CPU values agree
        with numpy arrays, whatever each rank passed)."""
        return ("cuda",) if self.kind == _CUDA else ()

    @property
    def data(self) -> Any:
        return self.tensor

    @property
    def fusion_wrap(self) -> Any:
        return None if self.kind == _NUMPY and self.half is None else self.wrap

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel() * self.tensor.element_size())

    def describe(self, shape: tuple[int, ...] | None = None) -> str:
        where = " on cuda" if self.cuda else ""
        return f"{self.dtype} {self.shape if shape is None else shape}{where}"

    def scaled(self, s: float) -> Any:
        """Return ``x`` to send, times the sender's weight (numpy's rounding on CPU)."""
        if s == 1.0:
            return self.tensor
        if self.arr is not None:
            return torch.from_numpy(np.multiply(self.arr, self.dtype.type(s)))
        factor = torch.from_numpy(np.array(s, dtype=self.dtype)).to(self.tensor.device)
        return self.tensor * factor

    def reshaped(self, shape: tuple[int, ...]) -> Value:
        arr = None if self.arr is None else self.arr.reshape(shape)
        return Value(self.tensor.reshape(shape), arr, self.kind, self.dtype, self.half)

    def empty(self, shape: tuple[int, ...]) -> tuple[Any, np.ndarray | None]:
        """Return a new (tensor, numpy view) of ``shape`` and this dtype, on this device."""
        if self.arr is not None:
            arr = np.empty(shape, dtype=self.dtype)
            return torch.from_numpy(arr), arr
        return torch.empty(shape, dtype=self.tensor.dtype, device=self.tensor.device), None

    def wrap(self, out: Any) -> Any:
        """Return ``out`` (numpy on CPU, a tensor on CUDA) as the type ``x`` came in."""
        if self.half is not None and self.kind != _CUDA:
            # the one rounding code of every backend (fogsim._arrays.wrap_like)
            return _arrays.wrap_like(
                out, _arrays.Kind(self.kind == _CPU, None, str(self.half).split(".")[-1])
            )
        if self.half is not None:
            out = out.to(self.half)
        if self.kind == _NUMPY:
            return out
        return torch.from_numpy(out) if self.kind == _CPU else out


def torch_dtype(dtype: np.dtype) -> Any:
    """Return the torch dtype of a numpy dtype."""
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _numpy_dtype(tensor: Any, op: str) -> np.dtype:
    try:
        return torch.empty(0, dtype=tensor.dtype).numpy().dtype
    except TypeError:
        raise TypeError(f"{op}: x has dtype {tensor.dtype}, which numpy cannot hold") from None


def as_value(x: Any, op: str, averaging: bool, summing: bool = False) -> Value:
    """Return ``x`` as a :class:`Value`; raise TypeError for what ``op`` cannot take.

    Averaging ops take float16, bfloat16, float32 and float64; ``summing`` ones what gloo
    can add; others any dtype of booleans, integers or floats (they move bytes). Half
    precision is held (and sent) as float32 where the op adds, so every rank adds what the
    simulator adds, and bfloat16 (which numpy lacks) always; :meth:`Value.wrap` rounds back.
    """
    half = None
    if _arrays.is_tensor(x):
        t = x.detach()
        if t.dtype is torch.bfloat16 or (t.dtype is torch.float16 and (averaging or summing)):
            half, t = t.dtype, t.float()
        if t.device.type == "cuda":
            value = Value(t.contiguous(), None, _CUDA, _numpy_dtype(t, op))
        elif t.device.type == "cpu":
            _numpy_dtype(t, op)  # a clear TypeError for dtypes numpy lacks (bfloat16)
            value = _from_array(t.resolve_conj().resolve_neg().numpy(), _CPU)
        else:
            raise TypeError(f"{op}: x is on {t.device}; this backend takes CPU and CUDA tensors")
    else:
        arr, _ = _arrays.to_numpy(x)
        if arr.dtype == np.float16 and (averaging or summing):
            half, arr = torch.float16, arr.astype(np.float32)
        value = _from_array(arr, _NUMPY)
    value.half = half
    dtype = value.dtype
    if averaging:
        _arrays.require_float(np.empty(0, dtype), op)
    else:
        _arrays.require_numbers(dtype, op, sums=summing)
    if summing and dtype not in SUMMABLE:
        raise TypeError(
            f"{op}: torch.distributed cannot sum dtype {dtype}; "
            f"use one of {', '.join(sorted(str(d) for d in SUMMABLE))}"
        )
    return value


def _from_array(arr: np.ndarray, kind: str) -> Value:
    # A copy when torch could not share the memory: strided, read-only or byte-swapped.
    if not (arr.flags.c_contiguous and arr.flags.writeable and arr.dtype.isnative):
        arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
    try:
        tensor = torch.from_numpy(arr)
    except TypeError:
        raise TypeError(f"x has dtype {arr.dtype}, which torch cannot hold") from None
    return Value(tensor, arr, kind, arr.dtype)
