"""Decentralized gradient descent (adapt-then-combine) on least squares with per-agent data.

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. Each iteration is the BlueFog paper's Listing 1:

    y_i = x_i - alpha * grad f_i(x_i)          (local update)
    x_i = sum_j W_ij y_j                       (neighbor_allreduce)

    python examples/dgd.py                                 # 16 simulated agents
    fogrun -np 4 python examples/dgd.py --topology ring    # one MPI process per agent
    python examples/dgd.py --form awc --alpha 0.005 --iters 2000 --progress

Each line printed is ``iteration  mean_i ||x_i - x*||^2``; with a constant step size DGD
stops in a neighborhood of the optimum x* whose size shrinks with alpha (compare
examples/exact_diffusion.py and examples/gradient_tracking.py, which reach x*). The loop is
``fogsim.algorithms.dgd``; ``--form awc`` runs x <- W x - alpha grad f(x) instead.
"""

from __future__ import annotations

from _common import finish, parser, report_curve, setup

from fogsim import algorithms as A


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.01, help="step size")
    p.add_argument("--form", choices=["atc", "awc"], default="atc")
    p.set_defaults(iters=200)
    args = p.parse_args(argv)
    schedule = setup(args)

    problem = A.LeastSquares.random(args.rows, args.dim, seed=args.seed)
    result = A.dgd(
        problem, args.alpha, args.iters, form=args.form, schedule=schedule, progress=args.progress
    )
    curve = (result.history["distance"] ** 2).tolist()
    report_curve(curve, every=10)
    finish(args, result.x, curve, "mean ||x_i - x*||^2")
    return curve


if __name__ == "__main__":
    main()
