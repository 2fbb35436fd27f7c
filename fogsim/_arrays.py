"""numpy / torch interchange shared by the backends.

Ops accept numpy arrays, torch CPU tensors and Python scalars and return the type they
were given. torch is never imported here: a value can only be a tensor if the caller
already imported torch, so ``sys.modules`` tells.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

__all__ = ["Kind", "is_tensor", "to_numpy", "wrap_like", "require_float", "check_name"]

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class Kind:
    """What a value came in as, so results go back out the same way."""

    __slots__ = ("torch", "device")

    def __init__(self, torch: bool, device: Any = None) -> None:
        self.torch = torch
        self.device = device


_NUMPY = Kind(False)


def is_tensor(x: Any) -> bool:
    """Return whether ``x`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x: Any, argname: str = "x", *, allow_cuda: bool = False) -> tuple[np.ndarray, Kind]:
    """Return ``x`` as a numpy array (zero-copy where possible) and how it came in."""
    if isinstance(x, np.ndarray):
        return x, _NUMPY
    if is_tensor(x):
        if x.device.type != "cpu" and not allow_cuda:
            raise TypeError(f"{argname} is on {x.device}; this backend works on CPU tensors")
        try:
            arr = x.detach().cpu().numpy()
        except TypeError as exc:  # e.g. bfloat16
            raise TypeError(f"{argname} has dtype {x.dtype}, which numpy cannot hold") from exc
        return arr, Kind(True, x.device)
    if isinstance(x, numbers.Number | np.generic) and not isinstance(x, complex):
        return np.asarray(x), _NUMPY
    if isinstance(x, list | tuple):
        try:
            arr = np.asarray(x)
        except ValueError as exc:
            raise ValueError(_ragged_message(x, argname, exc)) from None
        if arr.dtype == object:
            raise TypeError(f"{argname} holds objects that are not numbers")
        return arr, _NUMPY
    raise TypeError(
        f"{argname} must be a numpy array, a torch tensor or a number, got {type(x).__name__}"
    )


def _ragged_message(x: list | tuple, argname: str, exc: ValueError) -> str:
    """Say which entries of a ragged sequence differ in shape (stacked agents, usually)."""
    shapes = []
    for item in x:
        try:
            shapes.append(np.shape(item))
        except ValueError:
            shapes.append(None)
    first = shapes[0] if shapes else None
    odd = next((k for k, shape in enumerate(shapes) if shape != first), None)
    if odd is None or first is None or shapes[odd] is None:
        return f"{argname} is a ragged nested sequence: {exc}"
    return (
        f"{argname}: entries differ in shape (one per agent in simulation): entry 0 has shape "
        f"{first}, entry {odd} has shape {shapes[odd]}"
    )


def wrap_like(arr: np.ndarray, kind: Kind) -> Any:
    """Return ``arr`` as the type described by ``kind`` (zero-copy for CPU tensors)."""
    if not kind.torch:
        return arr
    import torch

    tensor = torch.from_numpy(arr)
    return tensor if kind.device is None or kind.device.type == "cpu" else tensor.to(kind.device)


def require_float(arr: np.ndarray, op: str, argname: str = "x") -> None:
    """Raise TypeError unless ``arr`` is float32 or float64 (``op`` averages)."""
    if arr.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op} averages, so {argname} must be float32 or float64, got {arr.dtype}")


def check_name(name: Any) -> None:
    """Raise TypeError unless ``name`` is a string or None."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {type(name).__name__}")
