"""Cost of the simulated clock (fogsim.clock) on a simulated step, measured in one run.

    python benchmarks/bench_clock.py            # 10^4 agents, then 10^6
    python benchmarks/bench_clock.py --quick    # 10^4 agents only

A step is ``x = fs.neighbor_allreduce(x)`` with the clock off, and ``fs.clock.compute(c)``
then the same exchange with it on (what a timed script does). The two alternate in rounds
(best of each round, median over rounds), on a ring, on exponential-2 and on the one-peer
exponential-2 schedule (a new topology each step, as dynamic runs pass it), for values of
8 and 64 float64 per agent. Printed: milliseconds per step off and on and the ratio (goal
at 10^4 agents <= 1.2); then the steps per second of 10^6 agents on one-peer exponential-2
with the clock on and off.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from _record import record, save

import fogsim as fs
import fogsim.hierarchy
from fogsim import clock as C
from fogsim import topology as T


def step_times(n: int, d: int, topo: str, rounds: int, reps: int) -> tuple[float, float]:
    """Seconds per step, clock off and on (median over rounds of the best of ``reps``)."""
    fs.init(size=n, topology=T.ring_graph if topo == "ring" else T.exponential_two_graph)
    schedule = None
    if topo == "one-peer":  # one pass of the schedule, repeated
        steps = T.one_peer_exponential_two(n)
        schedule = [next(steps) for _ in range(max(1, (n - 1).bit_length()))]
    platform = C.Platform.uniform(n)
    x = fs.local(lambda r: np.full(d, float(r)))
    state = {"k": 0}

    def exchange(y: np.ndarray) -> np.ndarray:
        if schedule is None:
            return fs.neighbor_allreduce(y)
        step = schedule[state["k"] % len(schedule)]
        state["k"] += 1
        return fs.neighbor_allreduce(y, src_weights=step.weights)

    def off() -> None:
        nonlocal x
        x = exchange(x)

    def on() -> None:
        nonlocal x
        C.compute(1e-3)
        x = exchange(x)

    for _ in range(2 * len(schedule or [0])):  # plans and caches made before timing
        off()
    clock = C.start(platform)  # one clock throughout, its ops charged only in on()
    for _ in range(2 * len(schedule or [0])):
        on()
    offs, ons = [], []
    for _ in range(rounds):
        for fn, out, clocked in ((off, offs, False), (on, ons, True)):
            if clocked:
                fs.hierarchy.attach_cost_model(clock)
            else:
                fs.hierarchy.detach_cost_model()
            best = np.inf
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t)
            out.append(best)
    fs.shutdown()
    return statistics.median(offs), statistics.median(ons)


def million(steps: int) -> tuple[float, float]:
    """Steps per second of 10^6 agents, one-peer exponential-2, d = 8: clock off, on."""
    n = 1_000_000
    rates = []
    for clocked in (False, True):
        fs.init(size=n)
        steps_of = T.one_peer_exponential_two(n)
        schedule = [next(steps_of) for _ in range((n - 1).bit_length())]
        x = np.ones((n, 8))
        if clocked:
            C.start(C.Platform.uniform(n))
        for step in schedule:  # the schedule's plans, made once
            x = fs.neighbor_allreduce(x, src_weights=step.weights)
        t = time.perf_counter()
        for k in range(steps):
            if clocked:
                C.compute(1e-3)
            x = fs.neighbor_allreduce(x, src_weights=schedule[k % len(schedule)].weights)
        rates.append(steps / (time.perf_counter() - t))
        fs.shutdown()
    return rates[0], rates[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^4 agents only, fewer rounds")
    parser.add_argument("--n", type=int, default=10_000, help="agents (default 10^4)")
    args = parser.parse_args(argv)
    rounds, reps = (5, 5) if args.quick else (9, 7)
    print(f"simulated step with the clock off and on, {args.n} agents (ms per step)")
    print(f"  {'topology':<10}{'d':>4}{'off':>9}{'on':>9}{'on/off':>8}")
    worst = 0.0
    for topo in ("ring", "exp2", "one-peer"):
        for d in (8, 64):
            t_off, t_on = step_times(args.n, d, topo, rounds, reps)
            ratio = t_on / t_off
            worst = max(worst, ratio)
            print(f"  {topo:<10}{d:>4}{1e3 * t_off:>9.3f}{1e3 * t_on:>9.3f}{ratio:>8.2f}")
            record(
                "clock",
                f"{args.n} agents, {topo}, d={d}: step with clock / without",
                t_on,
                t_off,
                goal="<= 1.2",
            )
    print(f"  worst ratio {worst:.2f} (goal <= 1.2)")
    if not args.quick:
        off, on = million(20)
        print(f"10^6 agents, one-peer exp-2, d=8: {off:.0f} steps/s off, {on:.0f} on")
        record(
            "clock",
            "10^6 agents, one-peer exp-2, d=8: steps/s with clock / without",
            on,
            off,
            unit="steps/s",
        )
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
