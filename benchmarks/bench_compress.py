"""Compressed communication: bytes sent per agent to reach consensus, CHOCO against exact.

Average consensus from a standard-normal start (seed 0), float64, d = 10^4 values per
agent, simulated, on a ring of 16 agents and an exponential-2 graph of 64, with the
topology's default weights ``1/(in-degree + 1)``. Exact gossip is
``x = fs.neighbor_allreduce(x)``; CHOCO-gossip (:class:`fogsim.compress.CompressedGossip`)
runs with top-1% (values in x's float64, and sent in float32: ``value_dtype``), top-10%,
4-bit QSGD (``qsgd(s=7)``, and ``qsgd(s=7, scaled=True)``, rescaled by ``1/(1 + tau)``
as in the paper) and scaled sign. Bytes are what
``fs.bytes_sent()`` counts (the payload per out-neighbor), averaged over the agents. The
measure: the bytes (and steps) until the consensus error ``sqrt(mean_i ||x_i - xbar||^2)``
is at most ``--target`` (1e-8) times its value at the start. Each CHOCO variant's
``gamma`` is picked by a sweep, printed whole: a run stops at the target, when its error
grows past 100x the start's or stops being finite ("diverged"), or when it has sent as
many bytes as exact gossip needed ("not reached").

    python benchmarks/bench_compress.py            # both graphs, full sweeps (minutes)
    python benchmarks/bench_compress.py --quick    # ring of 16, d = 1000, 1-2 gammas (15 s)

Goal (issue 23): CHOCO top-1% reaches 1e-8 with at most 20% of exact gossip's bytes on
the ring of 16.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from _record import record, save

import fogsim as fs
from fogsim import compress as C
from fogsim import topology as T

GRAPHS = {"ring-16": (T.ring_graph, 16), "exp2-64": (T.exponential_two_graph, 64)}
VARIANTS = {
    "top-1%": (lambda: C.top_k(0.01), (0.03, 0.04, 0.045, 0.05, 0.0525, 0.055, 0.0575, 0.06, 0.07)),
    "top-1% f32": (
        lambda: C.top_k(0.01, value_dtype=np.float32),
        (0.04, 0.045, 0.05, 0.0525, 0.055, 0.0575, 0.06),
    ),
    "top-10%": (lambda: C.top_k(0.1), (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)),
    "qsgd-4bit": (lambda: C.qsgd(s=7), (0.01, 0.05, 0.2)),
    "qsgd-4bit scaled": (lambda: C.qsgd(s=7, scaled=True), (0.05, 0.1, 0.2, 0.3, 0.5, 0.7)),
    "scaled-sign": (lambda: C.scaled_sign(), (0.05, 0.1, 0.2, 0.3, 0.4, 0.5)),
}
QUICK = {
    "top-1%": (0.05, 0.06),
    "top-1% f32": (0.05,),
    "top-10%": (0.3, 0.5),
    "qsgd-4bit": (0.05,),
    "qsgd-4bit scaled": (0.5,),
    "scaled-sign": (0.2,),
}


def _error(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1))))


def run(
    x0: np.ndarray, compressor: C.Compressor | None, gamma: float, target: float, budget: float
) -> tuple[str, int, float]:
    """Run consensus from ``x0``; return (outcome, steps, bytes per agent).

    ``compressor=None`` is exact gossip. Stops at ``target`` (relative error), on
    divergence, or once the bytes per agent exceed ``budget``.
    """
    fs.bytes_sent(reset=True)
    gossip = None if compressor is None else C.CompressedGossip(compressor, gamma)
    x, start, k = x0.copy(), _error(x0), 0
    while True:
        x = fs.neighbor_allreduce(x) if gossip is None else gossip.step(x)
        k += 1
        rel, sent = _error(x) / start, float(np.mean(fs.bytes_sent()))
        if rel <= target:
            return "reached", k, sent
        if not math.isfinite(rel) or rel > 100.0:
            return "diverged", k, sent
        if sent >= budget:
            return "not reached", k, sent


def bench(graph: str, d: int, target: float, quick: bool, variants: list[str] | None) -> None:
    make, n = GRAPHS[graph]
    fs.init(size=n, topology=make)
    x0 = np.random.default_rng(0).standard_normal((n, d))
    t = time.perf_counter()
    _, steps0, bytes0 = run(x0, None, 1.0, target, math.inf)
    per_step = C.identity().payload_bytes(d) * float(np.mean(fs.load_topology().out_degrees()))
    print(
        f"\n{graph}, d = {d}: exact gossip reaches {target:g} (relative) in {steps0} steps, "
        f"{bytes0 / 1e6:.2f} MB per agent ({per_step / 1e3:.0f} kB a step; "
        f"{time.perf_counter() - t:.1f} s)"
    )
    print(
        f"{'variant':17} {'payload B':>9} {'gamma':>6} {'outcome':>12} {'steps':>7} "
        f"{'MB/agent':>9} {'ratio':>7} {'s':>6}"
    )
    for name, (factory, grid) in VARIANTS.items():
        if variants is not None and name not in variants:
            continue
        compressor = factory()
        payload = compressor.payload_bytes(d)
        best: tuple[float, int, float] | None = None
        for gamma in QUICK[name] if quick else grid:
            t = time.perf_counter()
            outcome, steps, sent = run(x0, compressor, gamma, target, bytes0)
            shown = f"{sent / bytes0:.3f}" if outcome == "reached" else ""
            print(
                f"{name:17} {payload:9d} {gamma:6.3f} {outcome:>12} {steps:7d} "
                f"{sent / 1e6:9.3f} {shown:>7} {time.perf_counter() - t:6.1f}",
                flush=True,
            )
            if outcome == "reached" and (best is None or sent < best[2]):
                best = (gamma, steps, sent)
        goal = "<= 0.2" if name.startswith("top-1%") and graph == "ring-16" else None
        if best is None:
            print(f"{name:17} best: none of the gammas reached {target:g}")
            record(
                "compress",
                f"{graph} {name} bytes to {target:g}",
                None,
                bytes0,
                goal=goal,
                unit="B",
                note="not reached",
            )
            continue
        gamma, steps, sent = best
        print(
            f"{name:17} best: gamma {gamma:g}, {steps} steps, {sent / bytes0:.3f} of exact's bytes"
        )
        record(
            "compress",
            f"{graph} {name} bytes to {target:g}",
            sent,
            bytes0,
            goal=goal,
            unit="B",
            note=f"gamma {gamma:g}, {steps} steps vs {steps0}, d {d}",
        )
    fs.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="ring of 16, d = 1000, short sweeps")
    p.add_argument("--d", type=int, default=None, help="values per agent (default 10^4)")
    p.add_argument("--target", type=float, default=1e-8, help="relative consensus error")
    p.add_argument("--graphs", default=None, help=f"comma-separated: {', '.join(GRAPHS)}")
    p.add_argument(
        "--variants", default=None, help=f"comma-separated, default all: {', '.join(VARIANTS)}"
    )
    args = p.parse_args()
    variants = None if args.variants is None else args.variants.split(",")
    unknown = sorted(set(variants or ()) - set(VARIANTS))
    if unknown:
        p.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    d = args.d or (1000 if args.quick else 10_000)
    graphs = (
        args.graphs.split(",") if args.graphs else (["ring-16"] if args.quick else list(GRAPHS))
    )
    for graph in graphs:
        bench(graph, d, args.target, args.quick, variants)
    save()


if __name__ == "__main__":
    main()
