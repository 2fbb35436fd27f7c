"""One error, once: the ranks report their uncaught exception to fogrun, which groups them.

Under ``fogrun`` (``FOGSIM_RANK_DIR`` set, and a rank given by the MPI launcher), each rank
starts in `fogsim.run._rank`, which replaces ``sys.excepthook`` before the program's first
line (`fogsim.run._hooks`; ``import fogsim`` does the same for a program fogrun could not
start that way, e.g. one already run through ``python -m mpi4py`` or another interpreter):
an uncaught exception is
written to ``FOGSIM_RANK_DIR/error-<rank>.json`` instead of being printed (and printed as
well when ``fogrun --verbose`` asked for it, or when the report cannot be written). The
rank then ends as before: ``python -m mpi4py`` aborts the job. The one process of
``fogrun --sim`` or ``--spmd`` (no rank) prints its exceptions itself, but for the
``KeyboardInterrupt`` of fogrun's Ctrl-C, which fogrun tells in one line.

When the job has ended, fogrun reads the reports, groups those of the same exception (the
same type and message, raised at the same lines) and prints each group once::

    fogrun: ranks 0-3: ValueError: bad value
    Traceback (most recent call last):
      ...

with the traceback of the rank that raised it first.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from . import _status

__all__ = ["INTERRUPTED_NAME", "VERBOSE_NAME", "install", "rank_ranges", "read", "summary"]

#: A file in ``FOGSIM_RANK_DIR`` whose presence asks the ranks to print their tracebacks too.
VERBOSE_NAME = "verbose"
#: A file in ``FOGSIM_RANK_DIR`` fogrun writes when Ctrl-C reaches it, before it passes the
#: SIGINT on: the ``KeyboardInterrupt`` that follows is fogrun's to tell.
INTERRUPTED_NAME = "interrupted"
_PREFIX = "error-"
# Frames of the machinery that runs the script, left out of a report: runpy, mpi4py and
# fogsim.run._rank.
_RUNNER_FILES = ("<frozen runpy>", os.sep + "runpy.py", os.path.join("fogsim", "run", "_rank.py"))
_RUNNER_DIR = os.sep + "mpi4py" + os.sep
_installed: dict[str, Any] = {}


def install(rank_dir: str, rank: int | None) -> None:
    """Make this process report its uncaught exception to the fogrun watching ``rank_dir``
    (``rank`` None: the one process of a job without ranks, which prints it but for the
    ``KeyboardInterrupt`` of fogrun's Ctrl-C)."""
    if not _installed:
        _installed["previous"] = sys.excepthook
        sys.excepthook = _hook
    _installed.update(rank_dir=rank_dir, rank=None if rank is None else int(rank))


def _hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    previous = _installed.get("previous", sys.__excepthook__)
    rank_dir, rank = _installed["rank_dir"], _installed["rank"]
    if rank is None:
        interrupted = issubclass(kind, KeyboardInterrupt) and os.path.exists(
            os.path.join(rank_dir, INTERRUPTED_NAME)
        )
        if not interrupted or os.path.exists(os.path.join(rank_dir, VERBOSE_NAME)):
            previous(kind, value, tb)
        return
    _status.record(value)  # where the bootstrap did not record it already
    try:
        report = _report(kind, value, tb, rank)
        path = os.path.join(rank_dir, f"{_PREFIX}{rank}.json")
        with open(path + ".part", "w") as f:
            json.dump(report, f)
        os.replace(path + ".part", path)  # whole or absent: the rank may be killed any time
    except Exception:  # noqa: BLE001 - never lose the error: print it as Python would
        previous(kind, value, tb)
        return
    if os.path.exists(os.path.join(rank_dir, VERBOSE_NAME)):
        previous(kind, value, tb)


def _report(kind: type[BaseException], value: BaseException, tb: Any, rank: int) -> dict[str, Any]:
    error = traceback.TracebackException(kind, value, tb)
    frames = list(error.stack)
    while frames and (
        frames[0].filename.endswith(_RUNNER_FILES) or _RUNNER_DIR in frames[0].filename
    ):
        del frames[0]
    if frames:
        error.stack = traceback.StackSummary.from_list(frames)
    return {
        "rank": rank,
        "pid": os.getpid(),
        "time": time.time(),
        "error": "".join(error.format_exception_only()).rstrip("\n"),
        "frames": [[f.filename, f.lineno, f.name] for f in error.stack],
        "traceback": "".join(error.format()),
    }


def read(rank_dir: str) -> list[dict[str, Any]]:
    """Return the reports the ranks left in ``rank_dir``, in the order they were raised."""
    return _status.read_records(rank_dir, _PREFIX)


def rank_ranges(ranks: Iterable[int]) -> str:
    """Return ``"rank 2"``, ``"ranks 0-3"`` or ``"ranks 0, 2, 5-7"`` for ``ranks``."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for r in [*ordered, None]:
        if prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    return ("ranks " if len(ordered) > 1 else "rank ") + ", ".join(parts)


def summary(reports: Sequence[dict[str, Any]], tracebacks: bool = True) -> str:
    """Return fogrun's account of ``reports``: per distinct error, the ranks that raised it
    and (``tracebacks``) the traceback of the first of them."""
    groups: dict[tuple[Any, str], list[dict[str, Any]]] = {}
    for report in reports:  # in the order raised: a group's first report came first
        key = (report.get("error"), json.dumps(report.get("frames")))
        groups.setdefault(key, []).append(report)
    lines = []
    for group in groups.values():
        first = group[0]
        # the exception's own line: a SyntaxError's text starts with the file and the code
        lines_of = [ln for ln in str(first.get("error", "")).split("\n") if ln.strip()]
        head = (
            lines_of[-1]
            if lines_of and lines_of[0].startswith("  File ")
            else (lines_of[0] if lines_of else "")
        )
        lines.append(f"fogrun: {rank_ranges(r['rank'] for r in group)}: {head}")
        if tracebacks:
            lines.append(str(first.get("traceback", "")).rstrip("\n"))
    return "\n".join(lines)
