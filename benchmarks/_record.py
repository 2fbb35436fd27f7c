"""Machine-readable rows of the benchmark scripts, for ``python -m benchmarks``.

A script calls :func:`record` where it prints a claim's figures; when the environment
variable ``FOGSIM_BENCH_JSON`` names a file (the suite sets it), :func:`save` appends the
rows there as JSON lines. Without it nothing is written, so the scripts print as before.
"""

from __future__ import annotations

import json
import os

__all__ = ["record", "save"]

_ROWS: list[dict] = []


def record(
    bench: str, measure: str, value: float, baseline: float | None = None,
    ratio: float | None = None, goal: str | None = None, unit: str = "",
) -> None:  # fmt: skip
    """Keep one row: ``value`` (and its in-run ``baseline``, ``ratio``, ``goal`` such as
    ``"<= 1.1"``) of ``measure`` in benchmark ``bench``."""
    if ratio is None and baseline:
        ratio = value / baseline
    if baseline is not None and not unit:
        unit = "s"  # a time against a time measured in the same run
    _ROWS.append({"bench": bench, "measure": measure, "value": value, "baseline": baseline,
                  "ratio": ratio, "goal": goal, "unit": unit})  # fmt: skip


def save() -> None:
    """Append the kept rows to ``$FOGSIM_BENCH_JSON`` (if set) and forget them."""
    path = os.environ.get("FOGSIM_BENCH_JSON")
    if path and _ROWS:
        with open(path, "a") as f:
            for row in _ROWS:
                f.write(json.dumps(row) + "\n")
    _ROWS.clear()
