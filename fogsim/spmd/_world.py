"""The meeting point of N agent threads: every op is a rendezvous executed once for all.

Each agent thread calls :meth:`World.meet` with the op it is at and its own arguments. The
last agent to arrive checks that every agent called the same op (same name, same op
``name=``), runs the op's ``execute`` once with every agent's arguments in rank order (on
the simulator of size N, under the world's lock, while the others wait), and hands agent
``i`` entry ``i`` of the result. An error raised by ``execute`` is raised in every agent,
as the MPI runtime raises a refused call on every rank.

Nothing waits forever: an agent that fails stops the others at their next op (or at once
if they are waiting), an agent that returns while others wait in an op ends that op with
an :class:`SpmdError`, and the optional ``timeout`` ends a wait that lasts too long.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _settings
from ._errors import SpmdAborted, SpmdError, SpmdTimeout, agents, groups
from ._warnings import AgentWarnings

if TYPE_CHECKING:
    from .._types import TopologyLike

__all__ = ["World"]

#: ``execute(world, args)``: every agent's arguments in rank order -> one result per agent.
Execute = Callable[["World", Sequence[Any]], Sequence[Any]]


class World:
    """The shared state of one SPMD run of ``size`` agent threads.

    ``sim`` is the simulator of ``size`` agents that runs every op (replaced at every
    ``fogsim.init()`` the agents make); ``windows`` maps a window name to the agents'
    registered arrays (see :mod:`fogsim.spmd._windows`). Only :meth:`meet`'s ``execute``
    functions touch ``sim`` and ``windows``, and only one runs at a time.
    """

    def __init__(
        self,
        size: int,
        local_size: int | None = None,
        topology: TopologyLike | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        settings: _settings.Settings | None = None,
    ) -> None:
        self.size = size
        self.local_size = local_size
        self.topology = topology  # what init() without a topology uses (None: exponential-2)
        self.seed = seed
        self.timeout = timeout
        self.settings = settings if settings is not None else _settings.load()
        self.sim: Any = None
        self.windows: dict[str, Any] = {}
        #: the agents' warnings, each printed once (flushed whenever the agents meet)
        self.warnings = AgentWarnings(size)
        self._lock = threading.Lock()
        self._gates = [threading.Lock() for _ in range(size)]
        for gate in self._gates:
            gate.acquire()
        self._waiting: set[int] = set()  # ranks blocked at their gate
        self._arrived: dict[int, tuple[str, Any, Execute]] = {}  # rank -> (label, args, execute)
        self._generation = 0
        self._outcome: tuple[bool, Any, int] = (True, None, -1)  # (ok, results or error, by)
        self._finished: set[int] = set()
        self._stop: tuple[int, BaseException] | None = None  # the first failure
        self._early: str | None = None  # why no op can complete once an agent returned

    # -- the rendezvous -----------------------------------------------------------------------
    # Each waiting agent blocks on a lock of its own (its gate, held while it is not waiting)
    # that whoever ends its wait releases: the last arrival after running the op, or fail()
    # and finish(). Waking then needs no shared lock, so N agents wake in parallel.
    def meet(self, rank: int, label: str, args: Any, execute: Execute) -> Any:
        """Wait until every agent called an op; return this agent's share of its result.

        ``label`` names the op as agents must agree on it, e.g. ``"allreduce(name='g')"``.
        """
        with self._lock:
            self._check(rank, label)
            self._arrived[rank] = (label, args, execute)
            generation = self._generation
            last = len(self._arrived) == self.size
            if last:
                self._execute(rank)
            else:
                self._waiting.add(rank)
        if not last:
            self._block(rank, label, generation)
        ok, value, by = self._outcome  # still this op's: the next needs this agent too
        if ok:
            return value[rank]
        if by == rank:
            raise value
        raise _copy(value)

    def _execute(self, by: int) -> None:
        """Run the op all agents arrived at; ``by`` is the last to arrive (under the lock)."""
        entries = [self._arrived[r] for r in range(self.size)]
        self._arrived.clear()
        labels = [label for label, _, _ in entries]
        try:
            found = groups(labels)
            if len(found) > 1:
                parts = [f"{agents(ranks)} called {label}" for label, ranks in found]
                joined = " but ".join(parts) if len(parts) == 2 else "; ".join(parts)
                raise ValueError(
                    f"fogsim.spmd: the agents must call the same ops in the same order, "
                    f"but {joined}"
                )
            self.warnings.in_op = True
            try:
                results = entries[0][2](self, [args for _, args, _ in entries])
            finally:
                self.warnings.in_op = False
            self._outcome = (True, results, by)
        except BaseException as exc:  # raised in every agent (a copy in the others)
            self._outcome = (False, exc, by)
        self._generation += 1
        self.warnings.flush()  # every agent got here: a warning only some raised is complete
        self._release_waiting()

    def _release_waiting(self) -> None:
        for r in self._waiting:
            self._gates[r].release()
        self._waiting.clear()

    def _block(self, rank: int, label: str, generation: int) -> None:
        """Wait at ``rank``'s gate until the op ran (return) or cannot run (raise)."""
        gate = self._gates[rank]
        released = gate.acquire() if self.timeout is None else gate.acquire(timeout=self.timeout)
        if released and self._generation != generation:
            return  # the op ran (the generation moves on before the gates open)
        with self._lock:
            if not released and rank not in self._waiting:
                gate.acquire()  # released just after the timeout: take the gate back
            self._waiting.discard(rank)
            if self._generation != generation:
                return
            try:
                self._check(rank, label)  # stopped by a failure or an agent that returned
                raise self._timed_out(rank, label)
            finally:
                self._arrived.pop(rank, None)

    # -- stopping -------------------------------------------------------------------------------
    def _check(self, rank: int, label: str) -> None:
        """Raise when the op ``rank`` is at can never complete."""
        if self._stop is not None:
            failed, exc = self._stop
            who = (
                "the run was interrupted"
                if failed < 0
                else (f"agent {failed} raised {type(exc).__name__}: {exc}")
            )
            raise SpmdAborted(f"fogsim.spmd: agent {rank} stopped in {label}: {who}", failed)
        if self._finished:
            if self._early is None:  # worded once, so every agent reports the same
                self._early = self._early_message({rank: label})
            raise SpmdError(self._early)

    def _early_message(self, arriving: dict[int, str]) -> str:
        waiting = {r: entry[0] for r, entry in self._arrived.items()} | arriving
        ranks = sorted(waiting)
        parts = []
        for op, positions in groups([waiting[r] for r in ranks]):
            who = [ranks[k] for k in positions]
            parts.append(f"{agents(who)} {'waits' if len(who) == 1 else 'wait'} in {op}")
        running = [r for r in range(self.size) if r not in waiting and r not in self._finished]
        also = f" ({agents(running)} still running)" if running else ""
        return (
            f"fogsim.spmd: {agents(self._finished)} finished while {', '.join(parts)}{also}; "
            "every agent must call the same ops"
        )

    def _timed_out(self, rank: int, label: str) -> SpmdTimeout:
        missing = [
            r for r in range(self.size) if r not in self._arrived and r not in self._finished
        ]
        return SpmdTimeout(
            f"fogsim.spmd: agent {rank} waited {self.timeout:g} s in {label} for "
            f"{agents(missing)} (still running, never reached it); raise the run's timeout "
            "(timeout=, or FOGSIM_STALL_TIMEOUT) if an agent computes that long between ops"
        )

    def finish(self, rank: int) -> None:
        """Record that ``rank``'s main function returned; end the ops others wait in."""
        with self._lock:
            self._finished.add(rank)
            if self._arrived and self._early is None:
                self._early = self._early_message({})
            self._release_waiting()

    def fail(self, rank: int, exc: BaseException) -> None:
        """Record that ``rank`` raised ``exc``; every agent stops at its next op (or now)."""
        with self._lock:
            if self._stop is None:
                self._stop = (rank, exc)
            self._release_waiting()

    def interrupt(self, exc: BaseException) -> None:
        """Stop every agent (the caller of the run was interrupted)."""
        self.fail(-1, exc)


def _copy(exc: BaseException) -> BaseException:
    """Return a fresh exception like ``exc`` for another agent to raise."""
    try:
        new = copy.copy(exc)
    except Exception:  # an exception class that cannot be rebuilt from its args
        return SpmdError(f"{type(exc).__name__}: {exc}")
    new.__traceback__ = None
    return new
