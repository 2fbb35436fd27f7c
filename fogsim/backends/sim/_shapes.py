"""A cheap guard of the simulator: per-agent values that grew an agent axis.

Per-agent code that is not batch-friendly, ``A.T @ (A @ w - b)`` with stacked ``A`` of
(n, 4, 4) and ``w`` of (n, 4), broadcasts over the agent axis: each agent's value becomes
(n, 4) instead of (4,). The simulator notices when an op receives a stacked value whose
per-agent shape is ``(n, *s)`` where ``s`` is

* a per-agent shape that :func:`fogsim.local` made (warned once per such shape), or
* the per-agent shape of the call before the last from the same line of user code, the
  last call having had ``(n, *s)`` too (warned once per line): values made without
  ``local()`` (``np.zeros((n, d))``) that grew an agent axis in a loop and kept it.

Warnings name the call site (the first frame outside fogsim). A call site is the call's
instruction in the user's code (two calls on one line are two sites). The cost per op is a
jump over fogsim's own frames to the user's and a dictionary look-up (about 0.35
microsecond; a line whose calls pass one shape writes nothing). Other shape
changes at one line are normal (a loop over a model's parameters) and pass. A value that
``local()`` itself made is never taken for a broadcast one; one computed from it with the
same shape (with 4 agents and 4 x 4 matrices, ``2 * A`` looks like a broadcast ``w``) is,
once: ``fogrun --check-modes`` tells for sure.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from types import CodeType, FrameType
from typing import Any

from ..._callsite import INSIDE, inside, user_stacklevel

__all__ = ["AgentShapeWarning", "ShapeGuard"]

_getframe = sys._getframe


class AgentShapeWarning(UserWarning):
    """A simulated op got per-agent values that look broadcast over the agent axis."""


class ShapeGuard:
    """The per-agent shapes ``local()`` made, and the stacked shapes ops have seen."""

    def __init__(self, n: int) -> None:
        self._n = n
        self.local_shapes: set[tuple[int, ...]] = set()
        self._made: dict[int, Any] = {}  # id -> weak reference of the values local() made
        self._seen: set[tuple[int, ...]] = set()
        # (code, line) of a user's call -> the per-agent shapes of its last two calls
        self._sites: dict[tuple[int, int], tuple[Any, Any, Any]] = {}  # see _check_site
        self._warned_sites: set[tuple[int, int]] = set()

    def made(self, value: Any) -> None:
        """Note a value ``local()`` made (an array or a tensor, agents stacked)."""
        self.local_shapes.add(tuple(value.shape[1:]))
        try:
            self._made[id(value)] = weakref.ref(value)
        except TypeError:  # no weak references to this type: shapes only
            pass

    def check(self, value: Any, shape: tuple[int, ...], op: str) -> None:
        """Warn once if an op's stacked input has a per-agent shape ``(n, *s)``, ``s`` a shape
        ``local()`` made or one an earlier call from the same line had."""
        per = shape[1:]
        if self._n > 1:
            # The user's frame (:func:`~fogsim._callsite.user_frame`, inlined: every stacked
            # op comes here). Our caller (the op's stacking) and its caller (the op) are
            # fogsim's own: jumped over, not walked (a frame walked costs a frame object).
            frame: FrameType | None = _getframe(3)
            while frame is not None:
                filename = frame.f_code.co_filename
                known = INSIDE.get(filename)
                if not (inside(filename) if known is None else known):
                    # The call's instruction stands for its line (reading f_lineno scans the
                    # code's line table), and the code object's id for the code (a code
                    # object hashes its contents at every look-up).
                    code = frame.f_code
                    key = (id(code), frame.f_lasti)
                    entry = self._sites.get(key)
                    # a line that passes values of one shape, call after call: nothing new
                    if entry is None or entry[0] is not code or entry[2] != per or entry[1] != per:
                        self._check_site(frame, code, key, entry, per, op)
                    break
                frame = frame.f_back
        if shape in self._seen:
            return
        # one agent: an axis of length 1 is no sign of broadcasting
        if self._n == 1 or not per or per[0] != self._n or per[1:] not in self.local_shapes:
            self._seen.add(shape)
            return
        ref = self._made.get(id(value))
        if ref is not None and ref() is value:  # local()'s own value: its shape is meant
            return
        self._seen.add(shape)
        from ..._callsite import call_site

        warnings.warn(
            f"{op} at {call_site()}: each agent's value has shape {per}, and fogsim.local "
            f"made values of {per[1:]}: per-agent code that is not batch-friendly broadcasts "
            "over the agent axis (e.g. A.T @ (A @ w - b) on stacked A and w). Write it with "
            "batched operations or wrap it in fs.vmap; fogrun --check-modes -np N python "
            "script.py compares the simulated run with per-agent code op by op",
            AgentShapeWarning,
            stacklevel=user_stacklevel(),
        )

    def _check_site(
        self,
        frame: FrameType,
        code: CodeType,
        key: tuple[int, int],
        entry: tuple[Any, Any, Any] | None,
        per: tuple[int, ...],
        op: str,
    ) -> None:
        # the entry keeps the code, so a reused id starts afresh
        older, last = (None, None) if entry is None or entry[0] is not code else entry[1:]
        self._sites[key] = (code, last, per)
        # s, then (n, *s) twice in a row: the value grew an agent axis and kept it (a loop over
        # a model's parameters changes shape at every call and does not repeat one this way)
        if (
            per == last
            and older is not None
            and per
            and per[0] == self._n
            and per[1:] == older
            and key not in self._warned_sites
        ):
            self._warned_sites.add(key)
            self._seen.add((self._n, *per))  # one warning for this value, not two
            where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
            warnings.warn(
                f"{op} at {where}: each agent's value has shape {per} here, {older} at an "
                "earlier call from this line: the values grew an agent axis, as per-agent "
                "code that is not batch-friendly does (e.g. A.T @ (A @ w - b) on stacked A "
                "and w). Write it with batched operations or wrap it in fs.vmap; fogrun "
                "--check-modes -np N python script.py compares the simulated run with "
                "per-agent code op by op",
                AgentShapeWarning,
                stacklevel=user_stacklevel(),
            )
