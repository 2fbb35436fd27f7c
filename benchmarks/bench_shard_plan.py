"""Sharding a step's plan, and the overlapped combine's row ranges, against their baselines.

* ``plan``: one process's :func:`shard_plan` of a circulant plan (ring, exponential-2) over
  P = 2 blocks, from the offsets (O(b k)), against the same plan expanded to its n k
  entries and sharded as CSR (what sharding cost before it was done block by block), in
  seconds and as a ratio; each a median of ``--repeat`` calls.
* ``rows``: ``csr_combine_rows`` over the block in 64 ranges (what ``combine_overlapped``
  does at most), against one ``csr_combine`` of the same matrix, m = 8.

    python benchmarks/bench_shard_plan.py                  # 10^5 and 10^6 agents
    python benchmarks/bench_shard_plan.py --agents 10000000 --repeat 1 --no-baseline
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from fogsim import _core
from fogsim import topology as T
from fogsim.backends.sim._plan import CircPlan, CsrPlan, static_plan
from fogsim.backends.sim._shards import shard_plan


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def expanded(plan: CircPlan, n: int) -> CsrPlan:
    """The circulant plan as CSR: its n k entries, each row by ascending source agent."""
    f = plan.form
    k = len(f.offsets)
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    cols = (rows + np.tile(f.offsets, n)) % n
    w = np.asarray(f.weights)
    data = w.T.ravel() if w.ndim == 2 else np.tile(w, n)
    order = np.lexsort((cols, rows))
    sw = np.broadcast_to(np.asarray(f.self_weight, dtype=np.float64), (n,))
    indptr = np.arange(n + 1, dtype=np.int64) * k
    return CsrPlan(sw, indptr, cols[order].astype(np.int32), data[order])


def bench_plan(n: int, repeat: int, baseline: bool) -> None:
    for name, topo in (("ring", T.ring_graph(n)), ("exp2", T.exponential_two_graph(n))):
        plan = static_plan(T.as_topology(topo), False)
        assert isinstance(plan, CircPlan)
        new = median_seconds(lambda: shard_plan(plan, n, 2, 0), repeat)  # noqa: B023
        line = f"plan  {name:5s} n={n:>9d} k={len(plan.form.offsets):2d}  blocks {new:8.3f} s"
        if baseline:
            old = median_seconds(lambda: shard_plan(expanded(plan, n), n, 2, 0), repeat)  # noqa: B023
            line += f"  expanded {old:8.3f} s  ratio {old / new:6.1f}x"
        print(line, flush=True)


def bench_rows(n: int, repeat: int) -> None:
    plan = static_plan(T.as_topology(T.exponential_two_graph(n)), False)
    csr = expanded(plan, n) if isinstance(plan, CircPlan) else plan
    args = (csr.indptr, csr.indices, csr.data, np.ascontiguousarray(csr.self_weight))
    x = np.random.default_rng(0).standard_normal((n, 8))
    out = np.empty_like(x)
    cuts = np.linspace(0, n, 65).astype(int).tolist()

    def in_ranges() -> None:
        for a, z in zip(cuts[:-1], cuts[1:], strict=True):
            _core.csr_combine_rows(*args, x, out, a, z)

    whole = median_seconds(lambda: _core.csr_combine(*args, x, out), repeat)
    ranges = median_seconds(in_ranges, repeat)
    print(
        f"rows  exp2  n={n:>9d} m=8  csr_combine {whole * 1e3:8.2f} ms"
        f"  64 x csr_combine_rows {ranges * 1e3:8.2f} ms  ratio {ranges / whole:5.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-baseline", action="store_true", help="skip the expanded plans")
    args = parser.parse_args()
    for n in (int(float(a)) for a in args.agents.split(",")):
        bench_plan(n, args.repeat, not args.no_baseline)
        bench_rows(n, args.repeat)


if __name__ == "__main__":
    main()
