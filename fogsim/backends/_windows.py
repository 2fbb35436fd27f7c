"""The window part every backend has, and the argument rules and value formats they share.

Each backend's one-sided window ops (see :func:`fogsim.win_create`) are a
:class:`WindowPart` that the backend builds in its constructor (:class:`NoWindows` where
the runtime has none).

A window works on the caller's registered value in place, so each backend reads and writes it
through :func:`window_view`: a numpy view of the caller's own memory, and the
:class:`WindowFormat` saying how windows hold values of its dtype. Half precision follows the
rule of every other op (computed in float32, rounded once), the same bits in every mode.
"""

from __future__ import annotations

import abc
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from .._arrays import Kind, is_tensor, require_window_float, wrap_like

if TYPE_CHECKING:
    from .._types import ArrayLike, Ranks, SelfWeight, Weights

__all__ = [
    "NoWindows",
    "WindowFormat",
    "WindowPart",
    "check_flag",
    "check_update_args",
    "window_view",
]

_FLOAT32 = np.dtype(np.float32)


class WindowFormat:
    """How windows hold the values of one dtype: in float32 for half precision, else as is.

    ``raw`` (see :func:`window_view`) is a view of the caller's memory: the array itself for
    float32 and float64, its float16 elements, or the 16-bit patterns of a bfloat16 tensor
    (numpy has no bfloat16). Windows compute, and keep their buffers, exposed copies and
    messages, in :attr:`dtype`: float32 for half precision, which holds every half value
    exactly. So :meth:`decode` is exact and :meth:`encode` rounds each result once (to
    nearest, ties to even, by the same code as :func:`fogsim._arrays.wrap_like`).
    """

    __slots__ = ("label", "dtype", "kind")

    def __init__(self, label: str, dtype: np.dtype, kind: Kind) -> None:
        self.label = label  # the caller's dtype: "float16", "bfloat16", "float32", "float64"
        self.dtype = dtype  # what windows compute and keep buffers in
        self.kind = kind  # how a new result goes back out (its ``half`` set for half precision)

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """Return ``raw``'s values in :attr:`dtype`: ``raw`` itself, or an exact float32 copy."""
        if self.kind.half is None:
            return raw
        if self.kind.half == "bfloat16":  # a bfloat16 is the upper half of a float32
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return raw.astype(_FLOAT32)

    def encode(self, values: np.ndarray) -> np.ndarray:
        """Return ``values`` (in :attr:`dtype`) as elements of ``raw``, rounded once if half.

        Store them with ``raw[...] = fmt.encode(values)``; float32 and float64 pass as is.
        """
        if self.kind.half == "bfloat16":
            torch = sys.modules["torch"]
            rounded = torch.from_numpy(np.ascontiguousarray(values, _FLOAT32)).to(torch.bfloat16)
            out: np.ndarray = rounded.view(torch.int16).numpy()
            return out
        if self.kind.half == "float16":
            return values.astype(np.float16)  # numpy rounds, as wrap_like does
        return values

    def wrap(self, values: np.ndarray) -> Any:
        """Return ``values`` (in :attr:`dtype`) as a new array or tensor like the caller's."""
        return wrap_like(values, self.kind)

    def holder(self, raw: np.ndarray) -> Any:
        """Return an array, or a tensor for bfloat16, over ``raw`` that windows take as is."""
        if self.kind.half != "bfloat16":
            return raw
        torch = sys.modules["torch"]
        return torch.from_numpy(raw).view(torch.bfloat16)


def window_view(x: Any, op: str, argname: str = "x") -> tuple[np.ndarray, WindowFormat]:
    """Return a numpy view of ``x``'s own memory and how windows hold its dtype.

    Raise TypeError unless ``x`` is a numpy array or a CPU tensor of float16, bfloat16,
    float32 or float64 (windows average, and they work on ``x`` in place).
    """
    if isinstance(x, np.ndarray):
        label = x.dtype.name
    elif is_tensor(x):
        if x.device.type != "cpu":
            raise TypeError(f"{op}: {argname} is on {x.device}; windows work on CPU tensors")
        label = str(x.dtype).removeprefix("torch.")
    else:
        raise TypeError(
            f"{op}: {argname} must be a numpy array or a CPU tensor (windows work on it in "
            f"place), got {type(x).__name__}"
        )
    require_window_float(label, op, argname)
    half = label if label in ("float16", "bfloat16") else None
    if isinstance(x, np.ndarray):
        raw, kind = x, Kind(False, None, half)
    else:
        torch = sys.modules["torch"]
        t = x.detach()
        raw = t.view(torch.int16).numpy() if t.dtype is torch.bfloat16 else t.numpy()
        kind = Kind(True, x.device, half)
    return raw, WindowFormat(label, _FLOAT32 if half else raw.dtype, kind)


def check_flag(value: Any, argname: str, op: str) -> bool:
    """Return ``value`` if it is a bool, else raise TypeError naming the argument."""
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {argname} must be a bool, got {type(value).__name__}")
    return value


def check_update_args(
    self_weight: Any, neighbor_weights: Any, reset: Any, clone: Any, require_mutex: Any
) -> bool:
    """Check win_update's flags and weight pairing; return whether weights were given."""
    for flag, argname in ((reset, "reset"), (clone, "clone"), (require_mutex, "require_mutex")):
        check_flag(flag, argname, "win_update")
    if (self_weight is None) != (neighbor_weights is None):
        raise ValueError(
            "win_update: give self_weight and neighbor_weights together, or neither "
            "(the topology's weights)"
        )
    return self_weight is not None


class WindowPart(abc.ABC):
    """The part of a backend that runs the one-sided window ops (see :func:`fogsim.win_create`).

    Each runtime has its own (``SimWindowOps``, ``SpmdWindowOps``, and ``WindowOps`` of the
    distributed runtime over its one-sided transport), built in the backend's constructor
    from what it needs; :class:`Backend` forwards the public
    window ops to it, with the public functions' arguments (the ``*_nonblocking`` twins
    run the blocking op and return a completed handle).
    """

    @abc.abstractmethod
    def win_create(self, x: ArrayLike, name: str, zero_init: bool) -> bool: ...
    @abc.abstractmethod
    def win_free(self, name: str | None) -> bool: ...
    @abc.abstractmethod
    def win_names(self) -> list[str]: ...
    @abc.abstractmethod
    def win_put(
        self,
        x: ArrayLike,
        name: str,
        self_weight: SelfWeight,
        dst_weights: Weights,
        require_mutex: bool,
    ) -> bool: ...
    @abc.abstractmethod
    def win_accumulate(
        self,
        x: ArrayLike,
        name: str,
        self_weight: SelfWeight,
        dst_weights: Weights,
        require_mutex: bool,
    ) -> bool: ...
    @abc.abstractmethod
    def win_get(self, name: str, src_weights: Weights, require_mutex: bool) -> bool: ...
    @abc.abstractmethod
    def win_update(
        self,
        name: str,
        self_weight: SelfWeight,
        neighbor_weights: Weights,
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any: ...
    @abc.abstractmethod
    def win_update_then_collect(self, name: str, require_mutex: bool) -> Any: ...
    @abc.abstractmethod
    def win_mutex(self, name: str, for_self: bool, ranks: Ranks) -> Any: ...
    @abc.abstractmethod
    def get_win_version(self, name: str) -> Any: ...
    @abc.abstractmethod
    def win_associated_p(self, name: str) -> Any: ...
    @abc.abstractmethod
    def set_win_ops_with_associated_p(self, enabled: bool) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free what the part holds (the backend is closing)."""


class NoWindows(WindowPart):
    """The window part of a runtime without one-sided ops: every op refuses, naming it."""

    def __init__(self, backend: str) -> None:
        self._backend = backend

    def _refuse(self, op: str) -> NoReturn:
        raise ValueError(f"{op}: the {self._backend} backend has no window ops")

    def win_names(self) -> list[str]:
        return []

    def win_create(self, x: Any, name: str, zero_init: bool) -> bool:
        return self._refuse("win_create")

    def win_free(self, name: str | None) -> bool:
        return self._refuse("win_free")

    def win_put(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._refuse("win_put")

    def win_accumulate(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._refuse("win_accumulate")

    def win_get(self, name: str, src_weights: Any, require_mutex: bool) -> bool:
        return self._refuse("win_get")

    def win_update(
        self,
        name: str,
        self_weight: Any,
        neighbor_weights: Any,
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any:
        return self._refuse("win_update")

    def win_update_then_collect(self, name: str, require_mutex: bool) -> Any:
        return self._refuse("win_update_then_collect")

    def win_mutex(self, name: str, for_self: bool, ranks: Any) -> Any:
        return self._refuse("win_mutex")

    def get_win_version(self, name: str) -> Any:
        return self._refuse("get_win_version")

    def win_associated_p(self, name: str) -> Any:
        return self._refuse("win_associated_p")

    def set_win_ops_with_associated_p(self, enabled: bool) -> None:
        self._refuse("set_win_ops_with_associated_p")
