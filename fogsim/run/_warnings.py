"""One warning, once: the ranks report their warnings to fogrun, which prints each once.

Under fogrun (``FOGSIM_RANK_DIR`` set, and a rank given by the MPI launcher), each rank
replaces ``warnings.showwarning`` (`fogsim.run._hooks`). Python calls it only for a warning
its filters let through (``-W``, ``PYTHONWARNINGS``, ``warnings.simplefilter``, the default
of once per line), fogsim's own (``WeightWarning``, ...) included; instead of printing the
warning, the rank appends it to ``FOGSIM_RANK_DIR/warnings-<rank>.jsonl``.

fogrun reads these files while the job runs (:class:`Collector`), groups the reports of the
same warning (category, message, file and line; a rank's n-th report of it with the n-th of
the others) and prints each group once, as Python prints a warning, with its ranks::

    sleeper.py:4: UserWarning (ranks 0-3): weights look odd
      warnings.warn("weights look odd", UserWarning)

A group is printed as soon as every rank has reported it, else once no rank has added to
it for `WINDOW` seconds (a warning that only some ranks raise), and at the end of the job.
Under ``fogrun --verbose`` the ranks print their warnings themselves, as without fogrun.
"""

from __future__ import annotations

import contextlib
import json
import linecache
import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._errors import VERBOSE_NAME, rank_ranges

__all__ = ["WINDOW", "Collector", "describe", "format_group", "install"]

#: Seconds a group of reports of one warning waits for more ranks after its latest report.
WINDOW = 2.0
# ... and at most this long after its first.
_WINDOW_MAX = 10.0
_POLL = 0.1
_PREFIX = "warnings-"
_SUFFIX = ".jsonl"
_state: dict[str, Any] = {}


# ---------------------------------------------------------------- rank side


def install(rank_dir: str, rank: int) -> None:
    """Make this process report the warnings it would print to the fogrun watching
    ``rank_dir`` instead."""
    if "previous" not in _state:
        _state["previous"] = warnings.showwarning
        warnings.showwarning = _show
    _state.update(rank_dir=rank_dir, rank=int(rank))


def _show(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    previous = _state["previous"]
    rank_dir, rank = _state["rank_dir"], _state["rank"]
    if file is not None or os.path.exists(os.path.join(rank_dir, VERBOSE_NAME)):
        previous(message, category, filename, lineno, file, line)
        return
    try:
        report = {"rank": rank, **describe(message, category, filename, lineno, line)}
        data = (json.dumps(report) + "\n").encode()
        path = os.path.join(rank_dir, f"{_PREFIX}{rank}{_SUFFIX}")
        # one write to a file opened for appending: a whole line, even from several threads
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except Exception:  # noqa: BLE001 - never lose a warning: print it as Python would
        previous(message, category, filename, lineno, file, line)


def describe(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None
) -> dict[str, Any]:
    """A warning as :func:`format_group` prints it (its source line read if not given)."""
    source = line if line is not None else linecache.getline(filename, lineno)
    return {
        "category": category.__name__,
        "message": str(message),
        "filename": filename,
        "lineno": lineno,
        "line": source.strip(),
    }


# ---------------------------------------------------------------- fogrun side


def format_group(report: dict[str, Any], ranks: list[int]) -> str:
    """Return a warning's text as Python prints it, with ``ranks`` after its category."""
    head = (
        f"{report.get('filename')}:{report.get('lineno')}: {report.get('category')} "
        f"({rank_ranges(ranks)}): {report.get('message')}\n"
    )
    line = str(report.get("line") or "")
    return head + (f"  {line}\n" if line else "")


@dataclass
class _Group:
    report: dict[str, Any]
    first: float
    latest: float
    ranks: list[int] = field(default_factory=list)


class Collector:
    """Read the ranks' warnings from ``rank_dir`` in a thread; ``write`` each group once.

    ``ranks``: how many ranks the job has (None: unknown, groups wait for `WINDOW`).
    """

    def __init__(self, rank_dir: str, ranks: int | None, write: Callable[[str], None]) -> None:
        self._rank_dir = rank_dir
        self._ranks = ranks
        self._write = write
        self._offsets: dict[str, int] = {}
        self._seen: dict[tuple[int, tuple[Any, ...]], int] = {}  # (rank, warning): times
        self._groups: dict[tuple[tuple[Any, ...], int], _Group] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="fogrun-warnings")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(_POLL):
            self._step(final=False)

    def close(self) -> None:
        """Read what is left and print every group still waiting (the job has ended)."""
        self._stop.set()
        self._thread.join(5)
        self._step(final=True)

    def _step(self, final: bool) -> None:
        now = time.monotonic()
        for report in self._read():
            key = tuple(report.get(k) for k in ("category", "message", "filename", "lineno"))
            rank = int(report.get("rank", -1))
            nth = self._seen.get((rank, key), 0)
            self._seen[(rank, key)] = nth + 1
            group = self._groups.get((key, nth))
            if group is None:  # new, or its first ranks were printed already: a group anew
                group = self._groups[(key, nth)] = _Group(report, now, now)
            group.ranks.append(rank)
            group.latest = now
        for gkey, group in list(self._groups.items()):
            complete = self._ranks is not None and len(set(group.ranks)) >= self._ranks
            waited = now - group.latest >= WINDOW or now - group.first >= _WINDOW_MAX
            if final or complete or waited:
                del self._groups[gkey]
                self._write(format_group(group.report, group.ranks))

    def _read(self) -> list[dict[str, Any]]:
        reports = []
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(self._rank_dir)):
                if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
                    reports += self._read_new_lines(name)
        return reports

    def _read_new_lines(self, name: str) -> list[dict[str, Any]]:
        offset = self._offsets.get(name, 0)
        try:
            with open(os.path.join(self._rank_dir, name), "rb") as f:
                f.seek(offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # a line still being written waits for its end
        self._offsets[name] = offset + end
        reports = []
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                reports.append(json.loads(line))
        return reports
