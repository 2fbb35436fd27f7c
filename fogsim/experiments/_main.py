"""The command line: ``python -m fogsim.experiments SPEC.json [options]``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._configs import grid
from ._sweep import RunFunction, SweepError, sweep

__all__ = ["main"]

_KEYS = {
    "run",
    "grid",
    "cache",
    "version",
    "n_jobs",
    "backend",
    "stack_seeds",
    "csv",
    "runs_csv",
    "summary",
    "plot",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Sweep the grid of a JSON spec; write its tables and plot; return the exit code.

    The spec (keys other than ``grid`` optional)::

        {"grid": {"algorithm": ["dgd", "exact_diffusion"], "alpha": [0.01, 0.03],
                  "seed": [0, 1, 2, 3], "iters": 200},
         "run": "fogsim.experiments:optimize",   # or "package.module:function"
         "cache": "runs/", "version": null, "n_jobs": 2, "backend": null,
         "stack_seeds": false,
         "csv": "rows.csv", "runs_csv": "runs.csv",
         "summary": {"metric": "distance", "by": ["algorithm", "alpha"]},
         "plot": {"metric": "distance", "x": "iteration", "hue": "alpha",
                  "col": "algorithm", "path": "distance.png"}}

    ``grid`` holds :func:`grid`'s axes (a single value: every run's setting). Relative
    paths are taken from the spec's folder. Options on the command line override the
    spec's: ``-j/--n-jobs``, ``--backend``, ``--cache``, ``--csv``, ``--stack-seeds``,
    ``--no-progress``. Exit code 0, or 1 when runs failed (listed on stderr), 2 for a
    bad spec.
    """
    parser = argparse.ArgumentParser(
        prog="python -m fogsim.experiments",
        description="Sweep a grid of simulated runs written in a JSON spec.",
    )
    parser.add_argument("spec", help="the JSON spec (see fogsim.experiments.main)")
    parser.add_argument("-j", "--n-jobs", type=int, default=None, help="runs at once")
    parser.add_argument("--backend", default=None, help="joblib backend (loky, dask, ray)")
    parser.add_argument("--cache", default=None, help="cache folder")
    parser.add_argument("--csv", default=None, help="write the tidy rows here")
    parser.add_argument("--stack-seeds", action="store_true", default=None)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        spec, base = _read(args.spec)
        run = _function(spec.get("run", "fogsim.experiments:optimize"))
        axes = spec["grid"]
        if not isinstance(axes, dict):
            raise ValueError("spec: 'grid' must be an object of axes")
        configs = grid(**axes)
    except (OSError, ValueError, TypeError, ImportError, AttributeError) as exc:
        print(f"fogsim.experiments: {exc}", file=sys.stderr)
        return 2

    def path(value: Any) -> Path | None:
        return None if value is None else base / str(value)

    try:
        results = sweep(
            run,
            configs,
            cache=path(args.cache or spec.get("cache")),
            version=spec.get("version"),
            n_jobs=args.n_jobs if args.n_jobs is not None else spec.get("n_jobs", 1),
            backend=args.backend or spec.get("backend"),
            progress=not args.no_progress,
            stack_seeds=bool(args.stack_seeds or spec.get("stack_seeds", False)),
        )
        code = 0
    except SweepError as exc:
        for config, text in exc.failures:
            print(f"failed: {json.dumps(config)}\n{text}", file=sys.stderr)
        results, code = exc.results, 1
    except (ValueError, TypeError) as exc:
        print(f"fogsim.experiments: {exc}", file=sys.stderr)
        return 2
    print(
        f"{len(results)} runs: {results.computed} computed, {results.cached} from the cache"
        + (
            f", {sum(len(s['seeds']) for s in results.stacked)} with seeds stacked"
            if results.stacked
            else ""
        )
    )
    csv_path = path(args.csv or spec.get("csv"))
    if csv_path is not None and len(results):
        results.to_csv(csv_path)
        print(f"rows: {csv_path}")
    if spec.get("runs_csv") and len(results):
        results.to_csv(base / spec["runs_csv"], what="runs")
        print(f"runs: {base / spec['runs_csv']}")
    if spec.get("summary") and len(results):
        options = dict(spec["summary"])
        for row in results.summary(options.pop("metric"), **options):
            print(
                "  ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                )
            )
    if spec.get("plot") and len(results):
        options = dict(spec["plot"])
        target = base / options.pop("path", "sweep.png")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        drawn = results.plot(options.pop("metric"), **options)
        figure = (drawn[0] if isinstance(drawn, list) else drawn).figure
        figure.tight_layout()
        figure.savefig(target)
        plt.close(figure)
        print(f"plot: {target}")
    return code


def _read(spec: str) -> tuple[dict[str, Any], Path]:
    path = Path(spec)
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{spec}: the spec must be a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValueError(f"{spec}: unknown key {unknown[0]!r} (known: {sorted(_KEYS)})")
    if "grid" not in data:
        raise ValueError(f"{spec}: the spec needs a 'grid'")
    return data, path.resolve().parent


def _function(name: Any) -> RunFunction:
    """Return the function ``"package.module:function"`` names."""
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(f"spec: 'run' must be 'module:function', got {name!r}")
    module, _, attr = name.partition(":")
    value = importlib.import_module(module)
    for part in attr.split("."):
        value = getattr(value, part)
    if not callable(value):
        raise TypeError(f"spec: 'run' {name!r} is not a function")
    fn: RunFunction = value
    return fn
