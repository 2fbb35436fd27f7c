"""Push-DIGing on least squares over time-varying directed graphs (column-stochastic weights).

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. On a directed graph an agent knows whom it sends to, not who sends to it, so it
splits what it sends into equal shares (columns of C_k sum to 1, rows need not) and
divides out the weight v_i it accumulated, as push-sum does (Nedic, Olshevsky and Shi):

    u_i <- sum_j C_ij (u_j - alpha * y_j),   v_i <- sum_j C_ij v_j,   x_i = u_i / v_i
    y_i <- sum_j C_ij y_j + grad f_i(x_i new) - grad f_i(x_i)

(u, v and y travel in one neighbor_allreduce per iteration.)

    python examples/push_diging.py                          # 16 agents, random digraphs
    python examples/push_diging.py --topology one-peer-exp2 --plot pd.png
    fogrun -np 4 python examples/push_diging.py             # one MPI process per agent

``--topology random-push`` (the default): at every step each agent pushes to the next agent
on a directed ring and to one more agent drawn at random (the same draw on every process,
from ``--seed``), keeping one share for itself; the static topologies push along their
edges. Prints a header naming the columns, then ``iteration  mean_i ||x_i - x*||^2`` every
10 iterations (row 0: the start, x_i = 0) and after the last, which falls to round-off;
then a last line saying how far it fell and what that means.
"""

from __future__ import annotations

import numpy as np
from _common import DISTANCE, distance_outcome, finish, parser, report_curve, setup

import fogsim as fs
from fogsim import algorithms as A


def random_push(n: int, seed: int):
    """Yield column-stochastic steps: a directed ring plus one random out-edge per agent."""
    rng = np.random.default_rng(seed)
    agents = np.arange(n)
    while True:
        extra = (agents + 1 + rng.integers(0, max(n - 1, 1), n)) % n  # never the agent itself
        senders = np.concatenate([agents, agents])
        receivers = np.concatenate([(agents + 1) % n, extra])
        pattern = np.zeros((n, n))
        pattern[receivers, senders] = 1.0  # W[i, j]: j sends to i
        np.fill_diagonal(pattern, 0.0)
        yield A.push_weights(pattern)


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__, extra_topologies=("random-push",))
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.02, help="step size (default %(default)s)")
    p.set_defaults(iters=300, topology="random-push")
    args = p.parse_args(argv)
    schedule = setup(args)
    if args.topology == "random-push":
        schedule = random_push(fs.size(), args.seed)

    problem = A.LeastSquares.random(args.rows, args.dim, seed=args.seed)
    result = A.push_diging(problem, args.alpha, args.iters, schedule, progress=args.progress)
    curve = (result.history["distance"] ** 2).tolist()
    report_curve(curve, DISTANCE, every=10)
    finish(args, result.x, curve, "mean ||x_i - x*||^2", distance_outcome(curve, args.iters))
    return curve


if __name__ == "__main__":
    main()
