"""Stall detection: a rank that waits too long in a collective says who is missing.

A decentralized program hangs when one rank never reaches a collective the others wait
in (a skipped call, a different number of iterations, a rank stuck computing). Instead
of blocking forever, a rank's wait polls its request; after ``FOGSIM_STALL_TIMEOUT``
seconds (default 60) it asks every other rank where it is, prints which ranks have not
reached the op and what they are doing, and raises :class:`StallError` (or, with
``FOGSIM_STALL_ACTION=warn``, only prints, once, and keeps waiting).

Ranks answer such questions while they wait themselves, so the report can say "rank 2
waits in neighbor_allreduce" or "rank 3 did not answer" (computing outside fogsim, hung
in another library, or dead). The op and its ``name=`` are read from the call stack
when a report is made, so a wait that completes costs nothing for them.

A rank that waits for a lock another rank holds (a window mutex) waits under the same
guard: its report names the lock and the rank that holds it, and what that rank is doing.

The backend supplies the side channel (:class:`Peers`); :class:`Guard` is the wait loop.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any, Protocol

__all__ = ["Guard", "Held", "Peers", "Stall", "StallError", "State", "set_op_reader", "where"]

#: What a rank says about itself: (op, name or None, seconds it has waited).
State = tuple[str, str | None, float]
#: For a wait on a lock: what the lock is (e.g. "the mutex of window 'x' on rank 1") and
#: the rank that held it when last tried.
Held = Callable[[], tuple[str, int]]

_QUICK_TESTS = 8  # tests before the loop reads the clock and starts yielding the core
_SPIN = 0.05  # seconds of polling (yielding the core) before the loop sleeps between tests
_MAX_SLEEP = 1e-3  # longest sleep between two tests (bounds the added latency)
_SERVE_EVERY = 0.05  # seconds between two looks for other ranks' questions
_ANSWER_WAIT = 5.0  # longest wait for the other ranks' answers (a quarter of the timeout,
# at least a second)
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_PUBLIC = (
    os.path.join(_PACKAGE, "_api.py"),
    os.path.join(_PACKAGE, "_api_windows.py"),
    os.path.join(_PACKAGE, "_api_topology.py"),
    os.path.join(_PACKAGE, "compat"),
)
_LAUNCHER = os.path.join(_PACKAGE, "run", "")  # fogrun's bootstrap runs the program: no op
#: Reads a frame: ``(op, name)`` when it runs a routed op, else None.
OpReader = Callable[[FrameType], tuple[str, str | None] | None]


def _no_routed_op(frame: FrameType) -> None:
    return None


#: `fogsim._routing`'s reader, set when that module is imported (no routed op runs before).
_op_reader: OpReader = _no_routed_op


class StallError(RuntimeError):
    """A rank waited in a collective longer than ``FOGSIM_STALL_TIMEOUT`` seconds.

    The message names the op, the ranks that have not reached it (or, for a lock, the rank
    that holds it) and what they were doing. Under ``fogrun`` the exception ends the whole
    job, and fogrun's last line says who waited for whom (``stall``).
    """

    def __init__(self, message: str, stall: Stall | None = None) -> None:
        super().__init__(message)
        self.stall = stall


@dataclass(frozen=True)
class Stall:
    """Who waited where, for whom: a stall report in brief (fogrun words it in one line)."""

    rank: int  # the rank that waited
    op: str  # the op it waited in, with its name (e.g. "allreduce (name 'w')")
    waited: float  # seconds
    missing: tuple[int, ...]  # the ranks it waited for (a lock: the one that held it)
    lock: str | None = None  # what it waited for, when a lock

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "missing": list(self.missing)}


class Peers(Protocol):
    """The side channel over which waiting ranks ask each other where they are."""

    def serve(self, state: Callable[[], State]) -> None:
        """Answer the questions other ranks have sent (``state()`` says where we are)."""

    def ask(self, state: Callable[[], State], seconds: float) -> dict[int, State]:
        """Ask every other rank; return the answers that came within ``seconds``."""


def set_op_reader(reader: OpReader) -> None:
    """Read the routed ops' frames with ``reader`` (`fogsim._routing`'s, set at its import).

    The router sits above the backends whose waits this module guards, so it registers
    itself here instead of being imported from here.
    """
    global _op_reader
    _op_reader = reader


def where() -> tuple[str, str | None]:
    """Return the fogsim op the calling thread is in and its ``name=`` (from the stack).

    The outermost frame of fogsim's public functions (`fogsim._api`,
    `fogsim._api_windows`, `fogsim.compat`, and the ops routed by `fogsim._routing`) names
    the op; without one, the outermost frame inside the package does (but fogrun's
    bootstrap in `fogsim.run`, which runs the program).
    """
    routed = _op_reader
    frame: Any = sys._getframe(1)
    public: tuple[str, str | None] | None = None
    inner = None
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_PACKAGE) and not path.startswith(_LAUNCHER):
            inner = frame
            if path.startswith(_PUBLIC):
                name = frame.f_locals.get("name")
                public = frame.f_code.co_name, name if isinstance(name, str) else None
            else:  # an op declared once and routed (fogsim._routing) is public too
                public = routed(frame) or public
        frame = frame.f_back
    if public is not None:
        return public
    if inner is None:
        return "an op", None
    name = inner.f_locals.get("name")
    return inner.f_code.co_name, name if isinstance(name, str) else None


class Guard:
    """Wait on one rank's requests with a time limit; report stalls (see module doc).

    ``timeout`` None makes :meth:`wait` block in the backend's own wait (no polling).
    """

    def __init__(
        self, rank: int, size: int, timeout: float | None, warn_only: bool, peers: Peers | None
    ) -> None:
        self.rank, self.size = rank, size
        self.timeout = timeout
        self.warn_only = warn_only
        self.peers = peers
        self.answer_wait = min(_ANSWER_WAIT, max(1.0, (timeout or 0) / 4))

    def wait(
        self, test: Callable[[], bool], block: Callable[[], Any], held: Held | None = None
    ) -> None:
        """Return once ``test()`` is true; ``block()`` waits without a limit.

        ``held``: the wait is for a lock; the report names it and its holder.
        """
        if self.timeout is None or self.size == 1:
            block()
            return
        for _ in range(_QUICK_TESTS):  # most waits end within microseconds
            if test():
                return
        start = time.monotonic()
        deadline, serve_at, reported = start + self.timeout, start + _SERVE_EVERY, False
        here: list[tuple[str, str | None]] = []

        def state() -> State:
            if not here:
                here.append(where())
            return (*here[0], time.monotonic() - start)

        pause = 0.0
        while not test():
            now = time.monotonic()
            if now >= serve_at and self.peers is not None:
                self.peers.serve(state)
                serve_at = now + _SERVE_EVERY
            if not reported and now >= deadline:
                reported = True
                self.stalled(state, held)
            if now - start > _SPIN:
                pause = min(2 * pause or 1e-5, _MAX_SLEEP)
                time.sleep(pause)
            else:  # other ranks on the same cores get to run, as in MPI's own waits
                _yield()

    def stalled(self, state: Callable[[], State], held: Held | None = None) -> None:
        """Report the stall: raise :class:`StallError`, or print the report (warn only)."""
        message, stall = self.report(state, held)
        if not self.warn_only:
            raise StallError(message, stall)
        print(message, file=sys.stderr, flush=True)

    def report(self, state: Callable[[], State], held: Held | None = None) -> tuple[str, Stall]:
        """Ask the other ranks where they are; return the stall report, and in brief."""
        op, name, waited = state()
        answers = {} if self.peers is None else self.peers.ask(state, self.answer_wait)
        mine = (op, name, waited)
        if held is not None:
            lock, holder = held()
            message = held_message(self.rank, mine, lock, holder, answers)
            return message, Stall(self.rank, _label(op, name), waited, (holder,), lock)
        message = stall_message(self.rank, self.size, mine, answers)
        missing = tuple(missing_ranks(self.rank, self.size, (op, name), answers))
        return message, Stall(self.rank, _label(op, name), waited, missing)


def _label(op: str, name: str | None) -> str:
    return op if name is None else f"{op} (name {name!r})"


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def missing_ranks(
    rank: int, size: int, op: tuple[str, str | None], answers: dict[int, State]
) -> list[int]:
    """The ranks that are not in ``op`` (by their ``answers``, or silent), but ``rank``."""
    return [r for r in range(size) if r != rank and answers.get(r, (None, None))[:2] != op]


_ADVICE = (
    "Set FOGSIM_STALL_TIMEOUT (seconds; 0: never) to change the limit, "
    "FOGSIM_STALL_ACTION=warn to only warn."
)


def held_message(rank: int, mine: State, lock: str, holder: int, answers: dict[int, State]) -> str:
    """Word the report of ``rank`` waiting in ``mine`` for ``lock``, held by ``holder``."""
    op, name, waited = mine
    lines = [
        f"fogsim: rank {rank} has waited {waited:.0f} s in {_label(op, name)} for {lock}, "
        f"held by rank {holder}"
    ]
    if holder == rank:
        lines.append(f"  rank {rank} holds it itself (taken again in another thread?)")
    elif holder in answers:
        o, n, w = answers[holder]
        lines.append(f"  rank {holder} waits in {_label(o, n)} (for {w:.0f} s)")
    else:
        lines.append(
            f"  rank {holder} did not answer: computing outside fogsim, hung elsewhere, or dead"
        )
    lines.append(_ADVICE)
    return "\n".join(lines)


def stall_message(rank: int, size: int, mine: State, answers: dict[int, State]) -> str:
    """Word the report of ``rank`` stalled in ``mine`` given the others' ``answers``."""
    op, name, waited = mine
    same = sorted(r for r, (o, n, _) in answers.items() if (o, n) == (op, name))
    elsewhere = sorted(r for r in answers if r not in same)
    silent = [r for r in range(size) if r != rank and r not in answers]
    missing = missing_ranks(rank, size, (op, name), answers)
    lines = [
        f"fogsim: rank {rank} has waited {waited:.0f} s in {_label(op, name)}; "
        + (
            f"{_ranks(missing)} {'has' if len(missing) == 1 else 'have'} not reached it"
            if missing
            else "every rank has reached it (a transfer is stuck)"
        )
    ]
    for r in elsewhere:
        o, n, w = answers[r]
        lines.append(f"  rank {r} waits in {_label(o, n)} (for {w:.0f} s)")
    if silent:
        lines.append(
            f"  {_ranks(silent)} did not answer: computing outside fogsim, hung elsewhere, or dead"
        )
    if same:
        verb = "waits" if len(same) == 1 else "wait"
        lines.append(f"  {_ranks(same)} {verb} in {_label(op, name)} too")
    lines.append(_ADVICE)
    return "\n".join(lines)
