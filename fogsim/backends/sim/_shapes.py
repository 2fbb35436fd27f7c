"""A cheap guard of the simulator: per-agent values that grew an agent axis.

Per-agent code that is not batch-friendly, ``A.T @ (A @ w - b)`` with stacked ``A`` of
(n, 4, 4) and ``w`` of (n, 4), broadcasts over the agent axis: each agent's value becomes
(n, 4) instead of (4,). The simulator notices when an op receives a stacked value whose
per-agent shape is ``(n, *s)`` for a shape ``s`` that :func:`fogsim.local` made, and warns
once per such shape, naming the call site. Each distinct stacked shape is checked once
(one set look-up per op afterwards). A value that ``local()`` itself made is never taken for
a broadcast one; one computed from it with the same shape (with 4 agents and 4 x 4 matrices,
``2 * A`` looks like a broadcast ``w``) is, once: ``fogrun --check-modes`` tells for sure.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

__all__ = ["AgentShapeWarning", "ShapeGuard"]


class AgentShapeWarning(UserWarning):
    """A simulated op got per-agent values that look broadcast over the agent axis."""


class ShapeGuard:
    """The per-agent shapes ``local()`` made, and the stacked shapes ops have seen."""

    def __init__(self, n: int) -> None:
        self._n = n
        self.local_shapes: set[tuple[int, ...]] = set()
        self._made: dict[int, Any] = {}  # id -> weak reference of the values local() made
        self._seen: set[tuple[int, ...]] = set()

    def made(self, value: Any) -> None:
        """Note a value ``local()`` made (an array or a tensor, agents stacked)."""
        self.local_shapes.add(tuple(value.shape[1:]))
        try:
            self._made[id(value)] = weakref.ref(value)
        except TypeError:  # no weak references to this type: shapes only
            pass

    def check(self, value: Any, shape: tuple[int, ...], op: str) -> None:
        """Warn once if an op's stacked input has a per-agent shape ``(n, *local shape)``."""
        if shape in self._seen:
            return
        per = tuple(shape[1:])
        # one agent: an axis of length 1 is no sign of broadcasting
        if self._n == 1 or not per or per[0] != self._n or per[1:] not in self.local_shapes:
            self._seen.add(shape)
            return
        ref = self._made.get(id(value))
        if ref is not None and ref() is value:  # local()'s own value: its shape is meant
            return
        self._seen.add(shape)
        from ..._callsite import call_site, user_stacklevel

        warnings.warn(
            f"{op} at {call_site()}: each agent's value has shape {per}, and fogsim.local "
            f"made values of {per[1:]}: per-agent code that is not batch-friendly broadcasts "
            "over the agent axis (e.g. A.T @ (A @ w - b) on stacked A and w). Write it with "
            "batched operations or wrap it in fs.vmap; fogrun --check-modes -np N python "
            "script.py compares the simulated run with per-agent code op by op",
            AgentShapeWarning,
            stacklevel=user_stacklevel(),
        )
