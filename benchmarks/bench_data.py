"""Cost of a stacked per-agent batch (fogsim.data.AgentLoader) against one gather of its rows.

    python benchmarks/bench_data.py            # 1,000 agents, b = 32, 10^5 samples
    python benchmarks/bench_data.py --quick    # fewer rounds

The data: 10^5 samples of 20 float64 features and an int64 label (scikit-learn's
``make_classification`` when it is installed, else standard normal draws), split IID over
1,000 simulated agents by one seeded permutation cut into equal parts (100 samples each).
A step draws one stacked batch, ``(1000, 32, 20)`` and ``(1000, 32)``: every agent its own
32 samples, so each agent starts a new epoch (a new shuffle of its shard) every 3.125
steps. The baseline, measured in the same run, is one numpy fancy-indexing gather
``X[idx]`` (and ``y[idx]``) of the same 32,000 rows, the least any loader must do. The two
alternate in rounds of 64 steps (mean per step, median over rounds); the loader runs past
its switch to compiled code first. Printed: microseconds per step and the ratio (goal <= 2)
for ``(X, y)`` and ``X`` alone in both modes (epochs, sampling with replacement), and for
a torch ``TensorDataset`` against ``X_t[idx]`` on tensors; and, as information, ``X`` in
epochs against ``X.take(idx, axis=0)``, the gather the loader itself uses (about twice as
fast as ``X[idx]``), which shows what drawing the order costs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from _record import record, save

import fogsim as fs
from fogsim.data import AgentLoader

N_SAMPLES, FEATURES, AGENTS, BATCH = 100_000, 20, 1000, 32


def dataset() -> tuple[np.ndarray, np.ndarray, str]:
    """The samples and labels, and where they come from."""
    try:
        from sklearn.datasets import make_classification
    except ImportError:
        rng = np.random.default_rng(0)
        X = rng.standard_normal((N_SAMPLES, FEATURES))
        return X, (X[:, 0] > 0).astype(np.int64), "numpy standard normal"
    X, y = make_classification(N_SAMPLES, FEATURES, random_state=0)
    return X, y.astype(np.int64), "sklearn make_classification"


def per_step(fn: Callable[[], object], steps: int) -> float:
    """Mean seconds per call over ``steps`` calls."""
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def compare(
    loader: AgentLoader, baseline: Callable[[np.ndarray], object], rounds: int, steps: int
) -> tuple[float, float]:
    """Median over rounds of (seconds per loader step, seconds per baseline gather)."""
    while loader.step * AGENTS * BATCH < (1 << 21):  # past the switch to compiled code
        loader.next()
    ours, theirs = [], []
    for _ in range(rounds):
        idx = [loader.indices() for _ in range(steps)]  # the rows of the next steps
        loader.step -= steps
        it = iter(idx)
        theirs.append(per_step(lambda it=it: baseline(next(it)), steps))
        ours.append(per_step(loader.next, steps))
    return statistics.median(ours), statistics.median(theirs)


def row(label: str, ours: float, theirs: float, goal: str | None = "<= 2") -> None:
    ratio = ours / theirs
    print(f"  {label:<44}{1e6 * ours:>10.0f}{1e6 * theirs:>10.0f}{ratio:>8.2f}")
    record(
        "data",
        f"{AGENTS} agents, b={BATCH}, {N_SAMPLES} samples: {label} / one gather of its rows",
        ours,
        theirs,
        goal=goal,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args(argv)
    rounds, steps = (5, 32) if args.quick else (11, 64)
    X, y, source = dataset()
    fs.init(size=AGENTS)
    shards = np.array_split(np.random.default_rng(0).permutation(N_SAMPLES), AGENTS)
    print(
        f"stacked batch of {AGENTS} agents x {BATCH} samples from {N_SAMPLES} x {FEATURES} "
        f"({source}), IID shards; per step (us)"
    )
    print(f"  {'loader':<44}{'loader':>10}{'gather':>10}{'ratio':>8}")
    for mode in ("epochs", "replacement"):
        loader = AgentLoader((X, y), shards, BATCH, seed=1, mode=mode)
        ours, theirs = compare(loader, lambda i: (X[i], y[i]), rounds, steps)
        row(f"(X, y), {mode}", ours, theirs)
        loader = AgentLoader(X, shards, BATCH, seed=1, mode=mode)
        ours, theirs = compare(loader, lambda i: X[i], rounds, steps)
        row(f"X, {mode}", ours, theirs)
        if mode == "epochs":  # the loader gathers with np.take, faster than X[idx]: the
            # order's own cost shows against it (no goal: information)
            ours, theirs = compare(loader, lambda i: X.take(i, axis=0), rounds, steps)
            row("X, epochs (baseline X.take(idx, axis=0))", ours, theirs, goal=None)
    try:
        import torch
        from torch.utils.data import TensorDataset
    except ImportError:
        print("  torch is not installed: no TensorDataset row")
    else:
        Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
        loader = AgentLoader(TensorDataset(Xt, yt), shards, BATCH, seed=1)

        def tensors(i: np.ndarray) -> object:
            rows = torch.from_numpy(i)
            return Xt[rows], yt[rows]

        ours, theirs = compare(loader, tensors, rounds, steps)
        row("torch TensorDataset, epochs", ours, theirs)
    fs.shutdown()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
