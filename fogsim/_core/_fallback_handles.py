"""Pure Python twins of ``_handles.pyx``: handles of nonblocking ops and their table.

Used when the extension is not compiled (see ``_handles.pyx`` for the contracts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Handle", "HandleTable"]


class Handle:
    """A pending operation; :func:`fogsim.wait` returns its result, :func:`fogsim.poll` tests it.

    A backend that computes eagerly creates a completed handle with :meth:`completed`; one
    that overlaps communication passes ``finish`` (blocks and returns the result) and
    ``test`` (returns whether ``finish`` would return at once). A handle is released by
    :meth:`wait`: waiting or polling it again raises ``ValueError``.
    """

    __slots__ = ("op", "name", "_finish", "_test", "_result", "_done", "_released", "_error")

    def __init__(
        self,
        op: str,
        finish: Callable[[], Any] | None,
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> None:
        self.op = op
        self.name = name
        self._finish: Callable[[], Any] | None = finish
        self._test = test
        self._result: Any = None
        self._done = False
        self._released = False
        self._error: Exception | None = None

    @classmethod
    def completed(cls, op: str, result: Any, name: str | None = None) -> Handle:
        """Return a handle whose operation has already finished with ``result``."""
        handle = cls(op, finish=lambda: result, name=name)
        handle._result, handle._done, handle._finish = result, True, None
        return handle

    def _check_live(self) -> None:
        if self._released:
            raise ValueError(f"{self!r} was already waited on; wait() releases a handle")

    def poll(self) -> bool:
        """Return True when :meth:`wait` would return without blocking."""
        self._check_live()
        if self._done or self._error is not None:
            return True
        return True if self._test is None else bool(self._test())

    def complete(self) -> None:
        """Finish the operation (blocking) and keep its result for :meth:`wait`."""
        if self._done:
            return
        if self._error is not None:  # it failed before: the same error, not a second try
            raise self._error
        finish = self._finish
        if finish is None:  # not done, so started with a finish: cannot happen
            raise RuntimeError(f"{self!r} has nothing to finish it")
        try:
            self._result = finish()
        except Exception as exc:
            self._error = exc
            raise
        self._done, self._finish, self._test = True, None, None

    def wait(self) -> Any:
        """Block until the operation finishes, release the handle, and return the result."""
        self._check_live()
        self.complete()
        self._released = True
        result, self._result = self._result, None
        return result

    def __repr__(self) -> str:
        state = "released" if self._released else "done" if self._done else "pending"
        label = f" name={self.name!r}" if self.name else ""
        return f"<fogsim.Handle {self.op}{label} {state}>"


class HandleTable:
    """The in-flight operations of one world; a handle leaves the table when completed.

    Owned by a backend instance (never a module global), so ``shutdown()`` can complete
    what is still in flight and a second world keeps its own handles.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[int, Handle] = {}

    def start(
        self,
        op: str,
        finish: Callable[[], Any],
        test: Callable[[], bool] | None = None,
        name: str | None = None,
    ) -> Handle:
        """Register a pending operation and return its handle."""
        holder: list[Handle] = []

        def release() -> Any:
            try:
                return finish()
            finally:
                self._pending.pop(id(holder[0]), None)

        handle = Handle(op, release, test, name)
        holder.append(handle)
        self._pending[id(handle)] = handle
        return handle

    def drain(self) -> None:
        """Complete every pending operation (results stay in their handles for wait()).

        An operation that fails is dropped from the table; its error is raised by wait().
        """
        for handle in list(self._pending.values()):
            try:
                handle.complete()
            except Exception:  # noqa: S112 - wait() on the handle raises it again
                continue

    def __len__(self) -> int:
        return len(self._pending)
