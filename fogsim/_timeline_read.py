"""Reading timelines back: per-phase summaries, a Gantt chart and the command line.

``fogsim.timeline`` re-exports :func:`load`, :func:`summarize`, :func:`plot_gantt` and
:func:`main` (``fogsim timeline summarize PREFIX``); recording lives there.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["load", "main", "plot_gantt", "summarize"]


def load(prefix: str) -> dict[int, list[dict[str, Any]]]:
    """Return the events of ``PREFIX.json`` / ``PREFIX<rank>.json``, by pid."""
    paths = sorted(
        p
        for p in glob.glob(f"{glob.escape(str(prefix))}*.json")
        if re.fullmatch(r"\d*", p[len(str(prefix)) : -len(".json")])
    )
    if not paths:
        raise FileNotFoundError(f"no timeline files {prefix}.json or {prefix}<rank>.json")
    events: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        with open(path) as f:
            for event in json.load(f)["traceEvents"]:
                events.setdefault(event["pid"], []).append(event)
    return events


def _spans(events: list[dict[str, Any]]) -> list[tuple[int, str, float, float, int]]:
    """Return (tid, name, start, end, depth) of every B/E pair, in file order."""
    stacks: dict[int, list[tuple[str, float]]] = {}
    spans = []
    for e in events:
        if e["ph"] == "X":
            spans.append(
                (e["tid"], e["name"], e["ts"], e["ts"] + e["dur"], len(stacks.get(e["tid"], ())))
            )
        elif e["ph"] == "B":
            stacks.setdefault(e["tid"], []).append((e["name"], e["ts"]))
        elif e["ph"] == "E":
            name, t0 = stacks[e["tid"]].pop()  # E closes the innermost B of its track
            spans.append((e["tid"], name, t0, e["ts"], len(stacks[e["tid"]])))
    return spans


def summarize(
    prefix: str, gantt: str | None = None, out: TextIO | None = None
) -> dict[int, dict[str, float]]:
    """Print the total time (ms) per span name per rank (or agent); return it.

    ``gantt``: also save a Gantt chart of the spans to this image file.
    """
    import sys

    events = load(prefix)
    table: dict[int, dict[str, float]] = {}
    for pid, evs in sorted(events.items()):
        totals: dict[str, float] = {}
        for _, name, t0, t1, _ in _spans(evs):
            totals[name] = totals.get(name, 0.0) + (t1 - t0) / 1e3
        table[pid] = totals
    names = sorted({n for totals in table.values() for n in totals})
    out = out or sys.stdout
    width = max([len(n) for n in names] + [12])
    print(f"{'ms per phase':<{width}} " + " ".join(f"{pid:>9}" for pid in table), file=out)
    for name in names:
        print(
            f"{name:<{width}} " + " ".join(f"{table[pid].get(name, 0.0):>9.3f}" for pid in table),
            file=out,
        )
    if gantt:
        plot_gantt(prefix, gantt)
    return table


def plot_gantt(prefix: str, path: str | None = None, ax: Axes | None = None) -> Any:
    """Draw every rank's spans as a Gantt chart, one row per rank (or agent): each phase
    thinner than its op and on top of it. Save it to ``path`` if given."""
    import matplotlib

    if path is not None and ax is None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    events = load(prefix)
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 1.5 + 0.5 * len(events)))
    colors: dict[str, Any] = {}
    cmap = plt.get_cmap("tab20")
    for row, (_, evs) in enumerate(sorted(events.items())):
        for _, name, t0, t1, depth in _spans(evs):
            color = colors.setdefault(name, cmap(len(colors) % 20))
            height = 0.8 / (1 + depth)
            ax.broken_barh(
                [(t0 / 1e3, (t1 - t0) / 1e3)],
                (row - height / 2, height),
                color=color,
                label=name,
                zorder=2 + depth,
            )
    ax.set_yticks(range(len(events)), [f"{pid}" for pid in sorted(events)])
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("rank / agent")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(
        unique.values(),
        unique.keys(),
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )  # beside the bars, not on them
    if path is not None:
        figure: Any = ax.figure  # a Figure: the one made here, or the given axes'
        figure.tight_layout()
        figure.savefig(path, dpi=120)
    return ax


def main(argv: list[str] | None = None) -> int:
    """``python -m fogsim.timeline summarize PREFIX [--gantt FILE]``."""

    parser = argparse.ArgumentParser(
        prog="fogsim timeline", description="Summarize fogsim timeline files."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="time per phase per rank (and a Gantt chart)")
    s.add_argument("prefix", help="the PREFIX of PREFIX<rank>.json / PREFIX.json")
    s.add_argument("--gantt", metavar="FILE", help="save a Gantt chart to FILE (e.g. .png)")
    args = parser.parse_args(argv)
    summarize(args.prefix, gantt=args.gantt)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
