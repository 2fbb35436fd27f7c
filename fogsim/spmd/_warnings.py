"""One warning, once: a warning the agent threads raise alike prints once, with their ranks.

During an SPMD run (:func:`fogsim.spmd.run`) ``warnings.showwarning`` is replaced, so that a
warning Python would print (its filters respected: ``-W``, ``simplefilter``, once per line by
default, fogsim's own ``WeightWarning`` included) is held, grouped with the same warning
(category, message, file and line) of the other agents, and printed once as Python prints
it, with the ranks that raised it (an agent's n-th report of a warning grouped with the n-th
of the others)::

    script.py:6: UserWarning (ranks 0-3): weights look odd
      warnings.warn("weights look odd", UserWarning)

as ``fogrun`` prints the warnings of MPI ranks. A group is printed as soon as every agent
raised it, else when the agents next meet in an op (a warning only some agents raise before
that op), when no agent added to it for ``WINDOW`` seconds (agents that do not meet again
soon) and at the end of the run. An op runs once for all agents, in the thread of the last
to arrive: what it warns (``WeightWarning`` of weights passed to it, ...) is every agent's.
The agents share the process's warning filters: one agent's ``warnings.simplefilter`` acts
on all of them, and resets the once-per-line memory of every agent, as it would in one
process. A warning raised outside the agent threads, or written
to a file of its own, is printed at once, as before.
"""

from __future__ import annotations

import sys
import threading
import time
import warnings
from typing import Any, TextIO

from .. import _context
from ..run._warnings import WINDOW, describe, format_group

__all__ = ["AgentWarnings"]


def _printed_by_python() -> bool:
    """Whether a warning shown now is printed by Python's own code, not recorded or
    displayed by someone else's."""
    impl = getattr(warnings, "_showwarnmsg_impl", None)
    original = getattr(warnings, "_showwarning_orig", warnings.showwarning)
    return warnings.showwarning is original and getattr(impl, "__module__", None) == "warnings"


class AgentWarnings:
    """Hold the warnings of ``size`` agent threads; print each group once (see above)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        # (warning, n): the agents' n-th report of that warning, with their ranks
        self._groups: dict[tuple[Any, ...], tuple[dict[str, Any], list[int]]] = {}
        self._seen: dict[tuple[Any, ...], int] = {}  # (rank, warning): how often reported
        self._latest: dict[tuple[Any, ...], float] = {}  # group -> when it last grew
        self._previous: Any = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        #: set while an op runs once for all agents: what it warns, it warns for all of them
        self.in_op = False

    def install(self) -> None:
        """Take over ``warnings.showwarning`` until :meth:`uninstall`, unless warnings are
        not printed the default way (recorded by ``catch_warnings(record=True)`` or
        ``pytest.warns``, or shown by a ``showwarning`` of the caller's): they stay so."""
        if not _printed_by_python():
            return
        self._previous = warnings.showwarning
        warnings.showwarning = self._show
        self._timer = threading.Thread(target=self._wait, daemon=True, name="fogsim-warnings")
        self._timer.start()

    def uninstall(self) -> None:
        """Print what is held and give ``warnings.showwarning`` back."""
        if warnings.showwarning == self._show:
            warnings.showwarning = self._previous
        self._stop.set()
        if self._timer is not None:
            self._timer.join(5)
        self.flush()

    def _wait(self) -> None:
        """Print the groups no agent added to for ``WINDOW`` seconds."""
        while not self._stop.wait(0.1):
            now = time.monotonic()
            with self._lock:
                for key, latest in list(self._latest.items()):
                    if now - latest >= WINDOW:
                        self._print(*self._groups.pop(key))
                        del self._latest[key]

    def _show(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        agent = _context.spmd_agent()
        if agent is None or file is not None:
            self._previous(message, category, filename, lineno, file, line)
            return
        warning = (category, str(message), filename, lineno)
        with self._lock:
            nth = self._seen.get((agent.rank, warning), 0)
            self._seen[(agent.rank, warning)] = nth + 1
            key = (warning, nth)
            if key not in self._groups:
                self._groups[key] = (describe(message, category, filename, lineno, line), [])
            report, ranks = self._groups[key]
            ranks[:] = range(self._size) if self.in_op else [*ranks, agent.rank]
            self._latest[key] = time.monotonic()
            if len(ranks) == self._size:
                del self._groups[key], self._latest[key]
                self._print(report, ranks)

    def flush(self) -> None:
        """Print every group held (the agents met in an op, or the run ended)."""
        with self._lock:
            groups, self._groups = self._groups, {}
            self._latest.clear()
            for report, ranks in groups.values():
                self._print(report, ranks)

    def _print(self, report: dict[str, Any], ranks: list[int]) -> None:
        try:
            sys.stderr.write(format_group(report, sorted(ranks)))
            sys.stderr.flush()
        except (AttributeError, OSError):  # no stderr to write to: as Python, say nothing
            pass
