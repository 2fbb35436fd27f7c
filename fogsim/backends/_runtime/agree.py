"""Agreement before data moves: every rank raises the same error, or none does.

A call whose arguments are wrong on one rank (bad weights, a shape that differs, a
sender its receiver does not expect) must not leave the other ranks blocked in a
transfer that will never complete. Each rank reduces a small fingerprint of what must
match plus a flag for its own local error in one reduction
(:meth:`~.transport.Transport.iallreduce_max`); only when something is off do the ranks
exchange descriptions (JSON text, never pickles) to word one message, which every rank then
raises. Written once over a :class:`~.transport.Transport`, so that every runtime raises
the same errors.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ... import timeline as _timeline
from .transport import Request, Transport

__all__ = [
    "fingerprint",
    "agree",
    "named",
    "purpose",
    "LocalError",
    "settle",
    "start_agree",
    "fused_terms",
]


class LocalError(Exception):
    """A problem found on this rank: the exception type and its message.

    Never raised itself: :func:`agree` raises, on every rank, the exception it describes
    (an Exception all the same, so that it travels wherever an error may, e.g. through
    ``_core.FusionQueue``).
    """

    __slots__ = ("kind", "message")

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.kind = type(exc).__name__
        self.message = str(exc)


def fingerprint(*parts: Any) -> int:
    """Return a deterministic 62-bit fingerprint of ``parts`` (same on every process)."""
    text = "|".join(map(str, parts)).encode()
    return (zlib.crc32(text) << 30) ^ zlib.adler32(text)


def named(name: str | None) -> str:
    """Say a call's ``name`` in a disagreement's message (nothing for None)."""
    return "" if name is None else f" named {name!r}"


def purpose(op: str, averaging: bool) -> str:
    """Say whether an ``allreduce`` averages or sums (for a disagreement's message)."""
    if not op.startswith("allreduce"):
        return ""
    return " to average" if averaging else " to sum"


def fused_terms(
    layout: int, error: LocalError | None, entries: list[Any]
) -> tuple[int, str | Callable[[], str]]:
    """Return the fingerprint and the description that ranks agree on for a batch of
    queued calls (``layout``: see :class:`fogsim._core.FusionQueue`)."""
    if error is not None:
        return 0, "an invalid argument"
    return fingerprint("fused", layout), partial(_describe_layout, entries)


def _describe_layout(entries: list[Any]) -> str:
    calls = "; ".join(
        f"{e.arr.dtype} {e.arr.shape}{named(e.name)}"
        + (f" with weights #{e.plan.fingerprint}" if e.plan.fingerprint else "")
        for e in entries
    )
    s = "" if len(entries) == 1 else "s"
    return f"{len(entries)} queued neighbor_allreduce call{s} ({calls})"


def agree(
    transport: Transport, fp: int, error: LocalError | None, describe: str | Callable[[], str]
) -> None:
    """Raise the same exception on every rank unless all fingerprints match and no error.

    ``describe`` says what this rank has (e.g. ``"float64 (3,)"``), or is a function that
    returns it (called only when the fingerprints differ), for the message. Recorded as
    the ``NEGOTIATE`` phase on a running timeline.
    """
    tl = _timeline.active
    if tl is None:
        return _agree(transport, fp, error, describe)
    t = tl.clock_ns()
    try:
        return _agree(transport, fp, error, describe)
    finally:
        tl.since("NEGOTIATE", t)


def _agree(
    transport: Transport, fp: int, error: LocalError | None, describe: str | Callable[[], str]
) -> None:
    # Always the nonblocking reduction: a rank that meets this agreement may be in an op
    # that overlaps it with its data (start_agree), and blocking and nonblocking
    # collectives do not match each other.
    flags, req = start_agree(transport, fp, error)
    guard = transport.guard
    if guard is None:
        req.wait()
    else:  # a rank that never comes is reported, not waited for forever
        guard.wait(req.test, req.wait)
        req.wait()  # complete already; a request may finish its work here (a local maximum)
    settle(transport, flags, error, describe)


def _flags(fp: int, error: LocalError | None, posted: bool) -> np.ndarray:
    # reduced with MAX: [3] is 1 if some rank posted its data, [4] if some rank did not
    return np.array(
        [fp, -fp, 0 if error is None else 1, int(posted), int(not posted)], dtype=np.int64
    )


def start_agree(
    transport: Transport, fp: int, error: LocalError | None, posted: bool = False
) -> tuple[np.ndarray, Request]:
    """Start :func:`agree`'s reduction; return ``(flags, request)``. Once the request is
    complete, :func:`settle` raises what :func:`agree` would (on every rank).

    ``posted``: this rank has already started the data transfer of a call that overlaps
    its agreement (see :attr:`~.transport.Transport.repair`).
    """
    flags = _flags(fp, error, posted)
    return flags, transport.iallreduce_max(flags)


def settle(
    transport: Transport,
    flags: np.ndarray,
    error: LocalError | None,
    describe: str | Callable[[], str],
    posted: bool = False,
) -> None:
    """Raise the agreed error on every rank (see :func:`agree`), given the reduced flags."""
    if flags[0] == -flags[1] and flags[2] == 0:
        return
    if flags[3] and flags[4] and not posted:
        # Some ranks already sent their data in an overlapped call: complete the transfer
        # they wait for, so that they too get to the error.
        repair = transport.repair
        assert repair is not None  # set by the neighbor ops of a path that overlaps
        repair()
    reports = transport.allgather_json([error.kind, error.message] if error else None)
    for rank, report in enumerate(reports):
        if report is not None:
            kind, message = report
            exc_type = TypeError if kind == "TypeError" else ValueError
            prefix = "" if message.startswith("topology check") else f"rank {rank}: "
            raise exc_type(prefix + message)
    descriptions = transport.allgather_json(describe if isinstance(describe, str) else describe())
    listed = ", ".join(f"rank {r} has {d}" for r, d in enumerate(descriptions))
    raise ValueError(f"ranks disagree: {listed}")
