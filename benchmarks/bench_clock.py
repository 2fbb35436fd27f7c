"""Cost of the simulated clock (fogsim.clock) on a simulated step, measured in one run.

    python benchmarks/bench_clock.py            # 10^4 agents, then 10^6
    python benchmarks/bench_clock.py --quick    # 10^4 agents only

A step is ``x = fs.neighbor_allreduce(x)`` with the clock off, and ``fs.clock.compute(c)``
then the same exchange with it on (what a timed script does). The two alternate in rounds
(best of each round, median over rounds), on a ring, on exponential-2 and on the one-peer
exponential-2 schedule (a new topology each step, as dynamic runs pass it), for values of
8 and 64 float64 per agent, on two platforms: every agent alike (``Platform.uniform(n)``:
the clocks stay equal, and the clock moves one number) and agents apart (compute speeds
drawn log-normal, sigma 0.3: every clock its own, moved agent by agent). The on-steps
start after 512 of them, past the clock's switch to its compiled exchange (2^22 messages
visited). Printed: milliseconds per step off and on and the ratio (goal at 10^4 agents
<= 1.2); then the steps per second of 10^6 agents on one-peer exponential-2 with the clock
off and on, on both platforms, in one process and sharded over 2 (``fogrun --sim --shards
2``: each process keeps its block's clocks, and a neighbor op moves the halo's clocks only).

    python benchmarks/bench_clock.py --sharded  # the sharded rows only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from _record import record, save

import fogsim as fs
import fogsim.hierarchy
from fogsim import algorithms as A
from fogsim import clock as C
from fogsim import topology as T


def platform_of(n: int, apart: bool) -> C.Platform:
    """Every agent alike, or speeds drawn log-normal (sigma 0.3) from the platform's seed."""
    if not apart:
        return C.Platform.uniform(n)
    return C.Platform.uniform(n, speed=lambda rng, k: rng.lognormal(0.0, 0.3, k))


def step_times(
    n: int, d: int, topo: str, apart: bool, rounds: int, reps: int, dgd: bool = False
) -> tuple[float, float]:
    """Seconds per step, clock off and on (median over rounds of the best of ``reps``);
    ``dgd``: a step is decentralized gradient descent's on least squares (8 rows of d
    unknowns per agent), the exchange then the local gradient."""
    fs.init(size=n, topology=T.ring_graph if topo == "ring" else T.exponential_two_graph)
    problem = A.LeastSquares.random(8, d, seed=0) if dgd else None
    schedule = None
    if topo == "one-peer":  # one pass of the schedule, repeated
        steps = T.one_peer_exponential_two(n)
        schedule = [next(steps) for _ in range(max(1, (n - 1).bit_length()))]
    platform = platform_of(n, apart)
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
        if problem is not None:
            x -= 0.01 * problem.grad(x)

    def on() -> None:
        nonlocal x
        C.compute(1e-3)
        x = exchange(x)
        if problem is not None:
            x -= 0.01 * problem.grad(x)

    for _ in range(2 * len(schedule or [0])):  # plans and caches made before timing
        off()
    clock = C.start(platform)  # one clock throughout, its ops charged only in on()
    for _ in range(512):  # past the switch to the compiled exchange
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


def million(steps: int, apart: bool) -> tuple[float, float]:
    """Steps per second of 10^6 agents, one-peer exponential-2, d = 8: clock off, on."""
    n = 1_000_000
    rates = []
    for clocked in (False, True):
        fs.init(size=n)
        steps_of = T.one_peer_exponential_two(n)
        schedule = [next(steps_of) for _ in range((n - 1).bit_length())]
        x = np.ones((n, 8))
        if clocked:
            C.start(platform_of(n, apart))
        for step in schedule:  # the schedule's plans, made once (and the clock's kernel)
            if clocked:
                C.compute(1e-3)
            x = fs.neighbor_allreduce(x, src_weights=step.weights)
        t = time.perf_counter()
        for k in range(steps):
            if clocked:
                C.compute(1e-3)
            x = fs.neighbor_allreduce(x, src_weights=schedule[k % len(schedule)].weights)
        rates.append(steps / (time.perf_counter() - t))
        fs.shutdown()
    return rates[0], rates[1]


def sharded_worker(topo: str, clock: str, steps: int) -> None:
    """One run of :func:`sharded`, in each launched process: print steps/s (main process)."""
    fs.init(backend="sim", topology=T.ring_graph)
    n = fs.size()
    if topo == "ring":
        schedule = [T.ring_graph(n)]
    else:
        steps_of = T.one_peer_exponential_two(n)
        schedule = [next(steps_of).weights for _ in range((n - 1).bit_length())]
    x = np.ones((len(np.atleast_1d(fs.rank())), 8))
    if clock != "off":
        C.start(platform_of(n, clock == "apart"))
    for k in range(max(8, len(schedule))):  # plans, halos and the clock's kernel, made once
        if clock != "off":
            C.compute(1e-3)
        x = fs.neighbor_allreduce(x, src_weights=schedule[k % len(schedule)])
    fs.barrier()
    t = time.perf_counter()
    for k in range(steps):
        if clock != "off":
            C.compute(1e-3)
        x = fs.neighbor_allreduce(x, src_weights=schedule[k % len(schedule)])
    fs.barrier()
    rate = steps / (time.perf_counter() - t)
    if fs.is_main_process():
        print(json.dumps({"steps_per_s": rate}), flush=True)
    fs.shutdown()


def sharded(n: int, parts: int, topo: str, clock: str, steps: int) -> float:
    """Steps per second of ``n`` agents over ``parts`` processes (1: one, unlaunched)."""
    me = [sys.executable, os.path.abspath(__file__), "--sharded-worker", topo, clock]
    me.append(str(steps))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOGSIM_")}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    if parts == 1:
        env["FOGSIM_SIZE"] = str(n)
        cmd = me
    else:
        cmd = [sys.executable, "-m", "fogsim.run", "--sim", "-np", str(n)]
        cmd += ["--shards", str(parts), "--timeout", "300", *me]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=330)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{cmd}: {out.stderr.strip()[-400:]}")
    rate: float = json.loads(lines[-1])["steps_per_s"]
    return rate


def sharded_rows(n: int = 1_000_000, steps: int = 40) -> None:
    """Steps/s of 10^6 agents in one process and over 2, clock off, alike and apart."""
    print(f"{n} agents, d=8, one process and sharded over 2 (steps/s)")
    print(f"  {'topology':<10}{'processes':<10}{'off':>8}{'alike':>8}{'apart':>8}{'apart/off':>11}")
    for topo in ("ring", "one-peer"):
        for parts in (1, 2):
            rates = {c: sharded(n, parts, topo, c, steps) for c in ("off", "alike", "apart")}
            row = "".join(f"{rates[c]:>8.0f}" for c in ("off", "alike", "apart"))
            print(f"  {topo:<10}{parts:<10}{row}{rates['apart'] / rates['off']:>11.2f}")
            for clock in ("alike", "apart"):
                record(
                    "clock",
                    f"{n} agents, {topo}, over {parts} process(es), agents {clock}: steps/s "
                    "with clock / without",
                    rates[clock],
                    rates["off"],
                    unit="steps/s",
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10^4 agents only, fewer rounds")
    parser.add_argument("--n", type=int, default=10_000, help="agents (default 10^4)")
    parser.add_argument("--sharded", action="store_true", help="the sharded rows only")
    parser.add_argument("--sharded-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sharded_worker:
        topo, clock, steps = args.sharded_worker
        sharded_worker(topo, clock, int(steps))
        return 0
    if args.sharded:
        sharded_rows()
        save()
        return 0
    rounds, reps = (5, 5) if args.quick else (9, 7)
    print(f"simulated step with the clock off and on, {args.n} agents (ms per step)")
    print(f"  {'agents':<8}{'topology':<10}{'d':>4}{'off':>9}{'on':>9}{'on/off':>8}")
    for apart in (False, True):
        agents = "apart" if apart else "alike"
        worst = 0.0
        for topo in ("ring", "exp2", "one-peer"):
            for d in (8, 64):
                t_off, t_on = step_times(args.n, d, topo, apart, rounds, reps)
                ratio = t_on / t_off
                worst = max(worst, ratio)
                off_ms, on_ms = 1e3 * t_off, 1e3 * t_on
                print(f"  {agents:<8}{topo:<10}{d:>4}{off_ms:>9.3f}{on_ms:>9.3f}{ratio:>8.2f}")
                record(
                    "clock",
                    f"{args.n} agents {agents}, {topo}, d={d}: step with clock / without",
                    t_on,
                    t_off,
                    goal="<= 1.2",
                )
        print(f"  agents {agents}: worst ratio {worst:.2f} (goal <= 1.2)")
    print("a step of decentralized gradient descent (least squares, 8 rows a agent), ring")
    for apart in (False, True):
        agents = "apart" if apart else "alike"
        for d in (8, 64):
            t_off, t_on = step_times(args.n, d, "ring", apart, rounds, reps, dgd=True)
            off_ms, on_ms = 1e3 * t_off, 1e3 * t_on
            print(f"  {agents:<8}{'DGD':<10}{d:>4}{off_ms:>9.3f}{on_ms:>9.3f}{t_on / t_off:>8.2f}")
            record(
                "clock",
                f"{args.n} agents {agents}, DGD step on a ring, d={d}: with clock / without",
                t_on,
                t_off,
                goal="<= 1.2",
            )
    if not args.quick:
        for apart in (False, True):
            agents = "apart" if apart else "alike"
            off, on = million(20, apart)
            print(f"10^6 agents {agents}, one-peer exp-2, d=8: {off:.0f} steps/s off, {on:.0f} on")
            record(
                "clock",
                f"10^6 agents {agents}, one-peer exp-2, d=8: steps/s with clock / without",
                on,
                off,
                unit="steps/s",
            )
        sharded_rows()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
