"""Gradient tracking on least squares: exact convergence, also over time-varying graphs.

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. Besides its iterate x_i each agent keeps y_i, its estimate of the network's
average gradient (y_i = grad f_i(x_i) at the start), and moves along it (ATC form):

    x_i <- sum_j W_ij (x_j - alpha * y_j)                         (neighbor_allreduce)
    y_i <- sum_j W_ij (y_j + grad f_j(x_j new) - grad f_j(x_j))   (neighbor_allreduce)

    python examples/gradient_tracking.py                          # 16 simulated agents
    python examples/gradient_tracking.py --topology one-peer-exp2 --plot gt.png
    fogrun -np 4 python examples/gradient_tracking.py             # one MPI process per agent

Each line printed is ``iteration  mean_i ||x_i - x*||^2``; it falls to round-off on static
and on dynamic (one-peer) topologies alike. Pass ``--grad-norm`` to print
``||(1/n) sum_i grad f_i(xbar)||`` instead.
"""

from __future__ import annotations

from _common import finish, parser, report_curve, setup

from fogsim import algorithms as A


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.02, help="step size")
    p.add_argument("--grad-norm", action="store_true", help="print the gradient norm")
    p.set_defaults(iters=300)
    args = p.parse_args(argv)
    schedule = setup(args)

    problem = A.LeastSquares.random(args.rows, args.dim, seed=args.seed)
    result = A.gradient_tracking(
        problem, args.alpha, args.iters, schedule=schedule, progress=args.progress
    )
    if args.grad_norm:
        curve, ylabel = result.history["grad_norm"].tolist(), "||mean_i grad f_i(xbar)||"
    else:
        curve, ylabel = (result.history["distance"] ** 2).tolist(), "mean ||x_i - x*||^2"
    report_curve(curve, every=10)
    finish(args, result.x, curve, ylabel)
    return curve


if __name__ == "__main__":
    main()
