"""Argument rules the window ops of every backend share (see fogsim.win_create)."""

from __future__ import annotations

from typing import Any

__all__ = ["check_flag", "check_update_args"]


def check_flag(value: Any, argname: str, op: str) -> bool:
    """Return ``value`` if it is a bool, else raise TypeError naming the argument."""
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {argname} must be a bool, got {type(value).__name__}")
    return value


def check_update_args(self_weight: Any, neighbor_weights: Any, reset: Any, clone: Any,
                      require_mutex: Any) -> bool:  # fmt: skip
    """Check win_update's flags and weight pairing; return whether weights were given."""
    for flag, argname in ((reset, "reset"), (clone, "clone"), (require_mutex, "require_mutex")):
        check_flag(flag, argname, "win_update")
    if (self_weight is None) != (neighbor_weights is None):
        raise ValueError(
            "win_update: give self_weight and neighbor_weights together, or neither "
            "(the topology's weights)"
        )
    return self_weight is not None
