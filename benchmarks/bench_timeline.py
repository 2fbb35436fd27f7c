"""Cost of the timeline on a loop of 1 KB neighbor_allreduce calls, measured in one run.

    python benchmarks/bench_timeline.py            # relaunches itself under fogrun -np 4
    python benchmarks/bench_timeline.py -np 2

Each rank records to ``PREFIX<rank>.json`` in a temporary directory. Calls with the
timeline on and off alternate in interleaved rounds (median per call, the slowest rank's
time; see bench_mpi.per_call); recording, formatting and writing the events (every
100,000 events or 2 s) all happen inside the timed calls. Printed: microseconds per call
off and on, the ratio (goal <= 1.10) and the microseconds added.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from _record import record, save
from bench_mpi import per_call


def child(prefix: str) -> None:
    from mpi4py import MPI

    import fogsim as fs
    from fogsim import timeline as TL

    fs.init()
    x = np.ones(128)  # 1 KB
    tl = TL.start(prefix)
    TL.active = None  # recording is switched on per call below

    def off() -> None:
        fs.neighbor_allreduce(x, name="x")

    def on() -> None:
        TL.active = tl
        fs.neighbor_allreduce(x, name="x")
        TL.active = None

    t_off, t_on = per_call([off, on], MPI.COMM_WORLD, rounds=15, min_seconds=0.05)
    TL.active = tl
    TL.stop()
    if fs.is_main_process():
        print(f"timeline overhead, {fs.size()} ranks, neighbor_allreduce of 1 KB (exp-2)")
        record(
            "timeline", "1 KB neighbor_allreduce, timeline on / off", t_on, t_off, goal="<= 1.10"
        )
        save()
        print(
            f"  off {1e6 * t_off:.1f} us, on {1e6 * t_on:.1f} us per call: ratio "
            f"{t_on / t_off:.2f} (goal <= 1.10), {1e6 * (t_on - t_off):.1f} us "
            "added"
        )
    fs.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", type=int, default=4, help="number of MPI processes")
    parser.add_argument("--child", metavar="PREFIX", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "fogsim.run",
            "-np",
            str(args.np),
            "--timeout",
            "600",
            "python",
            __file__,
            "--child",
            os.path.join(tmp, "t"),
        ]
        env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        env.pop("FOGSIM_BACKEND", None)
        env.pop("FOGSIM_TIMELINE", None)
        return subprocess.run(cmd, env=env, timeout=700).returncode


if __name__ == "__main__":
    sys.exit(main())
