"""The benchmark suite: every performance claim of fogsim against its in-run baseline.

    python -m benchmarks                      # everything (about 10 minutes here)
    python -m benchmarks --quick              # smaller grids and fewer rounds
    python -m benchmarks --only mpi,timeline  # some of: sim, mpi, torch, hierarchy, timeline
    python -m benchmarks --compare OLD.json   # also print the change from an earlier run

Each benchmark script runs as it does alone (``python benchmarks/bench_mpi.py`` ...) with
``FOGSIM_BENCH_JSON`` set, so it also writes its rows (see ``_record.py``). Printed: the
machine, then one row per measure with its value, its baseline and ratio where it has
one, the goal and whether it is met. The rows and the machine go to ``--json``
(default ``benchmarks/results/latest.json``) for comparison between commits.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# name -> (script, full arguments, quick arguments)
SUITE = {
    "sim": ("bench_sim.py", [], ["--quick"]),
    "mpi": ("bench_mpi.py", [], []),
    "torch": ("bench_torch.py", [], ["--sizes", "8,32", "--rounds", "3"]),
    "hierarchy": ("bench_hierarchy.py", [], []),
    "timeline": ("bench_timeline.py", [], []),
}


def machine() -> dict:
    """What the figures were measured on."""
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cores": os.cpu_count()}  # fmt: skip
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f
                               if line.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        info["cpu"] = platform.processor() or "unknown"
    for module in ("numpy", "torch", "mpi4py"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            info[module] = None
    try:
        from mpi4py import MPI

        info["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
    except ImportError:
        info["mpi"] = None
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True,
                                        timeout=10).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        info["commit"] = None
    return info


def met(row: dict) -> str:
    """"yes"/"no" against the goal (on the ratio if there is one, else the value), or "-"."""
    goal = row.get("goal")
    if not goal:
        return "-"
    op, bound = goal.split()
    x = row["ratio"] if row.get("ratio") is not None else row["value"]
    ok = x <= float(bound) if op == "<=" else x >= float(bound)
    return "yes" if ok else "no"


def run(names: list[str], quick: bool) -> list[dict]:
    rows: list[dict] = []
    for name in names:
        script, full, fast = SUITE[name]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.jsonl"
            env = {**os.environ, "FOGSIM_BENCH_JSON": str(out)}
            cmd = [sys.executable, str(HERE / script), *(fast if quick else full)]
            print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
            done = subprocess.run(cmd, env=env, cwd=HERE, timeout=3600)
            if done.returncode != 0:
                print(f"   {name} failed (exit {done.returncode}); its rows are missing")
            if out.exists():
                rows += [json.loads(line) for line in out.read_text().splitlines() if line]
    return rows


def table(rows: list[dict], old: dict | None = None) -> str:
    lines = [f"{'benchmark':<10} {'measure':<66} {'value':>16} {'ratio':>7} {'goal':>8} "
             f"{'met':>4}" + ("  before" if old else "")]  # fmt: skip
    before = {(r["bench"], r["measure"]): r for r in (old or {}).get("rows", [])}
    for r in rows:
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        value = f"{r['value']:.4g}" + (f" {r['unit']}" if r.get("unit") else "")
        line = (f"{r['bench']:<10} {r['measure'][:66]:<66} {value:>16} {ratio:>7} "
                f"{r.get('goal') or '':>8} {met(r):>4}")  # fmt: skip
        if old:
            b = before.get((r["bench"], r["measure"]))
            line += "  " + ("new" if b is None else
                            f"{b['ratio'] if b.get('ratio') is not None else b['value']:.4g}")
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SUITE), help=f"comma-separated: {', '.join(SUITE)}")
    p.add_argument("--quick", action="store_true", help="smaller grids, fewer rounds")
    p.add_argument("--json", default=str(HERE / "results" / "latest.json"), help="rows out")
    p.add_argument("--compare", metavar="OLD.json", help="print the change from this run")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SUITE))
    if unknown:
        p.error(f"unknown benchmarks {unknown}; choose from {', '.join(SUITE)}")
    old = json.loads(Path(args.compare).read_text()) if args.compare else None
    info = machine()
    rows = run(names, args.quick)
    print("\nmachine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(table(rows, old))
    result = {"when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "quick": args.quick, "machine": info, "rows": rows}  # fmt: skip
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nrows written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
