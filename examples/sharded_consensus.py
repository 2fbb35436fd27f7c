"""Average consensus on a million agents, in one process or sharded over several.

    python examples/sharded_consensus.py                            # 10^6 agents, 1 process
    mpiexec -n 2 python -m mpi4py examples/sharded_consensus.py     # the same, 2 processes
    fogrun --sim --shards 2 -np 1000000 python examples/sharded_consensus.py
    python examples/sharded_consensus.py --agents 10000000 --topology ring --dim 8

What changes in the script to run it sharded: nothing. It is a plain stacked-agent script,
``fs.init(backend="sim", size=N)``; started as P processes (``mpiexec -n P``, or fogrun's
``--sim --shards P``, ``mpiexec`` being the one next to the venv's python), the N agents are
split into P contiguous blocks, one per process. Each process then holds only its block:
``fs.rank()`` is the block's ranks, ``fs.local`` builds the block's rows, and
``fs.neighbor_allreduce`` receives only the rows the topology reads across a block's
boundary (one row from each side for the ring). The error is reduced with ``fs.allreduce``
(P partial sums), never gathered, so the lines printed are those of one process, up to the
last digits of those sums.

Prints a title and a header naming the columns, then ``iteration  consensus error`` at the
start and every ``--every`` iterations, the error being sqrt(mean_i ||x_i - xbar||^2) with
xbar the initial average, which W keeps (it is doubly stochastic for both topologies); then
the steps per second of the loop (the error's reductions excluded), and a last line saying
how far the error fell and what that means. Each process also writes one line to stderr:
its block of agents and its peak memory.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable

import numpy as np
from _common import header, outcome, say

import fogsim as fs
from fogsim import _settings
from fogsim import topology as T

TOPOLOGIES = {"ring": T.ring_graph, "exp2": T.exponential_two_graph}
# splitmix64's constants: agent r's start is a hash of (r, j), the same on every process.
_GAMMA, _MIX1, _MIX2 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)


def start(dim: int) -> Callable[[int], np.ndarray]:
    """Return agent r's initial vector as a function of r: dim numbers in [-1, 1).

    A counter-based hash rather than a seeded generator per agent, so that ``fs.local(...,
    jit=True)`` builds a block of 10^7 agents in compiled code, with no Python call per
    agent.
    """

    def value(r: int) -> np.ndarray:
        out = np.empty(dim)
        for j in range(dim):
            z = np.uint64(r * dim + j + 1) * _GAMMA
            z = (z ^ (z >> np.uint64(30))) * _MIX1
            z = (z ^ (z >> np.uint64(27))) * _MIX2
            z = z ^ (z >> np.uint64(31))
            out[j] = (z >> np.uint64(11)) * 2.0**-52 - 1.0
        return out

    return value


def consensus_error(x: np.ndarray, xbar: np.ndarray) -> float:
    """Return sqrt(mean_i ||x_i - xbar||^2): one per-agent number, averaged by allreduce."""
    dev = x - xbar  # one temporary the size of the block, not two
    spread = np.einsum("ij,ij->i", dev, dev)
    return float(np.sqrt(fs.allreduce(spread)[0]))


def peak_memory_mib() -> float:
    """Return this process's peak resident memory so far, in MiB (Linux counts KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> list[float]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--agents", type=int, help="default FOGSIM_SIZE (fogrun --sim -np N), else 1000000"
    )
    p.add_argument("--iters", type=int, default=100, help="iterations (default %(default)s)")
    p.add_argument(
        "--topology", choices=list(TOPOLOGIES), default="ring", help="default %(default)s"
    )
    p.add_argument("--dim", type=int, default=8, help="length of each agent's vector")
    p.add_argument("--every", type=int, default=20, help="print the error every this many")
    args = p.parse_args(argv)
    n = args.agents or _settings.load().size or 1_000_000

    fs.init(backend="sim", size=n, topology=TOPOLOGIES[args.topology])
    ranks = fs.rank()  # this process's block: all n agents unless sharded
    x = fs.local(start(args.dim), jit=True)
    xbar = fs.allreduce(x)[0].copy()  # the average; a copy, not a view of the stacked result
    errors, seconds = [consensus_error(x, xbar)], 0.0
    say(f"sharded consensus: {n} agents, {args.topology}, d = {args.dim}")
    header("consensus error (RMS distance of the agents' vectors to their average)")
    say(f"{0:5d}  {errors[0]:.12e}")
    for k in range(1, args.iters + 1):
        tic = time.perf_counter()
        x = fs.neighbor_allreduce(x)  # x_i <- sum_j W_ij x_j, boundary rows moved if sharded
        seconds += time.perf_counter() - tic
        if k % args.every == 0 or k == args.iters:
            errors.append(consensus_error(x, xbar))
            say(f"{k:5d}  {errors[-1]:.12e}")
    say(f"speed: {args.iters / seconds:.1f} steps/s")
    # One write per process, on stderr: whole lines, in whichever order the processes finish.
    sys.stderr.write(
        f"agents {ranks[0]}..{ranks[-1]} ({len(ranks)}): peak memory {peak_memory_mib():.0f} MiB\n"
    )
    sys.stderr.flush()
    say(
        outcome(
            errors,
            "consensus error",
            args.iters,
            reached=f"every agent holds the average of the initial vectors, to within "
            f"{errors[-1]:.1e} (RMS)",
            goal=1e-6,
            floor="the agents stopped approaching the average before agreeing on it",
        )
    )
    fs.shutdown()
    return errors


if __name__ == "__main__":
    main()
