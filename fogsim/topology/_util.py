"""Argument validation shared by the topology modules."""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["check_agent", "check_nonnegative_int", "check_positive_int", "readonly"]


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` as an int, refusing anything that is not an integer >= 1."""
    number = _as_int(value, name)
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {number}")
    return number


def check_nonnegative_int(value: object, name: str) -> int:
    """Return ``value`` as an int, refusing anything that is not an integer >= 0."""
    number = _as_int(value, name)
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {number}")
    return number


def check_agent(value: object, size: int, name: str = "agent") -> int:
    """Return ``value`` as an agent index, refusing anything outside ``0..size-1``."""
    number = _as_int(value, name)
    if not 0 <= number < size:
        raise ValueError(f"{name} {number} is out of range for {size} agents")
    return number


def readonly(array: np.ndarray) -> np.ndarray:
    """Mark ``array`` read-only (cached arrays are shared) and return it."""
    array.flags.writeable = False
    return array


def _as_int(value: object, name: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
