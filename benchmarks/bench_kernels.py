"""Per-agent code compiled with ``fs.vmap(fn, jit=True)`` against what a user would write.

The local least-squares gradient ``g_i = A_i^T (A_i x_i - b_i)`` with a 4 x 4 ``A_i`` per
agent, on n simulated agents (``fs.init(size=n)``), computed seven ways in the same run:

* ``vmap``: ``fs.vmap(grad)``, the Python loop over agents (``jit=False``);
* ``vmap jit``: ``fs.vmap(grad, jit=True)``, ``grad`` written with ``@`` and ``.T``;
* ``vmap jit loops``: ``fs.vmap(grad_loops, jit=True)``, the same maths in scalar loops;
* ``prange``: a hand-written ``numba.njit(parallel=True)`` loop over agents,
  ``out[i] = A[i].T @ (A[i] @ x[i] - b[i])``;
* ``prange loops``: the same hand loop with the maths in scalar loops into ``out``;
* ``prange fn``: a hand-written ``prange`` loop calling the compiled ``grad_loops`` per
  agent, ``out[i] = grad_loops(A[i], x[i], b[i])`` (what ``vmap jit loops`` does);
* ``einsum``: two ``np.einsum`` calls over the stacked arrays (no numba).

Each for numba threads 1 and 2 (``numba.set_num_threads``; ``vmap`` and ``einsum`` use no
numba threads and are timed once per n). Steady state is the median of ``--repeat``
interleaved rounds, after a warm-up call. Reported apart: the first call of each compiled
variant, each in a fresh process with an empty ``NUMBA_CACHE_DIR`` (a cold compile, what
a new script pays), and a scalar data-dependent loop (Newton's ``sqrt`` per agent) with
``jit=False`` and ``jit=True``.

Goals, at 10^5 agents on one thread: ``vmap / vmap jit >= 8``, ``vmap jit / prange <= 1.2``
and ``vmap jit loops / einsum <= 2``; ``vmap jit loops`` against ``prange loops`` and
``prange fn`` is reported (the cost of ``g`` allocated per agent, and of fogsim's loop).

    python benchmarks/bench_kernels.py             # 10^4, 10^5, 10^6 agents (3-4 minutes)
    python benchmarks/bench_kernels.py --quick     # 10^4 and 10^5 agents, fewer rounds
    python benchmarks/bench_kernels.py --agents 100000 --threads 1 --repeat 15
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _record import record, save

import fogsim as fs

D = 4  # rows and columns of each agent's A
PAIRS = (  # (value, baseline, goal) of the rows at 10^5 agents on one thread
    ("vmap", "vmap jit", ">= 8"),
    ("vmap jit", "prange", "<= 1.2"),
    ("vmap jit loops", "einsum", "<= 2"),
    ("vmap jit loops", "prange loops", None),  # what allocating g per agent costs
    ("vmap jit loops", "prange fn", None),  # fogsim's agent loop against a hand-written one
)


def grad(A: np.ndarray, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return one agent's least-squares gradient ``A^T (A x - b)``."""
    return A.T @ (A @ x - b)


def grad_loops(A: np.ndarray, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Return ``A^T (A x - b)`` computed in scalar loops."""
    m, d = A.shape
    g = np.zeros(d)
    for i in range(m):
        r = -b[i]
        for j in range(d):
            r += A[i, j] * x[j]
        for j in range(d):
            g[j] += A[i, j] * r
    return g


def newton_sqrt(a: float) -> float:
    """Return ``sqrt(a)`` by Newton's method: a loop whose length depends on ``a``."""
    x = a if a > 1.0 else 1.0
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
    return x


def hand_kernels() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """The loops over agents a numba user would write by hand (imported late: numba reads
    ``NUMBA_CACHE_DIR`` when first imported)."""
    import numba

    @numba.njit(parallel=True, cache=True)
    def prange_matrix(A, x, b, out):
        for i in numba.prange(A.shape[0]):
            out[i] = A[i].T @ (A[i] @ x[i] - b[i])

    @numba.njit(parallel=True, cache=True)
    def prange_loops(A, x, b, out):
        n, m, d = A.shape
        for k in numba.prange(n):
            for j in range(d):
                out[k, j] = 0.0
            for i in range(m):
                r = -b[k, i]
                for j in range(d):
                    r += A[k, i, j] * x[k, j]
                for j in range(d):
                    out[k, j] += A[k, i, j] * r

    grad_loops_jit = numba.njit(cache=True)(grad_loops)

    @numba.njit(parallel=True, cache=True)
    def prange_fn(A, x, b, out):
        for i in numba.prange(A.shape[0]):
            out[i] = grad_loops_jit(A[i], x[i], b[i])

    return prange_matrix, prange_loops, prange_fn


def einsum_grad(A: np.ndarray, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The stacked gradient without numba: two einsums."""
    return np.einsum("nij,ni->nj", A, np.einsum("nij,nj->ni", A, x) - b)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def variants(n: int) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """Every timed call on ``n`` agents' fresh data (after ``fs.init(size=n)``), and the data."""
    rng = np.random.default_rng(0)
    data = {
        "A": rng.standard_normal((n, D, D)),
        "x": rng.standard_normal((n, D)),
        "b": rng.standard_normal((n, D)),
        "a": rng.uniform(0.01, 100.0, n),
        "out": np.empty((n, D)),
    }
    A, x, b, a, out = (data[k] for k in ("A", "x", "b", "a", "out"))
    prange_matrix, prange_loops, prange_fn = hand_kernels()
    vm, vm_jit, vm_loops = fs.vmap(grad), fs.vmap(grad, jit=True), fs.vmap(grad_loops, jit=True)
    nt, nt_jit = fs.vmap(newton_sqrt), fs.vmap(newton_sqrt, jit=True)
    calls: dict[str, Callable[[], Any]] = {
        "vmap": lambda: vm(A, x, b),
        "vmap jit": lambda: vm_jit(A, x, b),
        "vmap jit loops": lambda: vm_loops(A, x, b),
        "prange": lambda: prange_matrix(A, x, b, out),
        "prange loops": lambda: prange_loops(A, x, b, out),
        "prange fn": lambda: prange_fn(A, x, b, out),
        "einsum": lambda: einsum_grad(A, x, b),
        "newton": lambda: nt(a),
        "newton jit": lambda: nt_jit(a),
    }
    return calls, data


def first_call(name: str) -> float:
    """Seconds of ``name``'s first call on 1,000 agents, in this fresh process."""
    import numba

    numba.set_num_threads(1)
    fs.init(size=1000)
    calls, _ = variants(1000)
    return timed(calls[name])


def check(calls: dict[str, Callable[[], Any]], data: dict[str, Any]) -> None:
    """Every variant computes the same gradient (and the Newton loop sqrt)."""
    expected = einsum_grad(data["A"], data["x"], data["b"])
    for name in ("prange", "prange loops", "prange fn"):
        calls[name]()
        np.testing.assert_allclose(data["out"], expected, rtol=1e-10, atol=1e-12)
    for name in ("vmap jit", "vmap jit loops"):
        np.testing.assert_allclose(calls[name](), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(calls["newton jit"](), np.sqrt(data["a"]), rtol=1e-10)


def bench_n(n: int, threads: list[int], repeat: int) -> tuple[dict, float]:
    """Steady-state seconds per call of every variant at ``n`` agents, per thread count,
    ``{(variant, threads): seconds}``, and the warm-up's seconds (compiles for new vmaps)."""
    import numba

    fs.init(size=n)
    calls, data = variants(n)
    serial = ("vmap", "einsum", "newton")  # no numba threads: timed once
    slow = ("vmap", "newton")  # the Python loop over 10^6 agents takes seconds: 3 rounds
    slow_repeat = min(repeat, 3) if n >= 10**6 else repeat
    times: dict[tuple[str, int], float] = {}
    warm_up = 0.0
    for t in threads:
        numba.set_num_threads(t)
        t0 = time.perf_counter()
        for name in calls:
            if name not in slow:
                calls[name]()  # compiles on the first thread count
        warm_up += time.perf_counter() - t0
        check(calls, data)
        runs: dict[str, list[float]] = {}
        for r in range(repeat):
            # interleaved, so that a drift of the machine's load hits every variant alike
            for name, fn in calls.items():
                if (name in serial and t != threads[0]) or (name in slow and r >= slow_repeat):
                    continue
                runs.setdefault(name, []).append(timed(fn))
        for name, ts in runs.items():
            times[(name, t)] = float(np.median(ts))
    for name in serial:
        for t in threads[1:]:
            times[(name, t)] = times[(name, threads[0])]
    fs.shutdown()
    return times, warm_up


def cold_compiles(names: list[str]) -> dict[str, float]:
    """Each variant's first call in a fresh process with an empty numba cache."""
    out = {}
    for name in names:
        with tempfile.TemporaryDirectory(prefix="fogsim-bench-numba-") as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache}
            env.pop("FOGSIM_BENCH_JSON", None)
            done = subprocess.run(
                [sys.executable, __file__, "--first-call", name],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            out[name] = float(done.stdout.split()[-1])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^4 and 10^5 agents, 3 rounds")
    parser.add_argument("--agents", help="comma-separated agent counts (default: the grid)")
    parser.add_argument("--threads", default="1,2", help="numba thread counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 9; quick 5)")
    parser.add_argument("--first-call", help=argparse.SUPPRESS)  # one cold compile, alone
    args = parser.parse_args(argv)
    if args.first_call:
        print(first_call(args.first_call))
        return
    agents = [10**4, 10**5] if args.quick else [10**4, 10**5, 10**6]
    if args.agents:
        agents = [int(a) for a in args.agents.split(",")]
    repeat = args.repeat or (5 if args.quick else 9)
    import numba

    most = numba.get_num_threads()  # NUMBA_NUM_THREADS, numba's pool size
    threads = [t for t in (int(s) for s in args.threads.split(",")) if t <= most]
    print(
        f"numba {numba.__version__}, up to {most} threads; ms per call, median of {repeat} "
        "interleaved rounds (vmap jit=False: 3 at 10^6 agents)"
    )
    names = ["vmap", "vmap jit", "vmap jit loops", "prange", "prange loops", "prange fn"]
    names.append("einsum")
    header = f"{'agents':>8} {'thr':>3} " + " ".join(f"{s:>14}" for s in names)
    header += f" {'vmap/jit':>9} {'jit/prange':>10} {'loops/einsum':>12}"
    print(header)
    print("-" * len(header))
    results: dict[int, dict] = {}
    warm_ups = {}
    for n in agents:
        times, warm_ups[n] = bench_n(n, threads, repeat)
        results[n] = times
        for t in threads:
            row = [times[(s, t)] for s in names]
            ratios = (row[0] / row[1], row[1] / row[3], row[2] / row[6])
            print(
                f"{n:>8} {t:>3} "
                + " ".join(f"{1e3 * v:>14.3f}" for v in row)
                + f" {ratios[0]:>9.1f} {ratios[1]:>10.2f} {ratios[2]:>12.2f}",
                flush=True,
            )
    print("\nscalar Newton sqrt per agent (a data-dependent while loop), ms per call:")
    for n, times in results.items():
        for t in threads:
            slow, fast = times[("newton", t)], times[("newton jit", t)]
            print(
                f"{n:>8} agents, {t} thread(s): jit=False {1e3 * slow:9.2f}, "
                f"jit=True {1e3 * fast:7.3f}, ratio {slow / fast:6.1f}"
            )
            record(
                "kernels",
                f"newton sqrt, vmap / vmap jit, {t} thread(s)",
                slow,
                fast,
                note=f"{n} agents",
            )

    compiled = ["vmap jit", "vmap jit loops", "prange", "prange loops", "prange fn"]
    compiled.append("newton jit")
    cold = cold_compiles(compiled)
    print("\nfirst call, each in a fresh process with an empty numba cache (1,000 agents), s:")
    for name, s in cold.items():
        print(f"  {name:<15} {s:6.2f}")
        record("kernels", f"first call of {name} (cold compile)", s, note="1 thread")
    print(
        "warm-up at each size (first calls: fn from the disk cache, the agent loops and "
        "hand loops compiled where this process has not compiled them yet), s: "
        + ", ".join(f"{n} agents {s:.2f}" for n, s in warm_ups.items())
    )

    goal_n = 10**5 if 10**5 in results else agents[0]
    t0 = threads[0]
    times = results[goal_n]
    print(f"\ngoals at {goal_n} agents, {t0} thread(s):")
    for value, base, goal in PAIRS:
        ratio = times[(value, t0)] / times[(base, t0)]
        verdict = "(reported)"
        if goal:
            op, bound = goal.split()
            ok = ratio >= float(bound) if op == ">=" else ratio <= float(bound)
            verdict = f"(goal {goal}) {'PASS' if ok else 'MISS'}"
        print(f"  {value} / {base}: {ratio:.2f} {verdict}")
        record(
            "kernels",
            f"{value} / {base}",
            times[(value, t0)],
            times[(base, t0)],
            goal=goal,
            note=f"{goal_n} agents, {t0} thread",
        )
    if len(threads) > 1:
        for n in results:
            record(
                "kernels",
                f"vmap jit, {threads[-1]} / {t0} threads",
                results[n][("vmap jit", threads[-1])],
                results[n][("vmap jit", t0)],
                note=f"{n} agents",
            )
    save()


if __name__ == "__main__":
    main()
