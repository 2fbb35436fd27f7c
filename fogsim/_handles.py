"""Handles returned by the ``*_nonblocking`` ops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Handle"]


class Handle:
    """A pending operation; :func:`fogsim.wait` returns its result, :func:`fogsim.poll` tests it.

    A backend that computes eagerly creates a completed handle with :meth:`completed`; one
    that overlaps communication passes ``finish`` (blocks and returns the result) and
    ``test`` (returns whether ``finish`` would return at once).
    """

    __slots__ = ("op", "name", "_finish", "_test", "_result", "_done")

    def __init__(
        self,
        op: str,
        finish: Callable[[], Any],
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> None:
        self.op = op
        self.name = name
        self._finish = finish
        self._test = test
        self._result: Any = None
        self._done = False

    @classmethod
    def completed(cls, op: str, result: Any, name: str | None = None) -> Handle:
        """Return a handle whose operation has already finished with ``result``."""
        handle = cls(op, finish=lambda: result, name=name)
        handle._result, handle._done, handle._finish = result, True, None
        return handle

    def poll(self) -> bool:
        """Return True when :meth:`wait` would return without blocking."""
        if self._done:
            return True
        return True if self._test is None else bool(self._test())

    def wait(self) -> Any:
        """Block until the operation finishes and return its result (again on later calls)."""
        if not self._done:
            self._result = self._finish()
            self._done, self._finish, self._test = True, None, None
        return self._result

    def __repr__(self) -> str:
        state = "done" if self._done else "pending"
        label = f" name={self.name!r}" if self.name else ""
        return f"<fogsim.Handle {self.op}{label} {state}>"
