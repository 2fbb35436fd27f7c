"""A failure stops a parameter server; decentralized gradient descent carries on.

    python examples/fault_tolerance.py                     # 16 simulated agents
    python examples/fault_tolerance.py --fail-at 100 --link-drop 0.2 --plot faults.png

Least squares with data split over the agents. Two ways to train:

* **parameter server**: agent 0 holds the model; each step every agent sends its gradient
  to it and gets the new model back. Agent 0 fails at ``--fail-at``: nothing is updated
  from then on.
* **decentralized** (DGD on the symmetric exponential graph): each agent takes a gradient
  step and averages with its neighbors (``fs.neighbor_allreduce``). The same agent 0 fails
  at the same step (``fogsim.faults``: it stops sending; its neighbors keep the weight
  they gave it), and messages are lost with probability ``--link-drop``.

Prints a title and a header naming the columns, then rows ``step  parameter server
decentralized``: the distance of each one's model (the server's; the live agents' average)
to the optimum of the agents that are still up, every 50 steps and around the failure;
then a last line comparing where the two ended.
"""

from __future__ import annotations

import argparse

import numpy as np

import fogsim as fs
from fogsim import faults
from fogsim import topology as T


def problem(n: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, 10, dim))
    b = rng.standard_normal((n, 10)) + rng.standard_normal(dim) @ A.transpose(0, 2, 1)
    b[0] += 2.0  # agent 0's data differ: the live agents' optimum is not everyone's
    return A, b


def optimum(A, b, agents) -> np.ndarray:
    dim = A.shape[2]
    return np.linalg.lstsq(A[agents].reshape(-1, dim), b[agents].reshape(-1), rcond=None)[0]


def gradients(A, b, x) -> np.ndarray:
    """Every agent's gradient of 0.5 ||A_i x_i - b_i||^2, stacked."""
    return np.einsum("aji,aj->ai", A, np.einsum("aij,aj->ai", A, x) - b)


def run(n=16, dim=5, steps=400, fail_at=40, link_drop=0.1, lr=0.01, seed=0):
    A, b = problem(n, dim, seed)
    live = list(range(1, n))
    target = optimum(A, b, live)
    curves = {"parameter server": [], "decentralized": []}

    # parameter server on agent 0
    x = np.zeros(dim)
    for t in range(steps):
        if t < fail_at:  # afterwards: no server, no update
            x = x - lr * gradients(A, b, np.tile(x, (n, 1))).mean(axis=0)
        curves["parameter server"].append(float(np.linalg.norm(x - target)))

    # decentralized gradient descent, same failure, lossy links
    fs.init(backend="sim", size=n, seed=seed, topology=T.symmetric_exponential_graph, shards=1)
    faults.inject(fail={0: fail_at}, link_drop=link_drop, seed=seed)
    xs = np.zeros((n, dim))
    for t in range(steps):
        xs = fs.neighbor_allreduce(xs - lr / (1 + t / 200) * gradients(A, b, xs))
        model = xs[live].mean(axis=0) if t >= fail_at else xs.mean(axis=0)
        curves["decentralized"].append(float(np.linalg.norm(model - target)))
    fs.shutdown()
    return curves


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size", type=int, default=16, help="simulated agents (default %(default)s)")
    p.add_argument("--steps", type=int, default=400, help="default %(default)s")
    p.add_argument("--fail-at", type=int, default=40, help="step at which agent 0 fails")
    p.add_argument("--link-drop", type=float, default=0.1, help="probability a message is lost")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and of the lost messages")
    p.add_argument("--plot", help="save the two curves to this image file")
    args = p.parse_args(argv)
    curves = run(
        args.size, steps=args.steps, fail_at=args.fail_at, link_drop=args.link_drop, seed=args.seed
    )
    print("distance to the optimum of the agents still up")
    print(f"{'step':>6} {'parameter server':>18} {'decentralized':>15}")
    for t in sorted(
        {0, args.fail_at - 1, args.fail_at, *range(0, args.steps, 50), args.steps - 1}
        & set(range(args.steps))
    ):
        print(f"{t:>6} {curves['parameter server'][t]:>18.4e} {curves['decentralized'][t]:>15.4e}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, values in curves.items():
            ax.semilogy(values, label=name)
        ax.axvline(args.fail_at, color="gray", linestyle=":", label="agent 0 fails")
        ax.set_xlabel("step")
        ax.set_ylabel("distance to the live agents' optimum")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"saved {args.plot}")
    print(verdict(curves, args.fail_at, args.steps, args.link_drop))
    return curves


def verdict(curves: dict[str, list[float]], fail_at: int, steps: int, link_drop: float) -> str:
    """Return the last line: where the two ended, and what that means."""
    server, dec = curves["parameter server"][-1], curves["decentralized"][-1]
    lossy = f" ({link_drop:.0%} of its messages lost)" if link_drop else ""
    if fail_at >= steps:
        return (
            f"agent 0 did not fail within the {steps} steps (--fail-at {fail_at}): the parameter "
            f"server ended {server:.2e} from the other agents' optimum, decentralized gradient "
            f"descent{lossy} {dec:.2e}"
        )
    if dec < server:
        return (
            f"after agent 0 failed at step {fail_at} the parameter server stayed {server:.2e} "
            f"from the live agents' optimum, while decentralized gradient descent{lossy} carried "
            f"on to {dec:.2e}, {server / dec:.3g} times closer"
        )
    return (
        f"after agent 0 failed at step {fail_at} the parameter server stayed {server:.2e} from "
        f"the live agents' optimum, and decentralized gradient descent{lossy} got no closer "
        f"({dec:.2e})"
    )


if __name__ == "__main__":
    from _common import simulation_only  # the examples' folder: this script's own

    if simulation_only(__file__):
        main()
