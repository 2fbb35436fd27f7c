"""Decomposed and hierarchical ops against their flat counterparts, measured in one run.

    python benchmarks/bench_hierarchy.py               # relaunches under fogrun -np 4
    python benchmarks/bench_hierarchy.py -np 8 --local-size 2

The job emulates machines of ``--local-size`` processes on this host. For each message size,
per call (median over interleaved rounds, the slowest rank's time; see bench_mpi.per_call):

* ``flat``: ``fs.allreduce(x)`` (MPI's own ``Iallreduce``);
* ``decomposed``: ``fs.allreduce(x, algorithm="decomposed")``: reduce-scatter and all-gather
  stages over the factors ``(local_size, machines)``, or ``--factors`` such as ``2x2x2``;
* ``neighbor``: ``fs.neighbor_allreduce(x)`` on the exponential-2 graph of all processes;
* ``hierarchical``: ``fs.hierarchical_neighbor_allreduce(x)`` on the exponential-2 graph of
  the machines.

Printed: microseconds per call and the ratios decomposed/flat and hierarchical/neighbor.
On one host every "machine" shares the same memory, so the decomposition has no slow links
to avoid: ratios near 1 (or above, for the extra stages) are what this machine can show;
the cost model (``examples/cost_model.py``) estimates the gain on a real cluster.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
from _record import record, save
from bench_mpi import per_call

SIZES = [8, 1 << 10, 64 << 10, 512 << 10, 4 << 20]


def child(factors: tuple[int, ...] | None) -> None:
    from mpi4py import MPI

    import fogsim as fs
    from fogsim import topology as T
    from fogsim.backends._decomposed import default_factors

    fs.init(topology=T.exponential_two_graph)
    comm = MPI.COMM_WORLD
    main = fs.is_main_process()
    if main:
        used = factors or default_factors(fs.size(), fs.local_size())
        print(
            f"fogsim hierarchy benchmark: {fs.size()} processes, {fs.machine_size()} "
            f"machines of {fs.local_size()}, decomposed factors {used}"
        )
        print(
            f"{'bytes':>9} {'flat us':>9} {'decomposed us':>14} {'ratio':>6} "
            f"{'neighbor us':>12} {'hierarchical us':>16} {'ratio':>6}"
        )
    for nbytes in SIZES:
        x = np.random.default_rng(fs.rank()).standard_normal(max(1, nbytes // 8))
        t_flat, t_dec, t_nb, t_h = per_call(
            [
                lambda x=x: fs.allreduce(x),
                lambda x=x: fs.allreduce(x, algorithm="decomposed", factors=factors),
                lambda x=x: fs.neighbor_allreduce(x),
                lambda x=x: fs.hierarchical_neighbor_allreduce(x),
            ],
            comm,
            rounds=9,
        )
        if main:
            record("hierarchy", f"decomposed / flat allreduce, {x.nbytes} B", t_dec, t_flat)
            record("hierarchy", f"hierarchical / flat neighbor_allreduce, {x.nbytes} B", t_h, t_nb)
            print(
                f"{x.nbytes:>9} {1e6 * t_flat:>9.1f} {1e6 * t_dec:>14.1f} "
                f"{t_dec / t_flat:>6.2f} {1e6 * t_nb:>12.1f} {1e6 * t_h:>16.1f} "
                f"{t_h / t_nb:>6.2f}",
                flush=True,
            )
    if main:
        save()
    fs.shutdown()


def _factors(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(f) for f in text.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"factors look like 2x2x2, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", type=int, default=4, help="number of MPI processes")
    parser.add_argument("--local-size", type=int, default=2, help="processes per machine")
    parser.add_argument(
        "--factors",
        type=_factors,
        default=None,
        help="decomposition, e.g. 2x2x2 (default: the machines)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.factors)
        return 0
    cmd = [
        sys.executable,
        "-m",
        "fogsim.run",
        "-np",
        str(args.np),
        "--local-size",
        str(args.local_size),
        "--timeout",
        "900",
        "python",
        __file__,
        "--child",
    ]
    if args.factors:
        cmd += ["--factors", "x".join(map(str, args.factors))]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("FOGSIM_BACKEND", None)
    return subprocess.run(cmd, env=env, timeout=1000).returncode


if __name__ == "__main__":
    sys.exit(main())
