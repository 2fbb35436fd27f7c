"""The benchmark suite: every performance claim of fogsim against its in-run baseline.

    python -m benchmarks                          # everything (2-3 minutes on 2 cores)
    python -m benchmarks --quick                  # smaller grids, fewer rounds (1-2 minutes)
    python -m benchmarks --only mpi,fusion        # some of: sim, mpi, fusion, torch,
                                                  # torch_raw, hierarchy, timeline, spmd, kernels,
                                                  # notebooks, internal_numba, sharded,
                                                  # compress, clock, clock_host,
                                                  # clock_paper, data, experiments
                                                  # (SUITE below)
    python -m benchmarks -np 2                    # MPI/torch jobs on 2 processes (default 4)
    python -m benchmarks --compare OLD.json       # run, then the change from an earlier run
    python -m benchmarks --compare OLD.json NEW.json   # compare two saved runs, run nothing

Each benchmark script runs as it does alone (``python benchmarks/bench_mpi.py`` ...), with
``FOGSIM_BENCH_JSON`` naming a file it appends its rows to (see ``_record.py``). Printed:
each script's own output, then the machine and one table, a row per claim: its value, the
baseline measured in the same run, their ratio, the goal and whether it is met. The run
goes to ``--json`` (default ``benchmarks/results/latest.json``, git-ignored) as

    {"schema": 1, "when": ISO time, "command": str, "quick": bool, "np": int,
     "machine": {...}, "benchmarks": {name: {"command", "seconds", "busy_before",
                                             "returncode"}},
     "rows": [{"bench", "measure", "value", "baseline", "ratio", "unit", "goal", "note",
               "met"}]}

The hook for a new benchmark (``timeline`` came in this way): write
``benchmarks/bench_NAME.py`` that prints its own table, calls ``_record.record(...)`` for
each claim (value, in-run baseline, goal) and ``_record.save()`` at the end (on the main
rank only under MPI), then add one line ``"NAME": Entry("bench_NAME.py", full, quick)`` to
``SUITE``. Nothing else changes: ``--only``, the table, the JSON and ``--compare`` follow.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCHEMA = 1


@dataclass(frozen=True)
class Entry:
    """One benchmark of the suite: a script and its arguments."""

    script: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    mpi: bool = True  # the script takes -np (it relaunches itself on that many processes)


SUITE = {
    "sim": Entry(
        "bench_sim.py", quick=("--quick", "--mb", "8,64", "--million-steps", "5"), mpi=False
    ),
    "mpi": Entry(
        "bench_mpi.py",
        ("--part", "neighbor"),
        ("--part", "neighbor", "--sizes", "8,65536,4194304", "--rounds", "9"),
    ),
    "fusion": Entry("bench_mpi.py", ("--part", "fusion"), ("--part", "fusion", "--rounds", "9")),
    "torch": Entry("bench_torch.py", quick=("--sizes", "8,32", "--rounds", "3")),
    "torch_raw": Entry("bench_torch_raw.py", quick=("--rounds", "5")),
    "hierarchy": Entry("bench_hierarchy.py"),
    "timeline": Entry("bench_timeline.py"),
    "spmd": Entry("bench_spmd.py", quick=("--quick",), mpi=False),
    "kernels": Entry("bench_kernels.py", quick=("--quick",), mpi=False),
    "notebooks": Entry("bench_notebooks.py", quick=("--only", "01_consensus"), mpi=False),
    "internal_numba": Entry("bench_internal_numba.py", quick=("--quick",), mpi=False),
    "sharded": Entry("bench_sharded.py", quick=("--quick",), mpi=False),
    "compress": Entry("bench_compress.py", quick=("--quick",), mpi=False),
    "clock": Entry("bench_clock.py", quick=("--quick",), mpi=False),
    "clock_host": Entry("bench_clock_host.py", mpi=False),
    "clock_paper": Entry("bench_clock_paper.py", mpi=False),
    "data": Entry("bench_data.py", quick=("--quick",), mpi=False),
    "experiments": Entry("bench_experiments.py", quick=("--quick",), mpi=False),
}

_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def machine() -> dict:
    """Describe what the figures were measured on."""
    info: dict = {
        "cpu": platform.processor() or None,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        info["cpu"] = models[0] if models else info["cpu"]
        with open("/proc/meminfo") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
        info["memory_gb"] = round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    for package in ("numpy", "scipy", "torch", "mpi4py"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    try:
        import mpi4py

        mpi4py.rc.initialize = False  # the library version needs no MPI_Init in this process
        from mpi4py import MPI

        info["mpi"] = " ".join(MPI.Get_library_version().splitlines()[0].split())
    except ImportError:
        info["mpi"] = None
    try:
        from fogsim import _core

        info["fogsim_core_compiled"] = bool(_core.compiled)
    except ImportError:
        info["fogsim_core_compiled"] = None
    info["commit"] = info["dirty"] = None
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if head.returncode == 0:
            info["commit"] = head.stdout.strip()
            status = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            info["dirty"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def describe(info: dict) -> str:
    """The machine in three lines, for the top of the table."""
    fogsim = f"commit {info.get('commit') or 'unknown'}"
    if info.get("dirty"):
        fogsim += " with uncommitted changes"
    core = info.get("fogsim_core_compiled")
    compiled = {True: "compiled", False: "pure-Python fallback"}.get(core)
    return "\n".join(
        [
            f"machine: {info.get('cpu')}, {info.get('cores')} cores, "
            f"{info.get('memory_gb', '?')} GB, {info.get('platform')}",
            f"software: Python {info.get('python')}, numpy {info.get('numpy')}, scipy "
            f"{info.get('scipy')}, torch {info.get('torch')}, mpi4py {info.get('mpi4py')}, "
            f"{info.get('mpi')}",
            f"fogsim: {fogsim}" + (f", _core {compiled}" if compiled else ""),
        ]
    )


def met(row: dict) -> str | None:
    """Return "yes"/"no" against the row's goal, or None without one.

    ``"<= 1.1"`` is checked against the ratio (the value if there is none);
    ``"added <= 3 us"`` against value - baseline, both in seconds.
    """
    words = (row.get("goal") or "").split()
    if not words:
        return None
    if words[0] == "added":
        if row.get("value") is None or row.get("baseline") is None:
            return None
        x, words = row["value"] - row["baseline"], words[1:]
    else:
        x = row["ratio"] if row.get("ratio") is not None else row.get("value")
    op, bound, *unit = words
    limit = float(bound) * (_SCALE[unit[0]] if unit else 1.0)
    if x is None:
        return None
    return "yes" if (x <= limit if op == "<=" else x >= limit) else "no"


def busy(seconds: float = 1.0) -> float | None:
    """Return the share of all cores other processes kept busy over ``seconds``.

    Called while the suite runs nothing, so it sees only the machine's other jobs (a
    load average would still count the benchmark that just ended). None without
    /proc/stat.
    """

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return round(1 - (idle1 - idle0) / max(1, total1 - total0), 2)


def run(names: list[str], quick: bool, np_: int) -> tuple[list[dict], dict]:
    """Run the named benchmarks one after the other; return their rows and how each went."""
    rows: list[dict] = []
    jobs: dict = {}
    for name in names:
        entry = SUITE[name]
        args = [*(entry.quick if quick else entry.full), *(["-np", str(np_)] if entry.mpi else [])]
        cmd = [sys.executable, str(HERE / entry.script), *args]
        print(f"\n== {name}: python benchmarks/{entry.script} {' '.join(args)}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "rows.jsonl"
            env = {**os.environ, "FOGSIM_BENCH_JSON": str(out)}
            others = busy()
            if others is not None and others > 0.25:
                print(
                    f"   note: other processes keep {others:.0%} of the {os.cpu_count()} "
                    "cores busy: expect noisy figures",
                    flush=True,
                )
            t0 = time.perf_counter()
            try:
                code = subprocess.run(cmd, env=env, cwd=HERE, timeout=1800).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            jobs[name] = {
                "command": shlex.join(["python", f"benchmarks/{entry.script}", *args]),
                "seconds": round(time.perf_counter() - t0, 1),
                "busy_before": others,
                "returncode": code,
            }
            if code != 0:
                print(f"   {name} failed ({code}); its rows are missing", flush=True)
            if out.exists():
                rows += [json.loads(line) for line in out.read_text().splitlines() if line]
    for row in rows:
        row["met"] = met(row)
    return rows, jobs


def _number(x: float | None, unit: str) -> str:
    if x is None:
        return ""
    if unit == "s":
        for scale, name in ((1e-6, "us"), (1e-3, "ms")):
            if abs(x) < 1000 * scale:
                return f"{x / scale:.4g} {name}"
        return f"{x:.4g} s"
    return (f"{x:.0f} {unit}" if abs(x) >= 1000 else f"{x:.4g} {unit}").rstrip()


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _columns(header: list[str], lines: list[list[str]], left: int = 2) -> str:
    """Align ``lines`` under ``header``: the first ``left`` columns left, the rest right."""
    widths = [max(len(r[k]) for r in [header, *lines]) for k in range(len(header))]

    def fmt(r: list[str]) -> str:
        cells = [
            c.ljust(w) if k < left else c.rjust(w)
            for k, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *map(fmt, lines)])


def table(rows: list[dict]) -> str:
    """One line per row: benchmark, measure (note), value, baseline, ratio, goal, met."""
    lines = [
        [
            r["bench"],
            r["measure"] + (f" ({r['note']})" if r.get("note") else ""),
            _number(r.get("value"), r.get("unit", "")),
            _number(r.get("baseline"), r.get("unit", "")),
            _ratio(r.get("ratio")),
            r.get("goal") or "",
            r.get("met") or "-",
        ]
        for r in rows
    ]
    return _columns(["benchmark", "measure", "value", "baseline", "ratio", "goal", "met"], lines)


def _figure(row: dict) -> tuple[float | None, str]:
    """The figure a row's goal is about, and its unit ("" for a ratio)."""
    added = (row.get("goal") or "").startswith("added")
    if added and row.get("value") is not None and row.get("baseline") is not None:
        return row["value"] - row["baseline"], row.get("unit", "")
    if row.get("ratio") is not None:
        return row["ratio"], ""
    return row.get("value"), row.get("unit", "")


def compare(old: dict, new: dict) -> str:
    """The change of each row's figure (its ratio, else its value) from ``old`` to ``new``."""
    head = []
    for label, run_ in (("before", old), ("after", new)):
        m = run_.get("machine", {})
        head.append(
            f"{label}: {run_.get('when')}, commit {m.get('commit')}"
            f"{' (dirty)' if m.get('dirty') else ''}, {run_.get('command')}"
        )
    mo, mn = old.get("machine", {}), new.get("machine", {})
    if (mo.get("cpu"), mo.get("cores")) != (mn.get("cpu"), mn.get("cores")):
        head.append("note: the runs are from different machines")
    if old.get("np") != new.get("np"):
        head.append(
            f"note: the MPI and torch jobs ran on {old.get('np')} then {new.get('np')} processes"
        )
    if old.get("quick") != new.get("quick"):
        head.append("note: one run is --quick, the other not; some rows differ in grid")

    before = {(r["bench"], r["measure"]): r for r in old.get("rows", [])}
    after = {(r["bench"], r["measure"]): r for r in new.get("rows", [])}
    lines = []
    for key in (k for k in after if k in before):
        b, a = before[key], after[key]
        (fb, unit), (fa, _) = _figure(b), _figure(a)
        shown = [_number(f, unit) if unit else _ratio(f) for f in (fb, fa)]
        if fa is None or fb is None:
            change = ""
        elif (a.get("goal") or "").startswith("added"):
            change = ("+" if fa >= fb else "-") + _number(abs(fa - fb), unit)
        else:
            change = f"{fa / fb:.3g}x" if fb else ""
        verdicts = " -> ".join(r.get("met") or "-" for r in (b, a))
        lines.append([*key, *shown, change, a.get("goal") or "", verdicts])
    header = ["benchmark", "measure", "before", "after", "change", "goal", "met"]
    out = [
        *head,
        "(the figure the goal is about: the time added for 'added' goals, else the "
        "ratio where the row has one, else the value)",
        _columns(header, lines),
    ]
    for label, mine, other in (("only before", before, after), ("only after", after, before)):
        alone = [k for k in mine if k not in other]
        if alone:
            benches = sorted({k[0] for k in alone})
            out.append(f"{len(alone)} rows {label} (in {', '.join(benches)}): not compared")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SUITE), help=f"comma-separated: {', '.join(SUITE)}")
    p.add_argument("--quick", action="store_true", help="smaller grids, fewer rounds")
    p.add_argument("-np", type=int, default=4, help="processes of the MPI and torch jobs")
    p.add_argument(
        "--json",
        default=str(HERE / "results" / "latest.json"),
        help="the run as JSON (default: benchmarks/results/latest.json)",
    )
    p.add_argument(
        "--compare",
        nargs="+",
        metavar="JSON",
        help="OLD.json: run, then print the change from it; "
        "OLD.json NEW.json: print the change between two saved runs only",
    )
    args = p.parse_args(argv)
    if args.compare and len(args.compare) > 2:
        p.error("--compare takes OLD.json, or OLD.json NEW.json")
    try:
        runs = [json.loads(Path(f).read_text()) for f in args.compare or []]
    except (OSError, ValueError) as e:
        p.error(f"--compare: {e}")
    if len(runs) == 2:
        print(compare(*runs))
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SUITE))
    if unknown:
        p.error(f"unknown benchmarks {unknown}; choose from {', '.join(SUITE)}")
    info = machine()
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    print(describe(info))
    rows, jobs = run(names, args.quick, args.np)
    minutes = sum(j["seconds"] for j in jobs.values()) / 60
    loads = ", ".join(
        f"{name} {job['busy_before']:.0%}"
        for name, job in jobs.items()
        if job["busy_before"] is not None
    )
    print(
        f"\n{command}  ({when}, {minutes:.1f} min)\n{describe(info)}\n"
        f"CPU used by other processes just before each benchmark: {loads}\n"
        f"{table(rows)}"
    )
    result = {
        "schema": SCHEMA,
        "when": when,
        "command": command,
        "quick": args.quick,
        "np": args.np,
        "machine": info,
        "benchmarks": jobs,
        "rows": rows,
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwritten to {path}")
    if runs:
        print("\n" + compare(runs[0], result))
    failed = [name for name, job in jobs.items() if job["returncode"] != 0]
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
