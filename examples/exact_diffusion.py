"""Exact diffusion on least squares: the agents reach the exact optimum, where DGD stays biased.

Agent i holds (A_i, b_i) and f_i(x) = 1/2 ||A_i x - b_i||^2; together the agents minimize
sum_i f_i. Exact diffusion (Yuan, Ying, Zhao and Sayed) corrects DGD's adapt step with the
previous one and combines with Wbar = (I + W) / 2:

    psi_i = x_i - alpha * grad f_i(x_i)            (adapt)
    phi_i = psi_i + x_i - psi_i(previous)          (correct)
    x_i   = sum_j Wbar_ij phi_j                    (neighbor_allreduce)

    python examples/exact_diffusion.py                          # 16 simulated agents, ring
    python examples/exact_diffusion.py --iters 2000 --progress --plot ed.png
    fogrun -np 4 python examples/exact_diffusion.py             # one MPI process per agent

Prints a header naming the columns, then ``iteration  mean_i ||x_i - x*||^2`` every 10
iterations (row 0: the start, x_i = 0) and after the last; it falls to round-off. The last
line says how far it fell and where DGD with the same step size (run too, unless
``--no-dgd``) stopped. The theory asks for a symmetric doubly stochastic W (ring, mesh,
torus, full here).
"""

from __future__ import annotations

from _common import DISTANCE, distance_outcome, finish, parser, report_curve, schedule, setup

from fogsim import algorithms as A


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=8, help="data rows per agent")
    p.add_argument("--dim", type=int, default=4, help="number of unknowns")
    p.add_argument("--alpha", type=float, default=0.02, help="step size (default %(default)s)")
    p.add_argument("--no-dgd", action="store_true", help="skip DGD's comparison run")
    p.set_defaults(iters=300, topology="ring")
    args = p.parse_args(argv)
    steps = setup(args)

    problem = A.LeastSquares.random(args.rows, args.dim, seed=args.seed)
    result = A.exact_diffusion(
        problem, args.alpha, args.iters, schedule=steps, progress=args.progress
    )
    curve = (result.history["distance"] ** 2).tolist()
    report_curve(curve, DISTANCE, every=10)
    verdict = distance_outcome(curve, args.iters)
    others = {}
    if not args.no_dgd:
        dgd = A.dgd(
            problem, args.alpha, args.iters, schedule=schedule(args), progress=args.progress
        )
        others["DGD"] = (dgd.history["distance"] ** 2).tolist()
        verdict += f"; DGD with the same step size ends at {others['DGD'][-1]:.2e}"
    finish(
        args,
        result.x,
        curve,
        "mean ||x_i - x*||^2",
        verdict,
        label="exact diffusion",
        others=others,
    )
    return curve


if __name__ == "__main__":
    main()
