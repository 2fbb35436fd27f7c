"""Machine-readable rows of the benchmark scripts, for ``python -m benchmarks``.

A script calls :func:`record` where it prints a claim's figures and :func:`save` at the
end (under MPI: on the main rank only). When the environment variable ``FOGSIM_BENCH_JSON``
names a file, :func:`save` appends the rows there, one JSON object per line:

    {"bench": "mpi", "measure": "...", "value": 1.9e-4, "baseline": 2.5e-4, "ratio": 0.76,
     "unit": "s", "goal": "<= 1.1", "note": ""}

``value`` and ``baseline`` are in ``unit`` (times in seconds, rates such as ``steps/s``);
``ratio`` is ``value / baseline``, or for a row without a single baseline the ratio the
measure names (e.g. a median of per-size ratios, with ``value`` null). ``goal`` is checked
against the ratio when there is one, else against the value; ``"added <= 3 us"`` is
checked against ``value - baseline``. Without the variable nothing is written, so the
scripts print exactly as they do alone. ``python benchmarks/bench_mpi.py`` with
``FOGSIM_BENCH_JSON=rows.jsonl`` set gives one script's rows.
"""

from __future__ import annotations

import json
import os

__all__ = ["record", "save"]

_ROWS: list[dict] = []


def record(
    bench: str,
    measure: str,
    value: float | None,
    baseline: float | None = None,
    ratio: float | None = None,
    goal: str | None = None,
    unit: str = "s",
    note: str = "",
) -> None:
    """Keep one row: ``value`` of ``measure`` in benchmark ``bench`` against its in-run
    ``baseline`` (same unit), with a ``goal`` such as ``"<= 1.1"`` or ``"added <= 3 us"``."""
    if ratio is None and baseline and value is not None:
        ratio = value / baseline
    _ROWS.append(
        {
            "bench": bench,
            "measure": measure,
            "value": value,
            "baseline": baseline,
            "ratio": ratio,
            "unit": unit,
            "goal": goal,
            "note": note,
        }
    )


def save() -> None:
    """Append the kept rows to ``$FOGSIM_BENCH_JSON`` (if set) and forget them."""
    path = os.environ.get("FOGSIM_BENCH_JSON")
    if path and _ROWS:
        with open(path, "a") as f:
            for row in _ROWS:
                f.write(json.dumps(row) + "\n")
    _ROWS.clear()
