"""fogrun's exit status: the status of the rank that failed first, every time.

MPI's launchers do not say how each rank ended. MPICH's ``mpiexec`` returns the OR of every
process's wait status: one rank's ``sys.exit(3)`` came back as 3, or as 9 or 15 when the
ranks that the launcher's (or fogrun's) clean-up killed were counted in, depending on who
won the race. So each rank of a fogrun job writes how it is ending to
``FOGSIM_RANK_DIR/exit-<rank>.json`` before it ends: the bootstrap `fogsim.run._rank` sees
the ``SystemExit``, ``KeyboardInterrupt`` or other exception the program lets out, and the
excepthook of `fogsim.run._errors` an uncaught exception where the bootstrap did not run.
Only a status other than 0 is written, once (the first). fogrun then returns the status of
the rank that failed first, as a shell would show it: ``sys.exit(n)`` gives n, an uncaught
exception 1 and ``KeyboardInterrupt`` 130. A ``StallError`` is recorded as a stall, with
whom the rank waited for, and fogrun says so (:func:`waited_for`) instead of "failed".

A rank killed by signal ``s`` writes nothing. The socket it kept to fogrun
(`fogsim.run._liveness`) tells which rank it was; MPICH's ``mpiexec -print-all-exitcodes``
(fogrun asks for it when ``mpiexec --version`` shows Hydra's build details) reports every
rank's wait status, which gives ``128 + s``, as a shell would. Without that report (Open MPI,
several hosts) fogrun returns the launcher's own status.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INTERRUPTED",
    "Ending",
    "ExitCodes",
    "code_of",
    "first_ending",
    "install",
    "read",
    "record",
    "recorded",
    "shell_status",
    "stalled_line",
    "waited_for",
]

#: A shell's status for a process ended by Ctrl-C (SIGINT): 128 + 2.
INTERRUPTED = 128 + signal.SIGINT
_PREFIX = "exit-"
_state: dict[str, Any] = {}


# ---------------------------------------------------------------- rank side


def install(rank_dir: str, rank: int) -> None:
    """Make :func:`record` write this rank's status to ``rank_dir``."""
    _state.update(rank_dir=rank_dir, rank=int(rank))


def code_of(exc: BaseException) -> int:
    """Return the exit status Python gives a process that ``exc`` ends, as a shell sees it."""
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        return 1  # a message: printed, then status 1
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return 1


def record(exc: BaseException) -> None:
    """Write the status that ``exc`` ends this rank with (once; nothing for status 0).

    A :class:`~fogsim.StallError` is told as a stall (``how`` ``"stalled"``), with who it
    waited for (``stall``): fogrun says so instead of naming this rank as failed.
    """
    from .._stall import StallError

    code = code_of(exc)
    if code == 0 or "code" in _state or "rank_dir" not in _state:
        return
    how = "exit" if isinstance(exc, SystemExit) else type(exc).__name__
    _state["code"] = code
    rank = _state["rank"]
    report = {"rank": rank, "pid": os.getpid(), "code": code, "how": how, "time": time.time()}
    if isinstance(exc, StallError) and exc.stall is not None:
        report.update(how="stalled", stall=exc.stall.as_dict())
    path = os.path.join(_state["rank_dir"], f"{_PREFIX}{rank}.json")
    with contextlib.suppress(OSError):
        with open(path + ".part", "w") as f:
            json.dump(report, f)
        os.replace(path + ".part", path)  # whole or absent: the rank may be killed any time


def recorded() -> int | None:
    """Return the status this rank recorded (None: none, or not under fogrun)."""
    code = _state.get("code")
    return code if isinstance(code, int) else None


# ---------------------------------------------------------------- fogrun side


def read(rank_dir: str) -> list[dict[str, Any]]:
    """Return the statuses the ranks recorded in ``rank_dir``, the first recorded first."""
    return read_records(rank_dir, _PREFIX)


def read_records(rank_dir: str, prefix: str) -> list[dict[str, Any]]:
    """Return the ranks' JSON records ``<prefix><rank>.json`` in ``rank_dir``, oldest first
    (a record being written, or unreadable, is left out)."""
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir(rank_dir):
            if name.startswith(prefix) and name.endswith(".json"):
                with (
                    contextlib.suppress(OSError, ValueError),
                    open(os.path.join(rank_dir, name)) as f,
                ):
                    found.append(json.load(f))
    return sorted(found, key=lambda r: (r.get("time", 0.0), r.get("rank", 0)))


def shell_status(wait_status: int) -> int:
    """Return the status a shell shows for a process with ``wait_status`` (``waitpid``'s):
    its exit code, or ``128 + s`` when signal ``s`` killed it."""
    if wait_status & 0x7F:  # WIFSIGNALED (stopped processes are not reported)
        return 128 + (wait_status & 0x7F)
    return (wait_status >> 8) & 0xFF


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_HEAD = re.compile(r"^\[mpiexec@[^\]]*\] Exit codes: (.*)$")
_GROUP = re.compile(r"\[[^\]]*\] (-?\d+(?:,-?\d+)*)")


class ExitCodes:
    """Read MPICH's ``-print-all-exitcodes`` report from the launcher's output, line by line::

        [mpiexec@vm] Exit codes: [vm] 0,0,768,9

    one ``[host] status,...`` group per host, the wait status of each process in the order
    of its ranks on that host.
    """

    def __init__(self) -> None:
        self._groups: list[list[int]] = []
        self._open = False

    def feed(self, line: str) -> None:
        """Take one line of the launcher's output (without its newline)."""
        head = _HEAD.match(line)
        if head is not None:
            self._groups, self._open, rest = [], True, head.group(1)
        elif self._open:
            rest = line
        else:
            return
        group = _GROUP.fullmatch(rest.strip())
        if group is None:
            self._open = False
        else:
            self._groups.append([int(v) for v in group.group(1).split(",")])

    def by_rank(self) -> dict[int, int]:
        """Return each rank's wait status; empty unless the report came, from one host
        (the order of the ranks over several hosts depends on the launcher's mapping)."""
        return dict(enumerate(self._groups[0])) if len(self._groups) == 1 else {}


@dataclass(frozen=True)
class Ending:
    """How the rank (or ranks) that ended the job ended."""

    ranks: tuple[int, ...]
    pids: tuple[int, ...]
    #: ``"failed"``, ``"exited with status 3"``, ``"was killed by SIGKILL"`` or ``"died"``.
    how: str
    #: Its exit status as a shell shows it; None when unknown.
    code: int | None
    #: Whether it ended on a stall report (``how`` then says whom it waited for).
    stalled: bool = False


def first_ending(
    statuses: Sequence[Mapping[str, Any]],
    dead: Sequence[tuple[int, int, str]],
    dead_at: float | None,
    wait_statuses: Mapping[int, int],
) -> Ending | None:
    """Return how the job's first failing rank ended, or None when nothing tells.

    ``statuses`` are the records of :func:`read`; ``dead`` the ranks whose socket to fogrun
    closed first without a goodbye (``Watch.first_dead``, at time ``dead_at``, by
    ``time.time()``); ``wait_statuses`` the launcher's report by rank (:class:`ExitCodes`).
    A rank that recorded its status before the first rank vanished failed first.
    """
    if statuses and (dead_at is None or statuses[0].get("time", 0.0) <= dead_at):
        first = statuses[0]
        code = int(first["code"])
        rank, pid = (int(first["rank"]),), (int(first.get("pid", 0)),)
        stall = first.get("stall")
        if first.get("how") == "stalled" and isinstance(stall, dict):
            return Ending(rank, pid, waited_for(stall), code, stalled=True)
        how = f"exited with status {code}" if first.get("how") == "exit" else "failed"
        return Ending(rank, pid, how, code)
    died = [d for d in dead if d[2] == "died"]
    if not died:
        return None
    ranks = tuple(d[0] for d in died)
    pids = tuple(d[1] for d in died)
    known = {wait_statuses.get(r) for r in ranks}
    raw = known.pop()
    if raw is None or known:  # not reported, or ranks gone at once that ended unlike
        return Ending(ranks, pids, "died", None)
    code = shell_status(raw)
    if raw & 0x7F:
        how = f"was killed by {_signal_name(raw & 0x7F)}"
    else:
        how = f"exited with status {code}"
    return Ending(ranks, pids, how, code)


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def waited_for(stall: Mapping[str, Any]) -> str:
    """Word a rank's stall record (``fogsim._stall.Stall.as_dict``): whom it waited for."""
    waited = f"waited {float(stall.get('waited', 0)):.0f} s in {stall.get('op', 'an op')}"
    missing = [int(r) for r in stall.get("missing", ())]
    if stall.get("lock"):
        return f"{waited} for {stall['lock']}, held by {_ranks(missing)}"
    if missing:
        verb = "did" if len(missing) == 1 else "do"
        return f"{waited} for {_ranks(missing)}, which {verb} not arrive"
    return f"{waited}, which every rank had reached (a transfer is stuck)"


def stalled_line(statuses: Sequence[Mapping[str, Any]], ranks: Sequence[int]) -> str | None:
    """Say that ``ranks`` stalled and whom they waited for, if the records tell that of each
    of them (else None)."""
    stalls = {
        int(s["rank"]): s["stall"]
        for s in statuses
        if s.get("how") == "stalled" and isinstance(s.get("stall"), dict)
    }
    if not ranks or any(r not in stalls for r in ranks):
        return None
    if len(ranks) == 1:
        return f"{_ranks(ranks)} stalled: it {waited_for(stalls[ranks[0]])}"
    missing = sorted({int(m) for r in ranks for m in stalls[r].get("missing", ())})
    return f"{_ranks(ranks)} stalled waiting for {_ranks(missing) if missing else 'a transfer'}"
