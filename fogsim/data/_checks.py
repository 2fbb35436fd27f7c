"""Argument checks shared by fogsim.data's functions: each error names the argument."""

from __future__ import annotations

import numbers

import numpy as np
import numpy.typing as npt

__all__ = ["as_labels", "check_count", "check_n_samples", "check_positive", "check_weights"]


def as_labels(labels: npt.ArrayLike, name: str = "labels") -> np.ndarray:
    """Return ``labels`` as a 1-D int64 array of class ids ``>= 0``, or raise naming ``name``."""
    if isinstance(labels, str | bytes):
        raise TypeError(
            f"{name} must be an array of integer classes, got a {type(labels).__name__}"
        )
    a = np.asarray(labels)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one class per sample), got shape {a.shape}")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a) | (a != np.round(a))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name} must be integer classes, got {a[i]!r} at index {i}")
    elif a.dtype.kind not in "iub":
        raise TypeError(
            f"{name} must be integer classes, got dtype {a.dtype} "
            f"(map other labels with np.unique({name}, return_inverse=True)[1])"
        )
    out = a.astype(np.int64)
    if out.size and out.min() < 0:
        i = int(np.argmin(out))
        raise ValueError(f"{name} must be classes >= 0, got {out[i]} at index {i}")
    return out


def check_n_samples(value: int | npt.ArrayLike) -> int:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_count(value, "n_samples_or_labels", minimum=0)
    if isinstance(value, str | bytes | bool | numbers.Number):
        raise TypeError(
            f"n_samples_or_labels must be an int or a 1-D array, got {type(value).__name__}"
        )
    shape = np.shape(value)
    if len(shape) != 1:
        raise ValueError(f"n_samples_or_labels must be an int or a 1-D array, got shape {shape}")
    return int(shape[0])


def check_count(value: object, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not (np.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {v}")
    return v


def check_weights(sizes: npt.ArrayLike, agents: int) -> np.ndarray:
    w = np.asarray(sizes)
    if w.dtype.kind not in "iuf":
        raise TypeError(f"sizes must be numbers, got dtype {w.dtype}")
    w = w.astype(np.float64)
    if w.shape != (agents,):
        raise ValueError(f"sizes must hold one number per agent ({agents}), got shape {w.shape}")
    if not (np.all(np.isfinite(w)) and np.all(w > 0)):
        raise ValueError("sizes must be finite and > 0")
    return w
