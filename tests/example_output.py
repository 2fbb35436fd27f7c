"""What a user reads of an example's output: a header naming the columns, rows of numbers,
and a last line saying what the result means -- each printed once per job, in every mode.

:func:`table` reads an example's stdout as a user would and fails the calling test when
one of these is missing; the tests of each example call it on the runs they already make.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?|[-+]?(inf|nan)")


@dataclass
class Table:
    """The first table of an example's output, and its last line."""

    header: str
    rows: list[list[float]]
    last: str


def is_row(line: str) -> bool:
    """Whether ``line`` is a row of numbers (every word a number)."""
    words = line.split()
    return bool(words) and all(_NUMBER.fullmatch(w) for w in words)


def table(stdout: str, label_columns: int = 0) -> Table:
    """Read ``stdout`` as a user would; fail unless it has a header and a last line, once.

    The first non-empty line is not numbers; the line just above the first row names the
    columns (at least one word per column); the last line is a sentence, not numbers.
    ``label_columns``: how many leading words of a row are labels (e.g. a method's name)
    rather than numbers. The header and the last line appear once (under a launcher: only
    the main process prints them).
    """
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, "the example printed nothing"

    def row(line: str) -> bool:
        words = line.split()
        return len(words) > label_columns and is_row(" ".join(words[label_columns:]))

    assert not row(lines[0]), f"the first line is numbers, not a header: {lines[0]!r}\n{stdout}"
    first = next((i for i, ln in enumerate(lines) if row(ln)), None)
    assert first is not None, f"no row of numbers:\n{stdout}"
    header = lines[first - 1]
    rows = []
    for line in lines[first:]:
        if not row(line):
            break
        rows.append([float(w) for w in line.split()[label_columns:]])
    assert not is_row(header), f"no header above the rows:\n{stdout}"
    assert len(header.split()) >= label_columns + len(rows[0]), (
        f"the header {header!r} does not name the {len(rows[0])} columns"
    )
    last = lines[-1]
    assert not row(last) and last != header, f"the last line is not a sentence: {last!r}"
    assert len(re.findall(r"[a-z]{2,}", last)) >= 6, f"the last line says little: {last!r}"
    assert lines.count(header) == 1, f"the header is printed {lines.count(header)} times"
    assert lines.count(last) == 1, f"the last line is printed {lines.count(last)} times"
    return Table(header, rows, last)


def wording(line: str) -> str:
    """``line`` with every number replaced by ``#``: the same in two modes whose last digits
    differ."""
    return _NUMBER.sub("#", line)
