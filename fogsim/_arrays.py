"""numpy / torch interchange shared by the backends.

Ops accept numpy arrays, torch CPU tensors and Python scalars and return the type they
were given. A plain list or tuple of numbers (nested lists of numbers too) is one array,
``np.asarray(x)``, and means the same in every mode: this agent's value distributed, the
same value on every agent in simulation, as a Python scalar does (:data:`LITERAL`).

torch is never imported here: a value can only be a tensor if the caller already imported
torch, so ``sys.modules`` tells.

Half precision (float16, and torch's bfloat16, which numpy lacks) is computed in float32
and rounded once on the way out, the same in every mode: :func:`to_numpy` turns a bfloat16
tensor into float32, :func:`upcast_half` turns a float16 array into float32 before an op
that adds, and :func:`wrap_like` rounds the result back to the dtype the value came in as.
Windows, which work on the caller's value in place, follow the same rule through
:class:`fogsim.backends._windows.WindowFormat`.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

__all__ = [
    "LITERAL",
    "Kind",
    "is_literal",
    "is_tensor",
    "to_numpy",
    "wrap_like",
    "upcast_half",
    "require_float",
    "require_numbers",
    "require_window_float",
    "check_name",
]

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT16 = np.dtype(np.float16)
_WINDOW_DTYPES = ("float16", "bfloat16", "float32", "float64")


class Kind:
    """What a value came in as, so results go back out the same way.

    ``half`` is ``"float16"`` or ``"bfloat16"`` when the value is computed in float32
    and the result must be rounded back to that half-precision dtype, else None.
    """

    __slots__ = ("torch", "device", "half")

    def __init__(self, torch: bool, device: Any = None, half: str | None = None) -> None:
        self.torch = torch
        self.device = device
        self.half = half


#: How a numpy array came in (results are returned as numpy arrays).
NUMPY = _NUMPY = Kind(False)
#: How a plain list or tuple of numbers came in: a value written in the script, the same on
#: every agent. The simulator holds it once per agent (a list that ``fogsim.local`` made is
#: not plain: it is one value per agent).
LITERAL = Kind(False)


def _numbers_only(x: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every entry of ``x`` is a number or a plain list or tuple of numbers."""
    return all(
        (type(v) is list or type(v) is tuple)
        and _numbers_only(v)
        or (isinstance(v, numbers.Number | np.generic) and not isinstance(v, np.ndarray))
        for v in x
    )


def is_literal(x: Any) -> bool:
    """Return whether ``x`` is a plain list or tuple of numbers (see :data:`LITERAL`)."""
    return (type(x) is list or type(x) is tuple) and _numbers_only(x)


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
        if x.dtype is sys.modules["torch"].bfloat16:
            # numpy has no bfloat16: float32 holds every bfloat16 value exactly, and
            # wrap_like rounds the result back (the one place this conversion happens).
            return x.detach().cpu().float().numpy(), Kind(True, x.device, "bfloat16")
        try:
            arr = x.detach().cpu().numpy()
        except TypeError as exc:  # e.g. complex32
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
        return arr, (LITERAL if is_literal(x) else _NUMPY)
    raise TypeError(
        f"{argname} must be a numpy array, a torch tensor or a number, got {type(x).__name__}"
    )


def _ragged_message(x: list[Any] | tuple[Any, ...], argname: str, exc: ValueError) -> str:
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
    if is_literal(x):
        return (
            f"{argname} is a list of numbers that makes no array (np.asarray({argname}) fails): "
            f"entry 0 has shape {first}, entry {odd} has shape {shapes[odd]}; a list of "
            "numbers is one value, the same on every agent, so its rows must have one length"
        )
    return (
        f"{argname}: entries differ in shape (one per agent in simulation): entry 0 has shape "
        f"{first}, entry {odd} has shape {shapes[odd]}"
    )


def wrap_like(arr: np.ndarray, kind: Kind) -> Any:
    """Return ``arr`` as the type described by ``kind`` (zero-copy for CPU tensors).

    A value that came in as half precision is rounded (to nearest, ties to even) from
    float32 back to its dtype here, once.
    """
    if kind.half == "float16" and arr.dtype != _FLOAT16:
        arr = arr.astype(_FLOAT16)  # numpy rounds for torch float16 too: one rounding code
    if not kind.torch:
        return arr
    import torch

    tensor = torch.from_numpy(arr)
    if kind.half == "bfloat16":
        tensor = tensor.to(torch.bfloat16)
    return tensor if kind.device is None or kind.device.type == "cpu" else tensor.to(kind.device)


def upcast_half(arr: np.ndarray, kind: Kind) -> tuple[np.ndarray, Kind]:
    """Return a float16 ``arr`` as float32 and a ``kind`` that rounds results back.

    Ops that add values (averages and sums) call this so half precision accumulates in
    float32; any other array is returned unchanged.
    """
    if arr.dtype != _FLOAT16:
        return arr, kind
    return arr.astype(np.float32), Kind(kind.torch, kind.device, "float16")


def require_numbers(dtype: np.dtype, op: str, sums: bool = False) -> None:
    """Raise TypeError unless ``dtype`` holds numbers ``op`` can take.

    Every op moves booleans, integers and floats; an op that ``sums`` (``allreduce`` and
    its hierarchical forms) refuses booleans as well, in every mode alike: numpy would
    count them, MPI has no sum of its booleans and torch.distributed ors them, so no
    single meaning holds everywhere.
    """
    if dtype.kind not in "biuf":
        raise TypeError(f"{op}: x must hold numbers, got dtype {dtype}")
    if sums and dtype.kind == "b":
        raise TypeError(
            f"{op}: x holds booleans, which {op} does not sum; to count the agents "
            "with True, pass x.astype(np.int64)"
        )


def require_float(arr: np.ndarray, op: str, argname: str = "x") -> None:
    """Raise TypeError unless ``arr`` holds floating-point numbers (``op`` averages)."""
    if arr.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{op} averages, so {argname} must be float32 or float64 (or half precision: "
            f"float16, bfloat16), got {arr.dtype}; convert it first, e.g. "
            f"{argname}.astype(np.float32) or {argname}.float()"
        )


def require_window_float(dtype: str, op: str = "win_create", argname: str = "x") -> None:
    """Raise TypeError unless ``dtype`` (a dtype's name) is one a window can average.

    Windows take float32 and float64, and half precision (float16, bfloat16), which they
    hold and compute in float32 (see :class:`fogsim.backends._windows.WindowFormat`).
    """
    if dtype not in _WINDOW_DTYPES:
        raise TypeError(
            f"{op}: windows average, so {argname} must be float32 or float64, got {dtype}; half "
            f"precision (float16, bfloat16) works too, computed in float32; convert it "
            f"first, e.g. {argname}.astype(np.float32) or {argname}.float()"
        )


def check_name(name: Any) -> None:
    """Raise TypeError unless ``name`` is a string or None."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {type(name).__name__}")
