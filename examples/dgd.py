"""Decentralized gradient descent (adapt-then-combine) on least squares with per-agent data.

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. Each iteration is the BlueFog paper's Listing 1:

    y_i = x_i - alpha * grad f_i(x_i)          (local update)
    x_i = sum_j W_ij y_j                       (neighbor_allreduce)

    python examples/dgd.py                                 # 16 simulated agents
    fogrun -np 4 python examples/dgd.py --topology ring    # one MPI process per agent

Each line printed is ``iteration  mean_i ||x_i - x*||^2``; with a constant step size DGD
stops in a neighborhood of the optimum x* whose size shrinks with alpha.
"""

from __future__ import annotations

import numpy as np
from _common import finish, parser, report, setup

import fogsim as fs


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.01, help="step size")
    p.set_defaults(iters=200)
    args = p.parse_args(argv)
    step_weights = setup(args)

    n, rng = fs.size(), np.random.default_rng(args.seed)
    A_all = rng.standard_normal((n, args.rows, args.dim))
    b_all = A_all @ rng.standard_normal(args.dim) + 0.1 * rng.standard_normal((n, args.rows))
    x_star = np.linalg.lstsq(A_all.reshape(-1, args.dim), b_all.reshape(-1), rcond=None)[0]
    A, b = fs.local(lambda r: A_all[r]), fs.local(lambda r: b_all[r])

    def grad(x):  # batch-friendly: the same line works stacked and per agent
        return np.einsum("...ji,...j->...i", A, np.einsum("...ij,...j->...i", A, x) - b)

    def distance(x) -> float:
        sq = fs.vmap(lambda v: float(np.sum((v - x_star) ** 2)))(x)
        return float(np.ravel(fs.allreduce(sq))[0])

    x = fs.local(lambda r: np.zeros(args.dim))
    curve = [distance(x)]
    report(0, curve[0])
    for k in range(1, args.iters + 1):
        y = x - args.alpha * grad(x)
        x = fs.neighbor_allreduce(y, src_weights=step_weights())
        curve.append(distance(x))
        if k % 10 == 0 or k == args.iters:
            report(k, curve[-1])
    finish(args, x, curve, "mean ||x_i - x*||^2")
    return curve


if __name__ == "__main__":
    main()
