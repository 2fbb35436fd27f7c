"""Per-op overhead of SPMD mode against the stacked simulator doing the same op.

In SPMD mode (``fogsim.spmd.run``) N agent threads each call the op with their own small
array; the op runs once, on the simulator, when all N have arrived. The baseline is that
simulator op on the stacked ``(N, d)`` array, called directly, measured in the same run.
Printed: microseconds per op (all agents) for both, the ratio SPMD/stacked, and the SPMD
time per agent (the rendezvous costs about one thread wake-up per agent).

    python benchmarks/bench_spmd.py                # N = 4, 16, 64
    python benchmarks/bench_spmd.py --quick        # fewer steps and repeats
    python benchmarks/bench_spmd.py --agents 4,256 --d 1024
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _record import record, save

import fogsim as fs
import fogsim.spmd

OPS = ("neighbor_allreduce", "allreduce")


def stacked_time(op: str, n: int, d: int, steps: int, repeat: int) -> float:
    """Seconds per ``op`` on the stacked (n, d) array (best of ``repeat`` runs of ``steps``)."""
    ctx = fs.init(backend="sim", size=n)
    fn = getattr(fs, op)
    x = np.random.default_rng(0).standard_normal((n, d))
    best = float("inf")
    for _ in range(repeat + 1):  # the first run warms up
        t0 = time.perf_counter()
        for _ in range(steps):
            fn(x)
        best = min(best, (time.perf_counter() - t0) / steps)
    ctx.close()
    fs.shutdown()
    return best


def spmd_time(op: str, n: int, d: int, steps: int, repeat: int) -> float:
    """Seconds per ``op`` called by n agent threads (best of ``repeat`` runs of ``steps``)."""

    def agent() -> float:
        fn = getattr(fs, op)
        x = np.random.default_rng(fs.rank()).standard_normal(d)
        best = float("inf")
        for _ in range(repeat + 1):
            fs.barrier()  # every agent starts the run together
            t0 = time.perf_counter()
            for _ in range(steps):
                fn(x)
            fs.barrier()
            best = min(best, (time.perf_counter() - t0) / steps)
        return best

    return fogsim.spmd.run(agent, size=n)[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    parser.add_argument("--agents", default="4,16,64", help="comma-separated agent counts")
    parser.add_argument("--d", type=int, default=16, help="values per agent (default 16)")
    parser.add_argument("--steps", type=int, default=None, help="ops per timed run")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (best is kept)")
    args = parser.parse_args(argv)
    steps = args.steps or (100 if args.quick else 400)
    repeat = args.repeat or (2 if args.quick else 5)
    agents = [int(a) for a in args.agents.split(",")]

    header = (
        f"{'op':<20} {'agents':>6} {'d':>6} {'stacked us':>11} {'spmd us':>10} "
        f"{'spmd/stacked':>13} {'spmd us/agent':>14}"
    )
    print(header)
    print("-" * len(header))
    for op in OPS:
        for n in agents:
            base = stacked_time(op, n, args.d, steps, repeat)
            spmd = spmd_time(op, n, args.d, max(10, steps // max(1, n // 16)), repeat)
            print(
                f"{op:<20} {n:>6} {args.d:>6} {base * 1e6:>11.1f} {spmd * 1e6:>10.1f} "
                f"{spmd / base:>13.1f} {spmd / n * 1e6:>14.2f}"
            )
            record("spmd", f"{op}, {n} agent threads vs stacked, d={args.d}", spmd, base)
    save()


if __name__ == "__main__":
    main()
