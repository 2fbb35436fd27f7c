"""Plots of BENCHMARKS.md's figures, drawn when the site is built (docs/benchmarks.md).

The numbers are read from BENCHMARKS.md's tables, so the plots follow the page.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

# matplotlib's plot directive runs this file's code without ``__file__``, in docs/_scripts/
# (its default working directory), so BENCHMARKS.md is found upwards from there.
_HERE = Path.cwd()
BENCHMARKS = next(
    p / "BENCHMARKS.md" for p in (_HERE, *_HERE.parents) if (p / "BENCHMARKS.md").exists()
)


def _table(section: str, first_column: str) -> list[list[str]]:
    """Return the rows (cells as strings) of the first table under ``## section``.

    The table is the first one in the section whose header starts with ``first_column``.
    """
    lines = BENCHMARKS.read_text().splitlines()
    start = lines.index(f"## {section}")
    rows: list[list[str]] = []
    inside = False
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not inside:
            inside = line.startswith("|") and cells[0] == first_column
            continue
        if not line.startswith("|"):
            break
        if not set(cells[0]) <= {"-"}:
            rows.append(cells)
    if not rows:
        raise ValueError(f"no table starting with {first_column!r} under {section!r}")
    return rows


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("*", "").rstrip("x"))


def sharded() -> None:
    """Plot steps per second against the number of processes P, per topology and N."""
    rows = _table("Sharded simulation", "topology")
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for topology, marker in (("ring", "o"), ("exp-2", "s")):
        for n in sorted({r[1] for r in rows if r[0] == topology}):
            pts = [(int(r[2]), _number(r[3])) for r in rows if r[0] == topology and r[1] == n]
            ax.plot(*zip(*pts, strict=True), marker=marker, label=f"{topology}, N = {n}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 4], ["1", "2", "4"])
    ax.set_xlabel("processes P (shards)")
    ax.set_ylabel("consensus steps per second")
    ax.set_title("Sharded simulation on a 2-core machine")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()


def compressed() -> None:
    """Plot the bytes each CHOCO-gossip variant needs against exact gossip's (ring of 16)."""
    rows = _table("Compressed communication", "variant")
    named = [(r[0], _number(r[4])) for r in rows if r[4]]
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    labels = [name for name, _ in named][::-1]
    ax.barh(labels, [ratio for _, ratio in named][::-1], color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(0.2, color="tab:red", linewidth=0.8, linestyle=":", label="goal: 0.2 (top-1%)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("bytes to reach 1e-8 / exact gossip's bytes")
    ax.set_title("Compressed gossip, ring of 16 agents, d = 10^4", fontsize=10)
    fig.tight_layout()
