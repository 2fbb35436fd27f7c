"""The plans of a simulator's recent per-call weights, found again instead of rebuilt.

A loop that passes the same weights at every step (``self_weight=0.5`` and the same
per-agent dicts, one matrix, or the topologies of a schedule) would otherwise read its
dicts, build a plan, check its kernel's arrays and sum its rows at every call: at n = 16
that is ten times the step's own sums. :class:`StepPlans` keeps the last few plans with a
snapshot of the arguments they were built from:

* a :class:`~fogsim.topology.Topology` (immutable) is its own snapshot, found by identity;
* a number, a numpy array (by its bytes), and a list or tuple of per-agent dicts, rank
  lists or numbers, all plain and nonzero, are copied, and found again by equality: equal
  nonzero numbers are the same float64 weights, so a plan found again gives the same bits
  as one built anew (a zero, whose sign a snapshot would have to keep, is not kept);
* anything else (sparse matrices, tensors, graphs) is built anew at every call.

Dicts passed again as the same objects are not even read: where CPython keeps a version
tag on every dict (PEP 509; read before 3.12, where it is deprecated), one that has not
changed since the snapshot is the same dict (``fogsim._core.dicts_unchanged``).

Only plans whose arguments passed every check are kept, so a call found here would have
passed them again.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ... import _core
from ...topology import Topology

__all__ = ["StepPlans"]

_MISS = object()  # an argument that is not snapshotted: never found again


class StepPlans:
    """The last few per-call weight arguments of ``neighbor_allreduce`` and their plans."""

    __slots__ = ("_topologies", "_values")

    #: plans kept for whole-step topologies (a one-peer schedule of 10^9 agents has 30)
    TOPOLOGIES = 64
    #: plans kept for other arguments
    VALUES = 8

    def __init__(self) -> None:
        self._topologies: dict[int, tuple[Topology, Any]] = {}
        self._values: list[tuple[Any, Any, Any, Any]] = []  # (sw, src, dst, plan), newest last

    def find(self, self_weight: Any, src_weights: Any, dst_weights: Any) -> Any:
        """Return the plan kept for these arguments, or None."""
        if self_weight is None and dst_weights is None and type(src_weights) is Topology:
            hit = self._topologies.get(id(src_weights))
            return hit[1] if hit is not None and hit[0] is src_weights else None
        for sw, src, dst, plan in reversed(self._values):
            if (
                (self_weight is None if sw is None else _same(self_weight, sw))
                and (dst_weights is None if dst is None else _same(dst_weights, dst))
                and _same(src_weights, src)
            ):
                return plan
        return None

    def keep(self, self_weight: Any, src_weights: Any, dst_weights: Any, plan: Any) -> None:
        """Keep ``plan`` for these arguments (checked ones), if they can be snapshotted."""
        if self_weight is None and dst_weights is None and type(src_weights) is Topology:
            if len(self._topologies) >= self.TOPOLOGIES:
                self._topologies.clear()
            self._topologies[id(src_weights)] = (src_weights, plan)
            return
        snaps = (_snapshot(self_weight), _snapshot(src_weights), _snapshot(dst_weights))
        if _MISS in snaps:
            return
        if len(self._values) >= self.VALUES:
            del self._values[0]
        self._values.append((*snaps, plan))

    def clear(self) -> None:
        """Forget every kept plan (the topology or the world changed)."""
        self._topologies.clear()
        self._values.clear()


def _plain(v: Any) -> bool:
    """Whether ``v`` is a nonzero real number that compares equal only to its own value."""
    return (
        isinstance(v, numbers.Real)
        and not isinstance(v, bool)
        and isinstance(v, int | float | np.integer | np.floating)
        and v != 0
        and math.isfinite(v)
    )


def _snapshot(value: Any) -> Any:
    """A copy of ``value`` that :func:`_same` can compare later, or ``_MISS``."""
    if value is None:
        return None
    if type(value) is Topology:
        return ("topology", value)
    if type(value) is np.ndarray:
        return ("array", value.dtype, value.shape, value.tobytes())
    if _plain(value):
        return ("number", value)
    if isinstance(value, list | tuple):  # fogsim.local's per-agent lists too
        copied: list[Any] = []
        for item in value:
            if type(item) is dict and all(type(k) is int and _plain(w) for k, w in item.items()):
                copied.append(dict(item))
            elif type(item) in (list, tuple) and all(type(k) is int for k in item):
                copied.append(type(item)(item))
            elif _plain(item):
                copied.append(item)
            else:
                return _MISS
        return ("sequence", type(value), copied, _core.dicts_watch(value))
    return _MISS


def _same(value: Any, snap: Any) -> bool:
    """Whether ``value`` is what ``snap`` (from :func:`_snapshot`) was taken of."""
    if snap is None:
        return value is None
    kind = snap[0]
    if kind == "number":  # (an ABC's isinstance costs more than the rest: floats first)
        if type(value) is float or type(value) is int:
            return bool(value == snap[1])
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == snap[1]
    if kind == "sequence":  # element by element, dicts by their items (C loops)
        if type(value) is not snap[1]:
            return False
        if snap[3] is not None and _core.dicts_unchanged(value, snap[3]):
            return True  # the same dict objects, none changed since: nothing to read
        try:
            return bool(value == snap[2])
        except (TypeError, ValueError):  # e.g. an array inside: not what was kept
            return False
    if kind == "topology":
        return value is snap[1]
    if kind == "array":
        return (
            type(value) is np.ndarray
            and value.dtype == snap[1]
            and value.shape == snap[2]
            and value.tobytes() == snap[3]
        )
    return False
