"""Two commits of fogsim measured in one run: is a change free of slow-downs?

    python -m benchmarks.trees BEFORE AFTER                  # e.g. 30350be HEAD
    python -m benchmarks.trees BEFORE AFTER --only sim,mpi,fusion --rounds 3 --full

Each commit is checked out once into ``benchmarks/results/trees/<commit>`` (a detached git
worktree) and its compiled kernels are built there. Then the suite (``python -m
benchmarks``, quick grids unless ``--full``) runs ``--rounds`` times per commit, the two
commits alternating (A B B A A B ...), so that drifting machine load hits both alike. Both
commits are measured by *this* checkout's benchmark scripts, with ``PYTHONPATH`` pointing
at the commit's tree, so the method is the same and only fogsim differs.

Printed: one row per claim of the suite, with the median over rounds of the figure its goal
is about (the ratio to the in-run baseline, or the added time), before and after, the
change, and the spread between the rounds of one commit (the noise a change must exceed to
mean anything). The whole run goes to ``--json`` (default
``benchmarks/results/trees.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .__main__ import ROOT, _figure

TREES = ROOT / "benchmarks" / "results" / "trees"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def checkout(ref: str) -> Path:
    """Return a built tree of commit ``ref`` (made once, then reused)."""
    commit = _git("rev-parse", "--short=10", ref)
    tree = TREES / commit
    if not (tree / "fogsim").is_dir():
        TREES.mkdir(parents=True, exist_ok=True)
        _git("worktree", "add", "--detach", "--force", str(tree), commit)
    built = list((tree / "fogsim" / "_core").glob("*.so"))
    if not built:
        print(f"building fogsim {commit} in {tree} ...", flush=True)
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=tree,
            check=True,
            capture_output=True,
        )
    return tree


def measure(tree: Path, only: str, quick: bool, np_: int) -> list[dict]:
    """Run the suite once on ``tree``'s fogsim; return its rows."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "benchmarks", "--only", only, "-np", str(np_)]
        cmd += ["--json", str(out), *(["--quick"] if quick else [])]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            cmd, cwd=ROOT, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        if done.returncode != 0:  # a benchmark failed: its rows are missing from this round
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            print(f"   fogsim at {tree.name}: the suite failed ({done.returncode}):", flush=True)
            print("\n".join("   | " + line for line in tail), flush=True)
        if not out.exists():
            return []
        return list(json.loads(out.read_text())["rows"])


def summarize(runs: dict[str, list[list[dict]]], before: str, after: str) -> str:
    """A markdown table: each row's median figure per commit, the change and the noise."""
    keys: list[tuple[str, str]] = []
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}
    units: dict[tuple[str, str], str] = {}
    for label, rounds in runs.items():
        for rows in rounds:
            for row in rows:
                key = (row["bench"], row["measure"])
                value, unit = _figure(row)
                if value is None:
                    continue
                if key not in figures:
                    keys.append(key)
                    figures[key] = {before: [], after: []}
                figures[key][label].append(value)
                units[key] = unit
    lines = [
        f"| benchmark | measure | {before} | {after} | change | spread {before} | spread {after} |",
        "|---|---|---|---|---|---|---|",
    ]

    def show(v: float, unit: str) -> str:
        return f"{v * 1e6:.1f} us" if unit == "s" else f"{v:.3g}"

    def spread(vs: list[float]) -> str:
        if len(vs) < 2 or statistics.median(vs) == 0:
            return "-"
        return f"{(max(vs) - min(vs)) / abs(statistics.median(vs)):.0%}"

    for key in keys:
        a, b = figures[key][before], figures[key][after]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        change = f"{mb / ma - 1:+.1%}" if ma else "-"
        unit = units[key]
        lines.append(
            f"| {key[0]} | {key[1]} | {show(ma, unit)} | {show(mb, unit)} | {change} | "
            f"{spread(a)} | {spread(b)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trees", description=__doc__)
    parser.add_argument("before", help="the earlier commit (any git ref)")
    parser.add_argument("after", help="the later commit (any git ref)")
    parser.add_argument("--only", default="sim,mpi,fusion", help="benchmarks to run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per commit (default 3)")
    parser.add_argument("--full", action="store_true", help="full grids instead of --quick")
    parser.add_argument("-np", dest="np_", type=int, default=4, help="MPI processes")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "trees.json"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    trees = {ref: checkout(ref) for ref in (args.before, args.after)}
    runs: dict[str, list[list[dict]]] = {ref: [] for ref in trees}
    order = [args.before, args.after]
    for k in range(args.rounds):
        for ref in order if k % 2 == 0 else order[::-1]:  # A B, B A, A B, ...
            print(f"round {k + 1}/{args.rounds}: {ref}", flush=True)
            runs[ref].append(measure(trees[ref], args.only, not args.full, args.np_))
    text = summarize(runs, args.before, args.after)
    print(text)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"runs": runs, "table": text}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
