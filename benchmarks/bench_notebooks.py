"""How long each teaching notebook takes to run top to bottom, headless, as the tests run it.

The claim (notebooks/README.md): each runs in the simulator in well under a minute on a
laptop, kernel start included. The baseline, measured in the same run, is a notebook of one
cell that starts the same kernel and imports fogsim and numpy; the goal is on the time a
notebook adds to it. Printed: seconds per notebook, the baseline and the ratio. The tests
(tests/test_notebooks.py) check that the notebooks run without errors, not how fast.

    python benchmarks/bench_notebooks.py                    # every notebook
    python benchmarks/bench_notebooks.py --only 01_consensus
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _record import record, save

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
GOAL_SECONDS = 60  # "well under a minute", beyond starting the kernel


def run_seconds(nb, nbclient) -> float:
    """Seconds to execute notebook ``nb`` (a fresh kernel started from notebooks/)."""
    resources = {"metadata": {"path": str(NOTEBOOK_DIR)}}  # run from notebooks/, as Jupyter does
    client = nbclient.NotebookClient(
        nb, timeout=10 * GOAL_SECONDS, kernel_name="python3", resources=resources
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    if errors:
        raise SystemExit(f"the notebook failed: {errors[0].ename}: {errors[0].evalue}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated notebook names (no .ipynb)")
    args = parser.parse_args(argv)
    try:
        import nbclient
        import nbformat
    except ImportError:
        raise SystemExit("needs the notebooks extra: pip install -e '.[notebooks]'") from None
    paths = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if args.only:
        wanted = set(args.only.split(","))
        paths = [p for p in paths if p.stem in wanted]
    empty = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import fogsim, numpy")])
    base = run_seconds(empty, nbclient)
    header = f"{'notebook':<40} {'seconds':>8} {'baseline':>9} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for path in paths:
        seconds = run_seconds(nbformat.read(path, as_version=4), nbclient)
        print(f"{path.name:<40} {seconds:>8.1f} {base:>9.1f} {seconds / base:>6.1f}")
        record(
            "notebooks",
            f"{path.name}, top to bottom vs an empty notebook",
            seconds,
            base,
            goal=f"added <= {GOAL_SECONDS} s",
        )
    save()


if __name__ == "__main__":
    main()
