"""What communication would cost on a cluster: the alpha-beta models, and a simulated run.

    python examples/cost_model.py                         # saves cost_model.png here
    python examples/cost_model.py --gpus-per-machine 4 --mib 100 --out scaling.png

Part 1 prints and plots the modelled time of one op against the number of GPUs (machines
of ``--gpus-per-machine`` GPUs, NVLink-class inside, 100 Gb/s InfiniBand between; the
figures are illustrative): ring, two-level and decomposed (BlueConnect) all-reduce,
neighbor allreduce on the exponential-2 graph, the average step of the one-peer
exponential-2 schedule, and hierarchical neighbor allreduce over the exponential-2 graph
of machines. Every GPU of a machine shares the machine's uplink (``fogsim.hierarchy.cost``).
It prints a title, a header naming the columns, a row per number of GPUs (ms per op), and a
line naming the cheapest and the dearest op at the most GPUs.

Part 2 attaches the model to a simulated run of decentralized gradient descent on 16
agents (2 machines of 8) and, for a flat and a hierarchical neighbor allreduce, prints the
modelled communication time per iteration, then a header and rows ``iteration  consensus
error  communication (us)`` at a few iterations; the last line compares the two.
"""

from __future__ import annotations

import argparse

import numpy as np

import fogsim as fs
from fogsim import hierarchy as H

COLUMNS = ["ring", "two_level", "decomposed", "neighbor_exp2", "one_peer", "hierarchical"]


def scaling(gpus_per_machine: int, mib: float, out: str | None) -> list[dict]:
    """Print the modelled time per op by number of GPUs; save the figure to ``out``."""
    machines = [1, 2, 4, 8, 16, 32, 64]
    rows = H.scaling_table(gpus_per_machine, machines, mib * 2**20)
    print(f"modelled ms per op, {mib:g} MiB per GPU, {gpus_per_machine} GPUs per machine")
    print(f"{'GPUs':>6} " + " ".join(f"{k:>13}" for k in COLUMNS))
    for row in rows:
        print(f"{row['gpus']:>6} " + " ".join(f"{1e3 * row[k]:>13.3f}" for k in COLUMNS))
    largest = rows[-1]
    cheapest = min(COLUMNS, key=lambda k: largest[k])
    dearest = max(COLUMNS, key=lambda k: largest[k])
    print(
        f"at {largest['gpus']} GPUs the cheapest op is {cheapest} "
        f"({1e3 * largest[cheapest]:.3f} ms), the dearest {dearest} "
        f"({1e3 * largest[dearest]:.3f} ms)"
    )
    if out:
        import matplotlib

        matplotlib.use("Agg")  # files only: works without a display
        ax = H.plot_allreduce_scaling(gpus_per_machine, machines, mib * 2**20)
        ax.figure.tight_layout()
        ax.figure.savefig(out, dpi=120)
        print(f"saved {out}")
    return rows


def simulated_run(dim: int, iters: int = 30) -> dict[str, list[float]]:
    """Run DGD on least squares, 16 agents as 2 machines of 8, with the cost model attached."""
    out, final = {}, {}
    for mode in ("neighbor_allreduce", "hierarchical_neighbor_allreduce"):
        fs.init(backend="sim", size=16, local_size=8, seed=0, shards=1)  # all in this process
        meter = H.attach_cost_model(H.Network.cluster(8, 2))
        rng = np.random.default_rng(0)
        A, b = rng.standard_normal((16, 20, dim)) / np.sqrt(dim), rng.standard_normal((16, 20))
        x = np.zeros((16, dim))
        mix = getattr(fs, mode)
        errors = []
        for _ in range(iters):
            residual = np.einsum("aij,aj->ai", A, x) - b
            x = mix(x - 0.1 * np.einsum("aij,ai->aj", A, residual))
            meter.mark()
            errors.append(float(np.sqrt(((x - x.mean(0)) ** 2).sum(1).mean())))
        print(
            f"\n{mode}: modelled communication per iteration "
            f"{1e6 * meter.iterations[-1]:.1f} us, total {1e3 * meter.total:.3f} ms"
        )
        print(f"{'iter':>5}  {'consensus error':>15}  {'communication (us)':>18}")
        for t in (0, iters // 2, iters - 1):  # row k: after k iterations
            print(f"{t + 1:5d}  {errors[t]:15.3e}  {1e6 * meter.iterations[t]:18.1f}")
        out[mode] = meter.iterations
        final[mode] = (1e6 * meter.iterations[-1], errors[-1])
        fs.shutdown()
    print(verdict(*final["neighbor_allreduce"], *final["hierarchical_neighbor_allreduce"]))
    return out


def verdict(flat_us: float, flat_error: float, hier_us: float, hier_error: float) -> str:
    """Return the last line: the two neighbor allreduces' cost and consensus error compared."""
    ratio = hier_us / flat_us
    cost = f"{ratio:.3g} times" if ratio >= 1 else f"{1 / ratio:.3g} times less than"
    closer = "closer together than" if hier_error < flat_error else "no closer together than"
    return (
        f"per iteration the hierarchical neighbor allreduce is modelled at {hier_us:.1f} us, "
        f"{cost} the flat one's {flat_us:.1f} us, and keeps the agents {closer} the flat one "
        f"(consensus error {hier_error:.1e} against {flat_error:.1e})"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--gpus-per-machine", type=int, default=8, help="default %(default)s")
    p.add_argument("--mib", type=float, default=64.0, help="message size per GPU (MiB)")
    p.add_argument("--dim", type=int, default=2000, help="model size of the simulated run")
    p.add_argument("--out", default="cost_model.png", help="figure file ('' for none)")
    args = p.parse_args(argv)
    scaling(args.gpus_per_machine, args.mib, args.out or None)
    simulated_run(args.dim)


if __name__ == "__main__":
    from _common import simulation_only  # the examples' folder: this script's own

    if simulation_only(__file__):
        main()
