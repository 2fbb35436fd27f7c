"""Gradient tracking on least squares: exact convergence, also over time-varying graphs.

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. Besides its iterate x_i each agent keeps y_i, its estimate of the network's
average gradient (y_i = grad f_i(x_i) at the start), and moves along it (ATC form):

    x_i <- sum_j W_ij (x_j - alpha * y_j)                         (neighbor_allreduce)
    y_i <- sum_j W_ij (y_j + grad f_j(x_j new) - grad f_j(x_j))   (neighbor_allreduce)

    python examples/gradient_tracking.py                          # 16 simulated agents
    python examples/gradient_tracking.py --topology one-peer-exp2 --plot gt.png
    fogrun -np 4 python examples/gradient_tracking.py             # one MPI process per agent

Prints a header naming the columns, then ``iteration  mean_i ||x_i - x*||^2`` every 10
iterations (row 0: the start, x_i = 0) and after the last; it falls to round-off on static
and on dynamic (one-peer) topologies alike. Pass ``--grad-norm`` to print
``||(1/n) sum_i grad f_i(xbar)||`` instead. The last line says how far it fell and what
that means.
"""

from __future__ import annotations

from _common import DISTANCE, digits, distance_outcome, finish, outcome, parser, report_curve, setup

from fogsim import algorithms as A


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.02, help="step size (default %(default)s)")
    p.add_argument("--grad-norm", action="store_true", help="print the gradient norm instead")
    p.set_defaults(iters=300)
    args = p.parse_args(argv)
    schedule = setup(args)

    problem = A.LeastSquares.random(args.rows, args.dim, seed=args.seed)
    result = A.gradient_tracking(
        problem, args.alpha, args.iters, schedule=schedule, progress=args.progress
    )
    if args.grad_norm:
        curve, ylabel = result.history["grad_norm"].tolist(), "||mean_i grad f_i(xbar)||"
        column = f"{ylabel} (gradient norm at the agents' average)"
        relative = curve[-1] / curve[0] if curve[0] else 0.0
        verdict = outcome(
            curve,
            "gradient norm at the average",
            args.iters,
            reached=f"the agents' average is the optimum x*, {digits(relative)} of the gradient",
            goal=1e-8,
        )
    else:
        curve, ylabel = (result.history["distance"] ** 2).tolist(), "mean ||x_i - x*||^2"
        column, verdict = DISTANCE, distance_outcome(curve, args.iters)
    report_curve(curve, column, every=10)
    finish(args, result.x, curve, ylabel, verdict)
    return curve


if __name__ == "__main__":
    main()
