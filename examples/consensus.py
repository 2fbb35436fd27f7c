"""Average consensus: every agent starts with its own vector and repeatedly averages
with its neighbors until all agents hold the global average.

    python examples/consensus.py                      # 16 simulated agents
    python examples/consensus.py --topology ring --iters 200 --plot err.png
    fogrun -np 4 python examples/consensus.py         # one MPI process per agent

Prints a header naming the columns, then one row ``iteration  consensus error`` per
iteration (row 0: the start), the error being sqrt(mean_i ||x_i - xbar||^2) with xbar the
average of the initial vectors, which neighbor averaging preserves (W is doubly stochastic
for the topologies offered here); then a last line saying how far the error fell and
whether the agents now hold the average. The loop is ``fogsim.algorithms.consensus``:
x <- W x, one neighbor_allreduce per iteration.
"""

from __future__ import annotations

import numpy as np
from _common import finish, outcome, parser, report_curve, setup

import fogsim as fs
from fogsim import algorithms as A


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__)
    p.add_argument("--dim", type=int, default=4, help="length of each agent's vector")
    args = p.parse_args(argv)
    schedule = setup(args)

    data = np.random.default_rng(args.seed).standard_normal((fs.size(), args.dim))
    x0 = fs.local(lambda r: data[r])  # agent r's own vector
    result = A.consensus(x0, args.iters, schedule=schedule, progress=args.progress)
    errors = result.history["distance"].tolist()  # to the initial average
    report_curve(errors, "consensus error (RMS distance of the agents' vectors to their average)")
    verdict = outcome(
        errors,
        "consensus error",
        args.iters,
        reached="every agent holds the average of the initial vectors, "
        + (f"to within {errors[-1]:.1e} (RMS)" if errors[-1] else "exactly"),
        goal=1e-6,
        floor="the agents stopped approaching the average before agreeing on it",
    )
    finish(args, result.x, errors, "consensus error", verdict)
    return errors


if __name__ == "__main__":
    main()
