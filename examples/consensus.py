"""Average consensus: every agent starts with its own vector and repeatedly averages
with its neighbors until all agents hold the global average.

    python examples/consensus.py                      # 16 simulated agents
    python examples/consensus.py --size 64 --topology ring --iters 200 --plot err.png

Each line printed is ``iteration  consensus error``, the error being
sqrt(mean_i ||x_i - xbar||^2) with xbar the true average, which neighbor averaging
preserves (W is doubly stochastic for the topologies offered here).
"""

from __future__ import annotations

import argparse

import numpy as np

import fogsim as fs
from fogsim import topology as T

TOPOLOGIES = {
    "exp2": T.exponential_two_graph,
    "ring": T.ring_graph,
    "mesh": T.mesh_grid_2d_graph,
    "torus": T.torus_2d_graph,
    "full": T.fully_connected_graph,
}


def consensus_error(x, xbar) -> float:
    """Return sqrt(mean_i ||x_i - xbar||^2), the same number on every agent."""
    sq = ((x - xbar) ** 2).reshape(np.shape(x)[0] if np.ndim(x) > 1 else 1, -1).sum(axis=-1)
    return float(np.sqrt(np.ravel(fs.allreduce(sq))[0]))


def main(argv: list[str] | None = None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=16, help="number of simulated agents")
    parser.add_argument("--topology", choices=[*TOPOLOGIES, "one-peer-exp2"], default="exp2")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--dim", type=int, default=4, help="length of each agent's vector")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", metavar="PNG", help="save the error curve to this file")
    args = parser.parse_args(argv)

    fs.init(size=args.size, seed=args.seed)
    dynamic = args.topology == "one-peer-exp2"
    if not dynamic:
        fs.set_topology(TOPOLOGIES[args.topology](fs.size()), is_weighted=True)
    schedule = T.one_peer_exponential_two(fs.size())

    rng = np.random.default_rng(args.seed)
    data = rng.standard_normal((fs.size(), args.dim))
    x = fs.local(lambda r: data[r])  # agent r's own vector
    xbar = fs.allreduce(x)

    errors = [consensus_error(x, xbar)]
    print(f"{0:5d}  {errors[0]:.3e}")
    for k in range(1, args.iters + 1):
        if dynamic:
            x = fs.neighbor_allreduce(x, src_weights=next(schedule).weights)
        else:
            x = fs.neighbor_allreduce(x)
        errors.append(consensus_error(x, xbar))
        print(f"{k:5d}  {errors[-1]:.3e}")

    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.semilogy(errors, marker=".")
        ax.set(
            xlabel="iteration",
            ylabel="consensus error",
            title=f"{args.topology}, {fs.size()} agents",
        )
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"saved {args.plot}")
    fs.shutdown()
    return errors


if __name__ == "__main__":
    main()
