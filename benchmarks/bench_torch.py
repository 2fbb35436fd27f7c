"""Training throughput of fogsim.optim, against baselines measured in the same run.

    python benchmarks/bench_torch.py                  # both parts (about a minute)
    python benchmarks/bench_torch.py --part sim --sizes 8,32,128,512
    python benchmarks/bench_torch.py --part dist -np 4 --backends mpi,torch

* ``dist``: relaunches itself under ``fogrun -np 4`` (once per backend; ``torch`` is
  skipped with the reason when ``fs.init(backend="torch")`` fails) and trains an MLP
  (784-512-512-10, float32, 64 samples per rank and step) with adapt-then-combine SGD
  (``neighbor_allreduce`` on the exponential-2 graph) and with gradient allreduce, plus
  local steps only (``communication_type='empty'``) as the compute-bound reference.
  Printed: samples/s of the whole job (the slowest rank's step time) and ratios.
* ``sim``: simulated training of n replicas of the digits MLP (64-64-10, 16 samples per
  agent and step, ATC SGD with momentum on the exponential-2 graph): one stacked
  ``AgentModel`` stepped by one wrapped optimizer, against a Python loop over n separate
  models and optimizers followed by the same mixing ``X <- W X`` per parameter. The
  stacked loss is computed with ``fo.per_agent(F.cross_entropy)`` (as in
  examples/decentralized_training.py: one batched call) and, second, with
  ``torch.func.vmap(F.cross_entropy)``, the path any other per-agent function takes.
  Printed: steps/s and speed-ups over the loop.

Times are medians over interleaved rounds, so drifting machine load hits both alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from _record import record, save
from torch import nn

import fogsim as fs
from fogsim import optim as fo
from fogsim import topology as T


def interleaved(fns, rounds: int, min_seconds: float = 0.05, clock=None) -> list[float]:
    """Return each function's median seconds per call over interleaved rounds.

    ``clock(seconds)`` turns one process's time into the job's (e.g. the slowest rank's);
    every process must then make the same calls.
    """
    clock = clock or (lambda s: s)

    def batch(fn, calls: int) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return clock(time.perf_counter() - t0) / calls

    for fn in fns:
        fn()
    calls = 1
    while calls < 256 and batch(fns[0], calls) * calls < min_seconds:
        calls *= 2
    times = [[batch(fn, calls) for fn in fns] for _ in range(rounds)]
    return [float(np.median(column)) for column in zip(*times, strict=True)]


# -- simulated: one stacked model vs a loop over n models ---------------------------------
def digits_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def sim_part(sizes: list[int], rounds: int) -> None:
    print("simulated training, digits MLP 64-64-10, 16 samples per agent, ATC SGD on exp-2;")
    print("loss per agent with fo.per_agent(F.cross_entropy), or through torch.func.vmap")
    print(
        f"{'agents':>7} {'loop steps/s':>13} {'stacked steps/s':>16} {'speed-up':>9} "
        f"{'vmap loss steps/s':>18} {'speed-up':>9}"
    )
    for n in sizes:
        fs.init(backend="sim", size=n, topology=T.exponential_two_graph)
        torch.manual_seed(0)
        x, y = torch.randn(n, 16, 64), torch.randint(0, 10, (n, 16))

        def stacked_step(loss_fn, x=x, y=y):
            model = fo.replicate(digits_mlp())
            opt = fo.DistributedAdaptThenCombineOptimizer(
                torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), model
            )

            def step():
                loss = loss_fn(model(x), y)
                opt.zero_grad()
                loss.sum().backward()
                opt.step()

            return step

        models = [digits_mlp() for _ in range(n)]
        opts = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in models]
        W = torch.tensor(T.exponential_two_graph(n).uniform().to_dense(), dtype=torch.float32)

        def loop(models=models, opts=opts, W=W, x=x, y=y, n=n):
            for i in range(n):
                loss = F.cross_entropy(models[i](x[i]), y[i])
                opts[i].zero_grad()
                loss.backward()
                opts[i].step()
            with torch.no_grad():
                for params in zip(*(m.parameters() for m in models), strict=True):
                    mixed = W @ torch.stack(params).reshape(n, -1)
                    for p, row in zip(params, mixed, strict=True):
                        p.copy_(row.view_as(p))

        stacked = stacked_step(fo.per_agent(F.cross_entropy))
        vmapped = stacked_step(torch.func.vmap(F.cross_entropy))
        t_loop, t_stacked, t_vmap = interleaved([loop, stacked, vmapped], rounds)
        record(
            "torch",
            f"{n} simulated replicas, stacked vs a loop of {n} models",
            1 / t_stacked,
            1 / t_loop,
            goal=">= 5" if n == 32 else None,
            unit="steps/s",
        )
        print(
            f"{n:>7} {1 / t_loop:>13.1f} {1 / t_stacked:>16.1f} {t_loop / t_stacked:>8.1f}x "
            f"{1 / t_vmap:>18.1f} {t_loop / t_vmap:>8.1f}x",
            flush=True,
        )
        fs.shutdown()
    save()


# -- distributed: ATC vs gradient allreduce on the same ranks -----------------------------
def _backend_name() -> str:
    """The runtime this job trains on (``"mpi"`` or ``"torch"``)."""
    from fogsim import _context

    return _context.current().backend.name


def dist_child(rounds: int) -> None:
    fs.init(topology=T.exponential_two_graph)
    n, batch = fs.size(), 64
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(int(fs.rank()))
    x, y = torch.randn(batch, 784, generator=g), torch.randint(0, 10, (batch,), generator=g)

    def make(wrapper, **options):
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        opt = wrapper(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), model, **options)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        return step

    runs = {
        "ATC neighbor_allreduce": make(fo.DistributedAdaptThenCombineOptimizer),
        "gradient allreduce": make(fo.DistributedGradientAllreduceOptimizer),
        "local steps only": make(
            fo.DistributedAdaptThenCombineOptimizer, communication_type="empty"
        ),
    }

    def slowest(seconds: float) -> float:
        return float(np.max(fs.allgather(np.array([seconds]))))

    times = interleaved(list(runs.values()), rounds, clock=slowest)
    if fs.is_main_process():
        mb = (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10) * 4 / 1e6
        print(
            f"{n} ranks x {batch} samples per step, MLP 784-512-512-10 ({mb:.1f} MB "
            "float32), exponential-2 graph"
        )
        base = times[1]
        for (name, _), t in zip(runs.items(), times, strict=True):
            if name != "gradient allreduce":  # the other rows carry it as their baseline
                record(
                    "torch",
                    f"{n} ranks, {_backend_name()}: {name} vs gradient allreduce",
                    n * batch / t,
                    n * batch / base,
                    unit="samples/s",
                )
            print(
                f"  {name:<24} {n * batch / t:>10.0f} samples/s  {base / t:>5.2f}x "
                "gradient allreduce"
            )
        save()
    fs.shutdown()


def dist_part(np_: int, backends: list[str], rounds: int) -> None:
    for backend in backends:
        print(f"\ndistributed training, backend {backend!r}, {np_} processes", flush=True)
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
            "--rounds",
            str(rounds),
        ]
        env = {
            **os.environ,
            "FOGSIM_BACKEND": backend,
            "OMP_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": "1",
        }
        env.pop("FOGSIM_SIZE", None)
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            reason = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
            print(f"  skipped: the {backend} backend did not run: {reason}")
            continue
        print(run.stdout.rstrip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["all", "sim", "dist"], default="all")
    p.add_argument("--sizes", default="8,32,128", help="simulated agents, comma-separated")
    p.add_argument("-np", type=int, default=4, help="processes of the distributed part")
    p.add_argument("--backends", default="mpi,torch", help="distributed backends to try")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        dist_child(args.rounds)
        return 0
    if args.part in ("all", "sim"):
        sim_part([int(s) for s in args.sizes.split(",")], args.rounds)
    if args.part in ("all", "dist"):
        dist_part(args.np, [b for b in args.backends.split(",") if b], args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
