"""Mutation check: deliberate faults that the test suite must catch (not run by pytest).

Each mutation below is one small, named fault in fogsim's source: an exact ``old`` snippet
replaced by ``new`` in a temporary copy of the working tree. The script applies them one at
a time, runs the part of the suite that should notice (``tests``: pytest arguments), and
reports the mutation *killed* (a selected test failed) or *survived* (they all passed).
Every mutation must be killed; one that survives is a gap in the suite, to be closed by a
test. Faults in the compiled code (``fogsim/_core/*.pyx``/``*.pxi``) are built into the
copy's extension first, since the compiled code is what runs by default.

Usage (from the repository root)::

    .venv/bin/python tests/mutations.py --list
    .venv/bin/python tests/mutations.py [NAME ...] [--table TESTING.md] [--keep]

Before any mutation, the unmutated copy runs every selection once: a kill is never a failure
that was there already. An ``old`` snippet that is not found exactly once is an error of the
script (the code moved: update the mutation), never a kill; so are pytest's usage errors,
interruptions and "no tests collected". ``--table FILE`` rewrites the table between the
markers ``<!-- mutations:begin -->`` and ``<!-- mutations:end -->`` of FILE. Later features
add their mutations to :data:`MUTATIONS`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- mutations:begin -->", "<!-- mutations:end -->"
if __package__:  # python -m tests.mutations
    from .mutation_cases import MUTATIONS, Mutation
else:  # python tests/mutations.py
    from mutation_cases import MUTATIONS, Mutation


# -- the temporary copy -------------------------------------------------------------------
def _source_files() -> list[str]:
    """Tracked and untracked (not ignored) files of the working tree that exist."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (ROOT / f).is_file()})


def make_copy(dest: Path) -> None:
    """Copy the sources and the built extension (``.so`` and generated ``.c``) to ``dest``.

    ``copy2`` keeps modification times, so a rebuild regenerates only what a mutation
    touched.
    """
    files = _source_files()
    core = ROOT / "fogsim" / "_core"
    files += [str(p.relative_to(ROOT)) for p in core.iterdir() if p.suffix in (".so", ".c")]
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)


def child_env(copy: Path) -> dict[str, str]:
    """The environment of everything run in the copy: it imports fogsim from the copy."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOGSIM_")}
    env.update(
        PYTHONPATH=str(copy),
        NUMBA_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def check_imports_copy(copy: Path, want_compiled: bool) -> None:
    """Abort unless ``import fogsim`` in the copy's environment loads the copy (from a
    directory outside it, as the MPI processes that tests launch may run)."""
    code = "import fogsim, fogsim._core as c; print(fogsim.__file__); print(c.compiled)"
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=copy.parent,
        env=child_env(copy),
        capture_output=True,
        text=True,
    )
    lines = run.stdout.split()
    if run.returncode or len(lines) != 2:
        sys.exit(f"mutations: importing fogsim in the copy failed:\n{run.stderr}")
    where, compiled = Path(lines[0]).resolve(), lines[1] == "True"
    if copy.resolve() not in where.parents:
        sys.exit(
            f"mutations: fogsim is imported from {where}, not from the copy {copy}; "
            "PYTHONPATH does not win over the installed package, so nothing would be "
            "tested"
        )
    if want_compiled and not compiled:
        sys.exit(
            "mutations: the copy runs without the compiled extension "
            "(fogsim._core.compiled is False)"
        )


def apply(m: Mutation, copy: Path) -> None:
    path = copy / m.path
    text = path.read_text()
    text = text.replace(m.old, m.new, 1)
    path.write_text(text)


def check_snippet(m: Mutation) -> str | None:
    """Return why ``m`` cannot be applied to the working tree, or None."""
    path = ROOT / m.path
    if not path.is_file():
        return f"{m.path} does not exist"
    count = path.read_text().count(m.old)
    if count != 1:
        return f"its old snippet occurs {count} times in {m.path} (must be exactly once)"
    if m.old == m.new:
        return "old and new are the same"
    return None


def build(copy: Path) -> None:
    """Rebuild the copy's compiled extension; abort when it does not build."""
    core = copy / "fogsim" / "_core"
    before = {p.name: p.stat().st_mtime_ns for p in core.glob("*.so")}
    run = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=copy,
        env=child_env(copy),
        capture_output=True,
        text=True,
    )
    if run.returncode:
        sys.exit(f"mutations: building the mutated extension failed:\n{run.stderr[-3000:]}")
    after = {p.name: p.stat().st_mtime_ns for p in core.glob("*.so")}
    if after == before:
        sys.exit("mutations: the build rebuilt no extension module; the mutation would not run")


# -- running the tests --------------------------------------------------------------------
@dataclass
class Outcome:
    status: str  # "killed", "survived" or "error"
    failed: str  # the first failed test (or the reason of an error)
    seconds: float
    detail: str = ""


# SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV: a crash the fault caused (a kill), unlike a
# process stopped from outside (SIGINT, SIGTERM, SIGKILL: an error of the run)
_CRASHES = (4, 6, 7, 8, 11)
# "FAILED node id - message": a node id's parameters may hold spaces
_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.MULTILINE)


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> Outcome:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    start = time.monotonic()
    try:
        run = subprocess.run(
            cmd, cwd=copy, env=child_env(copy), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return Outcome("error", f"timed out after {timeout:.0f} s", time.monotonic() - start)
    seconds = time.monotonic() - start
    output = run.stdout + run.stderr
    rc = run.returncode
    if rc == 0:
        return Outcome("survived", "", seconds, output[-2000:])
    if rc == 1:
        found = _FAILED.search(output)
        return Outcome(
            "killed", found.group(1) if found else "(a test failed)", seconds, output[-4000:]
        )
    if -rc in _CRASHES:  # the fault crashed the test process
        return Outcome("killed", f"pytest died of signal {-rc}", seconds, output[-4000:])
    why = {
        2: "interrupted (collection error?)",
        3: "internal error",
        4: "usage error",
        5: "no tests collected",
    }.get(rc, f"exit code {rc}")
    return Outcome("error", f"pytest: {why}", seconds, output[-4000:])


def baseline(copy: Path, selections: list[tuple[str, ...]], timeout: float) -> None:
    """Abort unless every selection passes on the unmutated copy."""
    for tests in selections:
        outcome = run_tests(copy, tests, timeout)
        passed = "passed" if outcome.status == "survived" else outcome.status
        print(f"baseline {' '.join(tests)}: {passed} ({outcome.seconds:.1f} s)", flush=True)
        if outcome.status != "survived":
            sys.exit(
                f"mutations: the unmutated copy does not pass {' '.join(tests)} "
                f"({outcome.failed}):\n{outcome.detail}"
            )


def run_mutation(
    m: Mutation, tmp: Path, timeout: float, want_compiled: bool, keep: bool
) -> Outcome:
    copy = tmp / m.name
    make_copy(copy)
    start = time.monotonic()
    try:
        apply(m, copy)
        if m.compiled:
            build(copy)
        check_imports_copy(copy, want_compiled)
        outcome = run_tests(copy, m.tests, timeout)
        outcome.seconds = time.monotonic() - start
        return outcome
    finally:
        if not keep:
            shutil.rmtree(copy, ignore_errors=True)


# -- the table ----------------------------------------------------------------------------
def table(rows: list[tuple[Mutation, Outcome]], total: float) -> str:
    lines = [
        "| Mutation | What it breaks | Killed by | Seconds |",
        "|---|---|---|---|",
    ]
    for m, o in rows:
        failed = o.failed.replace("|", "\\|")
        by = f"`{failed}`" if o.status == "killed" else f"**{o.status.upper()}** {failed}"
        lines.append(f"| `{m.name}` | {m.breaks} (`{m.path}`) | {by} | {o.seconds:.0f} |")
    killed = sum(o.status == "killed" for _, o in rows)
    lines.append("")
    lines.append(
        f"{killed} of {len(rows)} mutations killed; {total:.0f} s in all (baseline, "
        "copies and rebuilds included)."
    )
    return "\n".join(lines)


def write_table(path: Path, text: str) -> None:
    """Replace what lies between the markers of ``path`` with ``text``."""
    content = path.read_text()
    if content.count(BEGIN) != 1 or content.count(END) != 1:
        sys.exit(f"mutations: {path} must hold the markers {BEGIN} and {END} once each")
    head, rest = content.split(BEGIN)
    _, tail = rest.split(END)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--table", type=Path, help="write the table into this file")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for one pytest run (default 300)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the end of pytest's output for each mutation",
    )
    args = parser.parse_args(argv)

    names = [m.name for m in MUTATIONS]
    if len(set(names)) != len(names):
        sys.exit("mutations: two mutations share a name")
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:40} {m.breaks}")
        return 0
    unknown = sorted(set(args.names) - set(names))
    if unknown:
        sys.exit(f"mutations: no mutation named {', '.join(unknown)} (see --list)")
    chosen = [m for m in MUTATIONS if not args.names or m.name in args.names]
    stale = [f"  {m.name}: {why}" for m in chosen if (why := check_snippet(m))]
    if stale:
        sys.exit("mutations: stale mutations (the code moved; update them):\n" + "\n".join(stale))

    import fogsim._core  # what the working tree runs: the copy must run the same

    want_compiled = fogsim._core.compiled
    start = time.monotonic()
    rows: list[tuple[Mutation, Outcome]] = []
    with tempfile.TemporaryDirectory(prefix="fogsim-mutations-") as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "baseline"
        make_copy(base)
        check_imports_copy(base, want_compiled)
        baseline(base, list(dict.fromkeys(m.tests for m in chosen)), args.timeout)
        shutil.rmtree(base)
        for m in chosen:
            o = run_mutation(m, tmp, args.timeout, want_compiled, args.keep)
            rows.append((m, o))
            print(f"{m.name:40} {o.status:8} {o.seconds:6.1f} s  {o.failed}", flush=True)
            if args.verbose or o.status != "killed":
                print(o.detail, flush=True)
        if args.keep:
            kept = Path(tempfile.mkdtemp(prefix="fogsim-mutations-kept-"))
            for m in chosen:
                shutil.move(str(tmp / m.name), kept / m.name)
            print(f"mutated copies kept in {kept}")
    total = time.monotonic() - start
    text = table(rows, total)
    print(text)
    if args.table is not None:
        write_table(args.table, text)
    return 0 if all(o.status == "killed" for _, o in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
