"""Sharded simulation: steps/s of one simulation split over P processes, against one process.

Consensus, ``x = fs.neighbor_allreduce(x)`` on float64 state of N agents x d = 8 values, on
the ring and the exponential-2 graph, for N = 10^5, 10^6, 10^7 and P = 1, 2, 4. P = 1 is
the plain one-process simulator; P > 1 runs the same worker under
``fogrun --sim -np N --shards P`` (the venv's ``python -m fogsim.run``), each process
holding a contiguous block of about N/P agents. Each run is a subprocess that prints one
JSON line from the main process: steps/s (the slowest process's timed loop), the seconds of
setup (``init``, building the block's state, the first step, which builds the plan and the
halo) and the peak RSS of every process (``ru_maxrss``, gathered with ``fs.global_view``).
Printed: the table, each P's speed against P = 1 in the same run (goal at N = 10^6 on the
ring: 2 processes >= 1.4x one), and the cost model's prediction for P = 64 processes over a
10 Gb/s and a 100 Gb/s network (:func:`predict`).

    python benchmarks/bench_sharded.py              # the full grid (about 2 minutes)
    python benchmarks/bench_sharded.py --quick      # N = 10^4, 10^5; P = 1, 2 (seconds)
    python benchmarks/bench_sharded.py --repeat 3   # 3 alternating rounds, medians (4 min)

Runs whose state cannot fit in this machine's available memory are skipped with the reason,
and a job is killed (and reported) if the machine's available memory falls under
``--reserve-gb`` while it runs: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np
from _record import record, save

import fogsim as fs
from fogsim import topology as T
from fogsim.backends.sim._bands import band_plan
from fogsim.backends.sim._plan import static_plan
from fogsim.backends.sim._shards import block_bounds, shard_plan
from fogsim.hierarchy import cost

TOPOLOGIES = {"ring": T.ring_graph, "exp2": T.exponential_two_graph}
D = 8
ROW = 8 * D  # bytes of one agent's float64 row
#: (name, alpha s, bandwidth B/s): the cost model's 100 Gb/s InfiniBand figures, and a
#: 10 Gb/s Ethernet-class link with a TCP-class latency (illustrative, as the model's are)
NETWORKS = (
    ("10 Gb/s", 25e-6, 10e9 / 8),
    ("100 Gb/s", cost.INFINIBAND_100G["alpha"], cost.INFINIBAND_100G["bandwidth"]),
)


# -- the worker: one run, in the launched process(es) ----------------------------------------
def worker(topology: str, n: int, steps: int, seconds: float) -> None:
    """Time consensus on ``n`` agents; print one JSON line on the main process."""
    t0 = time.perf_counter()
    fs.init(backend="sim", size=n, topology=TOPOLOGIES[topology])
    ranks = np.asarray(fs.rank())
    x = np.sin(ranks[:, None] * (1.0 + np.arange(D)))  # agent r's row whatever the block
    x = fs.neighbor_allreduce(x)  # the first step builds the plan (and the halo)
    setup = time.perf_counter() - t0
    if steps == 0:  # one process only: every process of a job must run the same steps
        t = time.perf_counter()
        x = fs.neighbor_allreduce(x)
        steps = max(3, min(500, round(seconds / max(time.perf_counter() - t, 1e-9))))
    t = time.perf_counter()
    for _ in range(steps):
        x = fs.neighbor_allreduce(x)
    loop = time.perf_counter() - t
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    # One row per agent of this block: gathering it gives every process's figures.
    mine = np.tile([ranks[0], rss_mb, setup, loop], (len(ranks), 1))
    everyone = np.asarray(fs.global_view(mine))
    first = np.unique(everyone[:, 0], return_index=True)[1]
    per_process = everyone[np.sort(first)]
    if fs.is_main_process():
        result = {
            "topology": topology,
            "n": n,
            "processes": len(per_process),
            "block": len(ranks),
            "steps": steps,
            "steps_per_s": steps / float(per_process[:, 3].max()),
            "setup_s": float(per_process[:, 2].max()),
            "rss_mb": [round(float(v), 1) for v in per_process[:, 1]],
        }
        print(json.dumps(result), flush=True)
    fs.shutdown()


# -- the driver: launch runs, guard memory -------------------------------------------------
def _available_gb() -> float:
    with open("/proc/meminfo") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable"))
    return kb / 2**20


def _need_gb(topology: str, n: int, p: int) -> float:
    """A generous guess of the memory a run needs, all processes together.

    A process keeps its block and halo rows about four times (state, result, the combine's
    extended copy, temporaries); one process at 10^7 agents peaked at 2 GB. Sharded, a
    plan reaching further than a block (exponential-2) is split by ``shard_plan`` into the
    block's CSR entries (about 16 bytes per block row and offset at its peak, measured at
    10^7 agents); narrow ones (the ring) need no index arrays.
    """
    if p == 1:
        return 4 * n * ROW / 2**30 + 0.25
    held = sum(b + h for b, h in _held_rows(topology, n, p))
    wide = band_plan(static_plan(TOPOLOGIES[topology](n), False), n, p, 0) is None
    plan = p * -(-n // p) * len(_offsets(topology, n)) * 16 if wide else 0
    return (4 * held * ROW + plan) / 2**30 + 0.25 * p


def launch(
    topology: str, n: int, p: int, steps: int, seconds: float, timeout: float, reserve_gb: float
) -> dict | str:
    """Run one case in a subprocess; return its JSON result, or why there is none."""
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--topology", topology]
    me += ["--n", str(n), "--steps", str(steps), "--seconds", str(seconds)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOGSIM_")}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")  # as fogrun gives the shards
    if p == 1:
        cmd = me
    else:
        sim = ["--sim", "-np", str(n), "--shards", str(p), "--timeout", str(timeout)]
        cmd = [sys.executable, "-m", "fogsim.run", *sim, *me]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    start, why = time.monotonic(), ""
    while proc.poll() is None:
        time.sleep(0.2)
        if _available_gb() < reserve_gb:
            why = f"killed: the machine's available memory fell under {reserve_gb:g} GB"
        elif time.monotonic() - start > timeout + 30:
            why = f"killed after {timeout + 30:g} s"
        if why:
            os.killpg(proc.pid, 9)
            proc.wait()
            return why
    out, err = (s.decode(errors="replace") for s in proc.communicate())
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return f"failed ({proc.returncode}): {tail[:160]}"
    return json.loads(lines[-1])


# -- the cost model's prediction -----------------------------------------------------------
def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, z in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


def circulant_halo(offsets: Sequence[int], n: int, parts: int) -> np.ndarray:
    """Return ``rows[q, p]``: the rows block ``p`` receives from block ``q`` in one step.

    Agent i reads ``(i + o) mod n`` for each offset o (a circulant plan), so block
    ``[lo, hi)`` reads the runs ``[lo + o, hi + o) mod n``; what of them other blocks hold
    is its halo. O(parts^2 * offsets), for any n; :func:`check_halo` pins it to
    ``fogsim.backends.sim._shards.shard_plan``.
    """
    bounds = block_bounds(n, parts)
    rows = np.zeros((parts, parts), dtype=np.int64)
    for p in range(parts):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        runs: list[tuple[int, int]] = []
        for o in offsets:
            a, z = lo + int(o) % n, hi + int(o) % n
            runs += [(a, min(z, n))] if a < n else [(a - n, z - n)]
            if a < n < z:
                runs.append((0, z - n))
        for a, z in _merged(runs):
            for q in range(parts):
                if q != p:
                    rows[q, p] += max(0, min(z, int(bounds[q + 1])) - max(a, int(bounds[q])))
    return rows


def _offsets(topology: str, n: int) -> list[int]:
    form = TOPOLOGIES[topology](n).circulant_form()
    assert form is not None, f"{topology} is circulant"
    return [int(o) for o in form.offsets]


def _held_rows(topology: str, n: int, parts: int) -> list[tuple[int, int]]:
    """(block, halo) rows of each process."""
    rows = circulant_halo(_offsets(topology, n), n, parts)
    sizes = np.diff(block_bounds(n, parts))
    return [(int(sizes[p]), int(rows[:, p].sum())) for p in range(parts)]


def check_halo(n: int = 1000, parts: Sequence[int] = (2, 3, 7, 64)) -> None:
    """Check :func:`circulant_halo` against ``shard_plan``'s sends and halos at a small n."""
    for name, make in TOPOLOGIES.items():
        plan = static_plan(make(n), False)
        for p in parts:
            rows = circulant_halo(_offsets(name, n), n, p)
            for me in range(p):
                shard = shard_plan(plan, n, p, me)
                got = {q: z - a for q, (a, z) in shard.recv.items()}
                assert got == {q: int(r) for q, r in enumerate(rows[:, me]) if r}, (name, p, me)
                sent = {q: len(v) for q, v in shard.send.items()}
                assert sent == {q: int(r) for q, r in enumerate(rows[me]) if r}, (name, p, me)


def predict(
    topology: str, n: int, parts: int, row_seconds: float, alpha: float, bandwidth: float
) -> dict:
    """Return the predicted seconds of one sharded step ``X <- W X`` on ``parts`` processes.

    Compute: ``row_seconds`` (one process's measured seconds per agent row at d = 8) times
    the largest block. Communication: the halo exchange on a one-level network of
    ``parts`` processes, each on its own link of latency ``alpha`` and ``bandwidth``; as in
    ``fogsim.hierarchy.cost`` a neighbor exchange lasts as long as its busiest link, here
    ``alpha + bytes / bandwidth`` with bytes the most any process sends or receives (the
    cost model's ``alpha + c n / w`` for messages of unequal sizes). ``step`` adds the two;
    ``overlapped`` is the bound when the exchange hides behind the interior rows' combine.
    """
    rows = circulant_halo(_offsets(topology, n), n, parts)
    busiest = int(max(rows.sum(axis=1).max(), rows.sum(axis=0).max()))
    compute = row_seconds * math.ceil(n / parts)
    comm = alpha + busiest * ROW / bandwidth if busiest else 0.0
    return {
        "halo_rows": busiest,
        "compute": compute,
        "comm": comm,
        "step": compute + comm,
        "overlapped": max(compute, comm),
    }


def _check_against_cost_model(parts: int = 64) -> None:
    # Equal messages: the formula above is the cost model's own neighbor exchange.
    for _, alpha, w in NETWORKS:
        net = cost.Network([cost.Level(parts, alpha, w)])
        model = cost.neighbor_allreduce_time(net, ROW, T.ring_graph(parts))
        ours = predict("ring", 10**6, parts, 0.0, alpha, w)["comm"]
        assert math.isclose(ours, model, rel_tol=1e-12), (ours, model)


# -- main ---------------------------------------------------------------------------------
def _mb(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values)


def _case(topology: str, n: int, p: int, steps: int, args: argparse.Namespace) -> dict | str:
    """Run one case unless it cannot fit in memory; return its result or why there is none."""
    need, free = _need_gb(topology, n, p), _available_gb()
    if need > free - args.reserve_gb:
        return (
            f"skipped: needs about {need:.1f} GB, {free:.1f} GB available "
            f"(keeping {args.reserve_gb:g} GB)"
        )
    r = launch(topology, n, p, steps, args.seconds, args.timeout, args.reserve_gb)
    if isinstance(r, dict) and p > 1 and r["processes"] != p:
        return (
            f"not sharded: {r['processes']} process(es) of {r['block']} agents; "
            "this fogsim has no sharded simulator"
        )
    return r


def _report(results: dict, topology: str, n: int, p: int, rates: list[float]) -> None:
    """Print and record one case's line (its median run; every run's steps/s in the note)."""
    r, base = results[topology, n, p], results.get((topology, n, 1))
    if not isinstance(r, dict):
        blank = f"{'':>9} {'':>7} {'':>8} {'':>10} {'':>20}"
        print(f"{topology:<8} {n:>9} {p:>2} {blank}  {r}", flush=True)
        return
    vs = r["steps_per_s"] / base["steps_per_s"] if isinstance(base, dict) else None
    halo = max(h for _, h in _held_rows(topology, n, p)) if p > 1 else 0
    spread = "runs " + ", ".join(f"{v:.4g}" for v in rates) if len(rates) > 1 else ""
    print(
        f"{topology:<8} {n:>9} {p:>2} {r['steps_per_s']:>9.2f} "
        f"{'' if vs is None else f'{vs:.2f}x':>7} {r['setup_s']:>8.2f} "
        f"{halo:>10} {_mb(r['rss_mb']):>20}  {spread}",
        flush=True,
    )
    record(
        "sharded",
        f"{topology}, N={n}, P={p}: steps/s",
        r["steps_per_s"],
        base["steps_per_s"] if p > 1 and isinstance(base, dict) else None,
        goal=">= 1.4" if (topology, n, p) == ("ring", 10**6, 2) else None,
        unit="steps/s",
        note=f"peak RSS {_mb(r['rss_mb'])} MB/process",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 10^4, 10^5; P = 1, 2")
    parser.add_argument("--agents", help="comma-separated N (default: the grid)")
    parser.add_argument("--processes", help="comma-separated P (default: 1,2,4)")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed loop per run")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of alternating runs; the median is kept"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--reserve-gb", type=float, default=2.0, help="memory left to others")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--topology", default="ring", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.topology, args.n, args.steps, args.seconds)
        return 0
    agents = [10**4, 10**5] if args.quick else [10**5, 10**6, 10**7]
    processes = [1, 2] if args.quick else [1, 2, 4]
    if args.agents:
        agents = [int(float(a)) for a in args.agents.split(",")]
    if args.processes:
        processes = sorted({1, *(int(p) for p in args.processes.split(","))})
    check_halo()
    _check_against_cost_model()

    results: dict[tuple[str, int, int], dict | str] = {}
    header = (
        f"{'topology':<8} {'N':>9} {'P':>2} {'steps/s':>9} {'vs P=1':>7} {'setup s':>8} "
        f"{'halo rows':>10} {'peak RSS MB/process':>20}  note"
    )
    print(header)
    print("-" * len(header))
    for topology in TOPOLOGIES:
        for n in agents:
            # P = 1 first: every P runs as many steps as one process did in --seconds;
            # --repeat alternates the P's round after round and keeps each one's median
            steps = 0
            runs: dict[int, list[dict | str]] = {p: [] for p in processes}
            for _ in range(args.repeat):
                for p in processes:
                    if runs[p] and isinstance(runs[p][-1], str):
                        continue  # skipped, failed or killed: once is enough
                    r = _case(topology, n, p, steps, args)
                    if isinstance(r, dict) and p == 1:
                        steps = r["steps"]
                    runs[p].append(r)
            for p in processes:
                done = sorted(
                    (r for r in runs[p] if isinstance(r, dict)), key=lambda r: r["steps_per_s"]
                )
                results[topology, n, p] = done[len(done) // 2] if done else runs[p][-1]
                _report(results, topology, n, p, [r["steps_per_s"] for r in done])

    r1, r2 = results.get(("ring", 10**6, 1)), results.get(("ring", 10**6, 2))
    if isinstance(r1, dict) and isinstance(r2, dict):
        ratio = r2["steps_per_s"] / r1["steps_per_s"]
        print(f"\nring, N = 10^6: 2 processes / 1 process = {ratio:.2f}x (goal >= 1.4)")

    print(f"\nPredicted for P = 64 processes, one per machine (d = {D}; the cost model's")
    print("neighbor exchange; compute = one process's seconds per row, measured here at the")
    print("N nearest the rows a process holds, times N/P):")
    head = (
        f"{'topology':<8} {'N':>9} {'network':>9} {'halo rows':>10} {'compute ms':>11} "
        f"{'comm ms':>8} {'step ms':>8} {'steps/s':>8} {'vs P=1':>7}  row time from"
    )
    print(head)
    print("-" * len(head))
    for topology in TOPOLOGIES:
        measured = {
            n: r
            for (t, n, p), r in results.items()
            if t == topology and p == 1 and isinstance(r, dict)
        }
        if not measured:
            print(f"{topology}: no one-process measurement to scale")
            continue
        for n in (10**6, 10**7):
            held = max(b + h for b, h in _held_rows(topology, n, 64))
            near = min(measured, key=lambda m: abs(math.log(m / held)))
            row_s = 1 / (measured[near]["steps_per_s"] * near)
            one = measured.get(n)
            for name, alpha, w in NETWORKS:
                f = predict(topology, n, 64, row_s, alpha, w)
                vs = 1 / f["step"] / one["steps_per_s"] if one else None
                print(
                    f"{topology:<8} {n:>9} {name:>9} {f['halo_rows']:>10} "
                    f"{1e3 * f['compute']:>11.3f} {1e3 * f['comm']:>8.3f} "
                    f"{1e3 * f['step']:>8.3f} {1 / f['step']:>8.0f} "
                    f"{'' if vs is None else f'{vs:.0f}x':>7}  N={near} ({1e9 * row_s:.1f} ns/row)"
                )
                record(
                    "sharded",
                    f"{topology}, N={n}, P=64 over {name}: predicted steps/s",
                    1 / f["step"],
                    one["steps_per_s"] if one else None,
                    unit="steps/s",
                    note="cost model",
                )
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
