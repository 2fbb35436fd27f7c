"""Check, many times over, that blocking window ops are complete at their targets on return.

From the repository root: ``fogrun -np N python -m tests.window_completion_driver [REPS]
[OP ...]`` (default 60 repetitions of ``put``, ``accumulate`` and ``get``). Every
repetition, on every rank: create a fresh window over this rank's ``x`` (zero-initialized
buffers, push-sum weights on), do one blocking op, pass :func:`fogsim.barrier`, then read
what landed here: each in-neighbor's version must be 1, its buffer must hold its ``x`` and
its push-sum weight must be 1 (BlueFog semantics: after a blocking op returns and every
agent passes a barrier, the target's buffers and version counters reflect it). A ``get``
pulls into this rank's own buffers, so it counts on this rank like a neighbor's ``put``.

Rank 0 prints one JSON line per op, ``{"case": op, "repetitions": R, "failures": {rank:
count}, "failed": {rank: what went wrong first}}``; ``failed`` is empty when every rank saw
every repetition complete.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

import fogsim as fs

OPS = ("put", "accumulate", "get")
M = 257  # elements per window: several cache lines, not a round size


def value(rank: int, rep: int) -> np.ndarray:
    """What ``rank`` registers in repetition ``rep``: different on every rank and repetition."""
    return rank * 1e6 + rep * 1e3 + np.arange(M, dtype=np.float64)


def one_repetition(op: str, rep: int) -> str | None:
    """Run ``op`` once on a fresh window; return what went wrong on this rank, or None."""
    me, name = fs.rank(), f"completion-{op}-{rep}"
    x = value(me, rep)
    fs.win_create(x, name, zero_init=True)
    try:
        if op == "put":
            fs.win_put(x, name)
        elif op == "accumulate":
            fs.win_accumulate(x, name)
        else:
            fs.win_get(name)
        fs.barrier()
        versions = fs.get_win_version(name)  # read first: win_update resets the counters
        srcs = fs.in_neighbor_ranks()
        if versions != {j: 1 for j in srcs}:
            return f"repetition {rep}: versions {versions}, want 1 for each of {srcs}"
        for j in srcs:
            got = fs.win_update(name, self_weight=0.0, neighbor_weights={j: 1.0}, clone=True)
            if not np.array_equal(got, value(j, rep)):
                bad = np.flatnonzero(got != value(j, rep))
                return (
                    f"repetition {rep}: buffer of {j} differs from its x at {bad.size} "
                    f"elements, first [{bad[0]}] = {got[bad[0]]}, want {value(j, rep)[bad[0]]}"
                )
            p = fs.win_associated_p(name)
            if p != 1.0:
                return f"repetition {rep}: push-sum weight of {j}'s buffer is {p}, want 1.0"
        return None
    finally:
        fs.win_free(name)


def main(reps: int, ops: list[str]) -> None:
    comm = MPI.COMM_WORLD
    fs.init()
    assert fs.size() == comm.Get_size() and fs.size() > 1, "run it under fogrun -np N, N > 1"
    fs.set_win_ops_with_associated_p(True)
    for op in ops:
        first, failures = None, 0
        for rep in range(reps):
            problem = one_repetition(op, rep)
            if problem is not None:
                failures += 1
                first = first or problem
        counts = comm.gather(failures, root=0)
        firsts = comm.gather(first, root=0)
        if comm.Get_rank() == 0:
            failed = {
                str(r): f"{c} of {reps} failed; first: {f}"
                for r, (c, f) in enumerate(zip(counts, firsts, strict=True))
                if c
            }
            record = {
                "case": op,
                "repetitions": reps,
                "failures": {str(r): c for r, c in enumerate(counts)},
                "failed": failed,
            }
            print(json.dumps(record), flush=True)
    fs.shutdown()


if __name__ == "__main__":
    args = sys.argv[1:]
    count = int(args[0]) if args else 60
    chosen = args[1:] or list(OPS)
    unknown = sorted(set(chosen) - set(OPS))
    if unknown:
        raise ValueError(f"unknown ops {unknown}; choose from {list(OPS)}")
    main(count, chosen)
