"""fogsim's torch.distributed runtime against raw torch.distributed, and both against MPI.

    python benchmarks/bench_torch_raw.py                 # 4 processes, then 2 (1-2 minutes)
    python benchmarks/bench_torch_raw.py -np 4 --also ""  # 4 processes only
    python benchmarks/bench_torch_raw.py --sizes 8,4194304 --rounds 5 --no-train

One job of ``-np`` processes (``fogrun``, so MPI is there too) holds two fogsim worlds at
once, ``fs.Context("torch")`` (gloo, CPU) and ``fs.Context("mpi")``, on the exponential-2
graph, and times in the same interleaved rounds (``bench_mpi.per_call``: medians, the
slowest rank's time per call) on the same float32 tensor, per size:

* allreduce: raw ``x.clone()``, ``dist.all_reduce`` and ``div_(n)`` on torch's default
  group; raw mpi4py ``Allreduce`` and the division; ``fs.allreduce(x)`` in each world;
* neighbor_allreduce: raw ``dist.batch_isend_irecv`` of ``x`` to the out-neighbors and from
  the in-neighbors, then ``w_self * x + sum_k w_k y_k`` in float32 with torch's in-place
  ``add_`` (what fogsim's call has to do at least; fogsim sums in float64 and rounds once,
  for the simulator's bits); raw mpi4py ``Neighbor_allgather`` on a distributed-graph
  communicator and the same sum;
  ``fs.neighbor_allreduce(x)`` in each world (check on, the default), with
  ``enable_topo_check=False``, and dynamic (the same weights given as ``self_weight``,
  ``src_weights``, ``dst_weights``: ranks then also exchange who sends to whom).

Then (unless ``--no-train``) one training step with gradient allreduce, as
``bench_torch.py --part dist`` trains (MLP 784-512-512-10, 64 samples per rank, SGD with
momentum): ``fo.DistributedGradientAllreduceOptimizer`` in each world against raw loops
that start ``dist.all_reduce`` (or mpi4py ``Iallreduce``) per gradient from a hook as
backward produces it, wait, divide and step.

Printed per job: microseconds per call and the ratios fogsim/raw on torch (goal <= 1.2),
raw torch/raw MPI (what gloo itself costs) and fogsim torch/fogsim MPI (the whole gap).
``--also 2`` (the default) reruns the job on 2 processes: one per core on a 2-core
machine, so the share that oversubscription adds to each figure shows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
from _record import record, save
from bench_mpi import per_call

SIZES = [8, 64 << 10, 4 << 20]
# gloo's latencies on oversubscribed cores have a long tail (a median call of 0.5 ms, 1 in
# 100 over 4 ms): batches of at least 50 ms average over enough calls to be stable
BATCH_SECONDS = 0.05


def _in(ctx, fn):
    """Return ``fn`` run with ``ctx`` as fogsim's current world."""

    def call():
        with ctx:
            return fn()

    return call


def _weighted_sum(x, recv, w_self: float, w: np.ndarray):
    """``w_self * x + sum_k w_k recv_k`` in float32, in place (the least work there is)."""
    out = x * w_self
    for k, wk in enumerate(w.tolist()):
        out.add_(recv[k], alpha=wk)
    return out


def _raw_neighbor_torch(x, srcs, dsts, w_self, w):
    """Raw torch.distributed exchange on the graph, then the weighted sum."""
    import torch
    import torch.distributed as dist

    recv = torch.empty((len(srcs), x.numel()), dtype=x.dtype)
    ops = [dist.P2POp(dist.irecv, recv[k], int(j)) for k, j in enumerate(srcs)]
    ops += [dist.P2POp(dist.isend, x, int(j)) for j in dsts]

    def call():
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return _weighted_sum(x, recv, w_self, w)

    return call


def _raw_neighbor_mpi(x, graph, n_srcs, w_self, w):
    """Raw mpi4py ``Neighbor_allgather`` on a graph communicator, then the same sum."""
    import torch

    a = x.numpy()
    recv = np.empty((n_srcs, a.size), dtype=a.dtype)
    recv_t = torch.from_numpy(recv)

    def call():
        graph.Neighbor_allgather(a, recv)
        return _weighted_sum(x, recv_t, w_self, w)

    return call


def _training(comm, tw, mw, n, rounds):
    """Seconds per gradient-allreduce training step: fogsim torch, raw torch, fogsim MPI,
    raw MPI (in that order)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from mpi4py import MPI
    from torch import nn

    from fogsim import optim as fo

    g = torch.Generator().manual_seed(comm.Get_rank())
    x, y = torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)

    def model_and_sgd():
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def fogsim_step(ctx):
        with ctx:
            model, sgd = model_and_sgd()
            opt = fo.DistributedGradientAllreduceOptimizer(sgd, model)

        def step():
            with ctx:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()

        return step

    def raw_step(start, finish):
        model, opt = model_and_sgd()
        pending = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: pending.append((p, start(p.grad))))

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p, work in pending:
                finish(work)
                p.grad.div_(n)
            pending.clear()
            opt.step()

        return step

    raw_torch = raw_step(lambda g: dist.all_reduce(g, async_op=True), lambda w: w.wait())
    raw_mpi = raw_step(lambda g: comm.Iallreduce(MPI.IN_PLACE, g.numpy()), lambda r: r.Wait())
    return per_call(
        [fogsim_step(tw), raw_torch, fogsim_step(mw), raw_mpi], comm, rounds, BATCH_SECONDS
    )


def child(sizes: list[int], rounds: int, train: bool) -> None:
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    import fogsim as fs
    from fogsim import topology as T

    comm = MPI.COMM_WORLD
    tw = fs.Context("torch", topology=T.exponential_two_graph)
    mw = fs.Context("mpi", topology=T.exponential_two_graph)
    n, r = comm.Get_size(), comm.Get_rank()
    topo = T.exponential_two_graph(n).uniform()
    srcs, dsts = topo.in_neighbors(r), topo.out_neighbors(r)
    dense = topo.to_dense()
    w = np.array([dense[r, j] for j in srcs])
    w_self = float(topo.self_weights[r])
    src_weights = {int(j): float(wj) for j, wj in zip(srcs, w, strict=True)}
    graph = comm.Create_dist_graph_adjacent(srcs, dsts, reorder=False)
    main = r == 0
    # (op, bytes) -> {"raw torch", "fogsim torch", "raw MPI", "fogsim MPI"} seconds per call
    results: dict[tuple[str, int], dict[str, float]] = {}
    for nbytes in sizes:
        x = torch.from_numpy(
            np.random.default_rng(r).standard_normal(max(1, nbytes // 4)).astype(np.float32)
        )
        a = x.numpy()

        def raw_torch_allreduce(x=x):
            out = x.clone()
            dist.all_reduce(out)
            return out.div_(n)

        def raw_mpi_allreduce(a=a):
            out = np.empty_like(a)
            comm.Allreduce(a, out)
            out /= n
            return out

        times = per_call(
            [
                raw_torch_allreduce,
                _in(tw, lambda x=x: fs.allreduce(x)),
                raw_mpi_allreduce,
                _in(mw, lambda x=x: fs.allreduce(x)),
            ],
            comm,
            rounds,
            BATCH_SECONDS,
        )
        results[("allreduce", x.nbytes)] = dict(zip(COLUMNS, times, strict=True))

        def dynamic(x=x):
            return fs.neighbor_allreduce(
                x, self_weight=w_self, src_weights=src_weights, dst_weights=list(dsts)
            )

        raw_t = _raw_neighbor_torch(x, srcs, dsts, w_self, w)
        raw_m = _raw_neighbor_mpi(x, graph, len(srcs), w_self, w)
        calls = {
            "neighbor_allreduce": lambda x=x: fs.neighbor_allreduce(x),
            "neighbor_allreduce, check off": lambda x=x: fs.neighbor_allreduce(
                x, enable_topo_check=False
            ),
            "neighbor_allreduce, dynamic": dynamic,
        }
        fns = [raw_t, raw_m]
        for call in calls.values():
            fns += [_in(tw, call), _in(mw, call)]
        times = per_call(fns, comm, rounds, BATCH_SECONDS)
        for k, op in enumerate(calls):
            t_fs, m_fs = times[2 + 2 * k], times[3 + 2 * k]
            results[(op, x.nbytes)] = dict(
                zip(COLUMNS, (times[0], t_fs, times[1], m_fs), strict=True)
            )
    if train:
        t_fs, t_raw, m_fs, m_raw = _training(comm, tw, mw, n, max(3, rounds // 2))
        results[("gradient allreduce training step", 0)] = dict(
            zip(COLUMNS, (t_raw, t_fs, m_raw, m_fs), strict=True)
        )
    graph.Free()
    tw.close()
    mw.close()
    if main:
        report(results, n, len(srcs))
        save()


COLUMNS = ("raw torch", "fogsim torch", "raw MPI", "fogsim MPI")
GOAL = 1.2  # fogsim on torch.distributed at most 1.2x the raw calls (issue 20)


def report(results: dict, n: int, degree: int) -> None:
    """Print the job's table and record its rows (on the main rank)."""
    print(
        f"{n} processes, exponential-2 graph (in-degree {degree}), float32; us per call, "
        "the slowest rank's, median of interleaved rounds"
    )
    print(
        f"{'op':<34} {'bytes':>8} {'raw torch':>10} {'fogsim torch':>13} {'fs/raw':>7} "
        f"{'raw MPI':>9} {'fogsim MPI':>11} {'torch/MPI raw':>14} "
        f"{'torch/MPI fogsim':>17}"
    )
    verdicts = []
    for (op, nbytes), t in results.items():
        ratio = t["fogsim torch"] / t["raw torch"]
        size = f"{nbytes} B" if nbytes else "MLP 2.7 MB"
        goal = f"<= {GOAL}" if op in ("allreduce", "neighbor_allreduce") else None
        if goal:
            verdicts.append((op, size, ratio))
        record(
            "torch_raw",
            f"{n} ranks, {op} {size}: fogsim torch vs raw torch.distributed",
            t["fogsim torch"],
            t["raw torch"],
            goal=goal,
        )
        if op in ("allreduce", "neighbor_allreduce", "gradient allreduce training step"):
            record(
                "torch_raw",
                f"{n} ranks, {op} {size}: raw torch.distributed vs raw MPI",
                t["raw torch"],
                t["raw MPI"],
            )
        print(
            f"{op:<34} {nbytes or '':>8} {1e6 * t['raw torch']:>10.1f} "
            f"{1e6 * t['fogsim torch']:>13.1f} {ratio:>7.2f} {1e6 * t['raw MPI']:>9.1f} "
            f"{1e6 * t['fogsim MPI']:>11.1f} {t['raw torch'] / t['raw MPI']:>14.1f} "
            f"{t['fogsim torch'] / t['fogsim MPI']:>17.1f}",
            flush=True,
        )
    missed = [f"{op} {size} ({ratio:.2f}x)" for op, size, ratio in verdicts if ratio > GOAL]
    verdict = "met" if not missed else "not met at " + ", ".join(missed)
    print(
        f"goal fogsim torch <= {GOAL}x raw torch.distributed (allreduce, "
        f"neighbor_allreduce): {verdict}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-np", type=int, default=4, help="number of processes")
    parser.add_argument(
        "--also", default="2", help="process counts to run after -np, comma-separated"
    )
    parser.add_argument(
        "--sizes", default=",".join(map(str, SIZES)), help="message sizes in bytes, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--no-train", action="store_true", help="skip the training step")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.child:
        child(sizes, args.rounds, not args.no_train)
        return 0
    counts = [args.np] + [int(c) for c in args.also.split(",") if c and int(c) != args.np]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop("FOGSIM_BACKEND", None)
    code = 0
    for np_ in counts:
        cmd = [
            sys.executable,
            "-m",
            "fogsim.run",
            "-np",
            str(np_),
            "--timeout",
            "600",
            "python",
            __file__,
            "--child",
            "--sizes",
            args.sizes,
            "--rounds",
            str(args.rounds),
        ]
        cmd += ["--no-train"] if args.no_train else []
        print(
            f"\nfogsim torch runtime vs raw torch.distributed and MPI, {np_} processes", flush=True
        )
        code = code or subprocess.run(cmd, env=env, timeout=700).returncode
    return code


if __name__ == "__main__":
    sys.exit(main())
