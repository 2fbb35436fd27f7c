"""Where fogsim runs its own per-agent loops in numba: before/after, measured in one run.

Stacked random draws (``fs.rng()`` in simulation, and the fish school's sensor noise) call
every agent's own numpy ``Generator``. Timed on the same generators, alternating, median
of ``--repeat``:

* ``vmap``: ``fs.vmap(lambda g: g.standard_normal(2))(gens)``, how the fish school drew
  before;
* ``python``: ``StackedGenerator.standard_normal(2)`` in its Python loop (what it does for
  its first ~10^6 agent draws);
* ``numba``: the same call in compiled code (``fogsim._rng_nb``): the same numbers.

Then a whole ``fish_school.simulate`` with the Python-loop draws against the compiled
ones (seconds per step, setup included); one ``neighbor_allreduce`` step under
``faults.inject(noise=..., link_drop=...)`` on the exponential-2 graph with the noise added
by ``np.add.at`` against the numba loop (``fogsim._faults_nb``); and, apart, the one-time
cost of importing numba and loading the cached kernels (a fresh interpreter; the first
compile ever is longer).

    python benchmarks/bench_internal_numba.py            # 10^4, 10^5, 10^6 agents
    python benchmarks/bench_internal_numba.py --quick    # 10^4, 10^5; a smaller school
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import numpy as np
from _record import record, save

import fogsim as fs
from fogsim import _rng, faults
from fogsim import topology as T
from fogsim._rng import StackedGenerator
from fogsim.demos import fish_school as fish

FIRST_CALL = """
import time, numpy as np
t = time.perf_counter()
from fogsim import _rng_nb
gens = [np.random.default_rng([0, r]) for r in range(10)]
_rng_nb.standard_normal(_rng_nb.bitgen_addresses(gens), (2,))
print(time.perf_counter() - t)
"""


def median_times(fns: dict, repeat: int) -> dict:
    """Return each function's median seconds over ``repeat`` rounds, alternating them."""
    for fn in fns.values():
        fn()  # warm up (compiles or loads the kernels once)
    times: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def draws(n: int, repeat: int) -> None:
    fs.init(size=n, seed=0)
    gens = [np.random.default_rng([0, r]) for r in range(n)]
    stacked = StackedGenerator(gens)
    vmapped = fs.vmap(lambda g: g.standard_normal(2))

    def loop() -> None:
        _rng._COMPILE_AFTER = 1 << 62
        stacked.standard_normal(2)

    def compiled() -> None:
        _rng._COMPILE_AFTER = 0
        stacked.standard_normal(2)

    t = median_times({"vmap": lambda: vmapped(gens), "python": loop, "numba": compiled}, repeat)
    fs.shutdown()
    print(
        f"{n:>9} {t['vmap'] * 1e3:9.2f} {t['python'] * 1e3:9.2f} {t['numba'] * 1e3:9.3f}"
        f" {t['vmap'] / t['numba']:10.1f}x {t['python'] / t['numba']:10.1f}x"
    )
    what = f"standard_normal(2) of {n} agents' generators"
    record("internal_numba", f"{what}, numba vs vmap", t["numba"], t["vmap"], goal="<= 0.33")
    record("internal_numba", f"{what}, numba vs Python loop", t["numba"], t["python"])


class VmapDraws(list):
    """The fish's generators drawing as the fish school did before: through ``fs.vmap``."""

    def standard_normal(self, size: int) -> np.ndarray:
        return fs.vmap(lambda g: g.standard_normal(size))(list(self))


def school(n: int, steps: int, repeat: int) -> None:
    def run(threshold: int, stacked: type = StackedGenerator):
        def go() -> None:
            _rng._COMPILE_AFTER = threshold
            setattr(fish, "StackedGenerator", stacked)  # noqa: B010
            try:
                fish.simulate(n=n, steps=steps, seed=0)
            finally:
                setattr(fish, "StackedGenerator", StackedGenerator)  # noqa: B010

        return go

    variants = {"vmap": run(1 << 62, VmapDraws), "python": run(1 << 62), "numba": run(0)}
    t = median_times(variants, repeat)
    per_step = {k: v / (steps + 1) * 1e3 for k, v in t.items()}
    print(
        f"fish school, {n} fish x {steps} steps, ms/step: {per_step['vmap']:.1f} drawing "
        f"through fs.vmap (before), {per_step['python']:.1f} in StackedGenerator's Python "
        f"loop, {per_step['numba']:.1f} compiled ({t['vmap'] / t['numba']:.2f}x, "
        f"{t['python'] / t['numba']:.2f}x)"
    )
    what = f"fish_school.simulate {n} fish x {steps} steps"
    record("internal_numba", f"{what}, numba vs vmap draws", t["numba"], t["vmap"], goal="<= 1.0")
    record("internal_numba", f"{what}, numba vs Python-loop draws", t["numba"], t["python"])


def noisy_links(n: int, d: int, repeat: int) -> None:
    fs.init(size=n, topology=T.exponential_two_graph, seed=0)
    x = np.random.default_rng(0).standard_normal((n, d))

    def step(compile_after: int):
        def go() -> None:
            faults._COMPILE_AFTER = compile_after
            fs.neighbor_allreduce(x)

        return go

    saved = faults._COMPILE_AFTER
    faults.inject(noise=1e-3, link_drop=0.1, seed=1)
    try:
        t = median_times({"numpy": step(1 << 62), "numba": step(0)}, repeat)
    finally:
        faults._COMPILE_AFTER = saved
        fs.shutdown()
    print(
        f"faulty neighbor_allreduce, {n} agents x {d}: {t['numpy'] * 1e3:.1f} ms with "
        f"np.add.at noise, {t['numba'] * 1e3:.1f} ms compiled ({t['numpy'] / t['numba']:.2f}x)"
    )
    record(
        "internal_numba",
        f"neighbor_allreduce with noisy links, {n} agents x {d}, numba vs np.add.at noise",
        t["numba"],
        t["numpy"],
        goal="<= 1.0",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 7)
    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)

    first = subprocess.run(
        [sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, check=True
    )
    once = float(first.stdout.split()[-1])
    print(f"import numba + load the cached kernels (once per process): {once:.2f} s")
    record("internal_numba", "first compiled draw in a fresh process (one-time)", once)

    heads = ("agents", "vmap ms", "python ms", "numba ms", "vmap/nb", "python/nb")
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(heads, (9, 9, 9, 9, 11, 11), strict=True)))
    for n in sizes:
        draws(n, repeat)
    saved = _rng._COMPILE_AFTER
    try:
        school(3_000 if args.quick else 10_000, 20, 1 if args.quick else 2)
    finally:
        _rng._COMPILE_AFTER = saved
    print()
    for n in sizes[:2]:
        noisy_links(n, 4, repeat)
    save()


if __name__ == "__main__":
    main()
