"""Argument rules of BlueFog's functions: weights, rank lists, in-place results.

BlueFog accepts integer weights, the older keywords ``neighbor_weights`` and
``send_neighbors``, and returns in-place variants (``allreduce_``); these helpers turn such
arguments into fogsim's and raise BlueFog's errors (:mod:`._errors`) for the rest.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import fogsim

from . import _errors


def _legacy_weights(
    op: str, src_weights: Any, dst_weights: Any, neighbor_weights: Any, send_neighbors: Any
) -> tuple[Any, Any]:
    """Return ``(src_weights, dst_weights)`` given BlueFog's earlier keywords, with a warning.

    ``neighbor_weights`` is ``src_weights``; ``send_neighbors``, a list of ranks, is
    ``dst_weights`` with weight 1.0 each (what BlueFog 0.2 did with it).
    """
    for old, new, value, current in (
        ("neighbor_weights", "src_weights", neighbor_weights, src_weights),
        ("send_neighbors", "dst_weights", send_neighbors, dst_weights),
    ):
        if value is None:
            continue
        if current is not None:
            raise TypeError(f"{op}: pass {new} or the deprecated {old}, not both")
        warnings.warn(
            f"{op}: {old} is deprecated (BlueFog renamed it); use {new}",
            DeprecationWarning,
            stacklevel=3,
        )
    if send_neighbors is not None:
        send_neighbors = _rank_list(op, send_neighbors)
    return (
        src_weights if neighbor_weights is None else neighbor_weights,
        dst_weights if send_neighbors is None else send_neighbors,
    )


def _rank_list(op: str, ranks: Any) -> list[Any]:
    """Return ``send_neighbors`` as a list of int ranks, or raise TypeError saying what it is."""
    if (
        isinstance(ranks, Mapping)
        or isinstance(ranks, str | bytes)
        or not hasattr(ranks, "__iter__")
    ):
        raise TypeError(
            f"{op}: send_neighbors must be a list of ranks, got {type(ranks).__name__} "
            "(for weights per destination use dst_weights={rank: weight})"
        )
    out = list(ranks)
    if out and all(isinstance(r, list | tuple) for r in out):  # stacked: one list per agent
        return [_rank_list(op, r) for r in out]
    for r in out:
        if not _is_integer(r):
            raise TypeError(f"{op}: send_neighbors must hold integer ranks, got {r!r}")
    return [int(r) for r in out]


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _float_scalar(value: Any) -> Any:
    """Return an integer weight as a float; anything else unchanged (fogsim validates it)."""
    return float(value) if _is_integer(value) else value


def _float_weights(weights: Any) -> Any:
    """Return ``{rank: weight}`` dicts (alone or stacked in a list) with float weights.

    Lists of ranks (``dst_weights`` meaning 1.0 each) and matrices pass unchanged.
    """
    if isinstance(weights, Mapping):
        return {r: _float_scalar(w) for r, w in weights.items()}
    if isinstance(weights, list | tuple) and any(isinstance(w, Mapping) for w in weights):
        return [_float_weights(w) if isinstance(w, Mapping) else w for w in weights]
    return weights


def _check_bool(value: Any, name: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _check_in_place(tensor: Any) -> None:
    # Duck-typed so that torch is never imported here.
    if not (isinstance(tensor, np.ndarray) or callable(getattr(tensor, "copy_", None))):
        raise TypeError(
            "in-place ops update tensor, so it must be a numpy array or a torch tensor, "
            f"got {type(tensor).__name__}"
        )


def _copy_into(tensor: Any, result: Any) -> Any:
    """Write ``result`` into ``tensor`` (a torch tensor or a numpy array); return ``tensor``."""
    if isinstance(tensor, np.ndarray):
        np.copyto(tensor, result)
    else:
        tensor.copy_(result)
    return tensor


def _in_place(tensor: Any, start: Callable[[], fogsim.Handle], name: str | None) -> fogsim.Handle:
    """Start an op with ``start()``; return a handle whose wait copies its result to ``tensor``."""
    _check_in_place(tensor)  # refuse a wrong type before the op starts, not at wait time
    handle = start()
    _errors.finished(handle)  # the returned handle carries the name from here
    outer = fogsim.Handle(
        handle.op + "_",
        finish=lambda: _copy_into(tensor, fogsim.wait(handle)),
        test=lambda: fogsim.poll(handle),
        name=handle.name,
    )
    _errors.started(handle.op + "_", name, lambda: outer)
    return outer
