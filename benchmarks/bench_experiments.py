"""Seeds stacked in one simulation against one simulation per seed (fogsim.experiments).

    python benchmarks/bench_experiments.py            # S = 4, 16, 64 seeds
    python benchmarks/bench_experiments.py --quick    # S = 4, 16

A sweep of S seeds of one configuration (exact diffusion and DGD on random least squares,
``fogsim.experiments.optimize``: n agents on a ring, m = 10 rows and d = 10 unknowns per
agent, 200 iterations) runs once as S separate simulations and once with
``stack_seeds=True``: one simulation whose state is ``(n, S, d)``. The two alternate in
rounds (median over rounds), in this process, without a cache or a progress bar. Printed:
seconds per sweep each way and the speed-up (separate / stacked); the goal at 16 seeds of
16 agents is a speed-up >= 2 (ratio stacked / separate <= 0.5). Both sweeps' numbers are
checked equal (to 1e-12) first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from _record import record, save

from fogsim.experiments import grid, optimize, sweep


def configs(algorithm: str, n: int, seeds: int) -> list[dict]:
    return grid(algorithm=algorithm, n=n, m=10, d=10, alpha=0.01, iters=200, seed=range(seeds))


def timed(algorithm: str, n: int, seeds: int, stacked: bool) -> float:
    start = time.perf_counter()
    sweep(optimize, configs(algorithm, n, seeds), progress=False, stack_seeds=stacked)
    return time.perf_counter() - start


def check(algorithm: str, n: int, seeds: int) -> None:
    """Stop unless the stacked sweep gives the separate runs' numbers."""
    one = sweep(optimize, configs(algorithm, n, seeds), progress=False)
    two = sweep(optimize, configs(algorithm, n, seeds), progress=False, stack_seeds=True)
    assert len(two.stacked) == 1 and two.stacked[0]["seeds"] == list(range(seeds))
    for a, b in zip(one.outcomes, two.outcomes, strict=True):
        for key in a.series:
            np.testing.assert_allclose(b.series[key], a.series[key], rtol=1e-12, atol=1e-15)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 and 16 seeds, fewer rounds")
    p.add_argument("--rounds", type=int, default=None)
    args = p.parse_args()
    seed_counts = (4, 16) if args.quick else (4, 16, 64)
    rounds = args.rounds or (3 if args.quick else 5)
    print(
        f"{'algorithm':<16}{'n':>5}{'seeds':>7}{'separate s':>12}{'stacked s':>11}{'speed-up':>10}"
    )
    for algorithm in ("exact_diffusion", "dgd"):
        for n in (16, 64):
            for seeds in seed_counts:
                check(algorithm, n, min(seeds, 4))
                timed(algorithm, n, seeds, True)  # warm: imports, first simulation
                apart, together = [], []
                for _ in range(rounds):
                    apart.append(timed(algorithm, n, seeds, False))
                    together.append(timed(algorithm, n, seeds, True))
                sep, stk = statistics.median(apart), statistics.median(together)
                print(f"{algorithm:<16}{n:>5}{seeds:>7}{sep:>12.4f}{stk:>11.4f}{sep / stk:>10.1f}")
                record(
                    "experiments",
                    f"{algorithm}, {n} agents, {seeds} seeds: stacked sweep's time / separate",
                    stk,
                    sep,
                    goal="<= 0.5" if (n, seeds) == (16, 16) else None,
                    note=f"speed-up {sep / stk:.1f}x",
                )
    save()


if __name__ == "__main__":
    main()
