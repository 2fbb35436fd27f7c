"""Average consensus: every agent starts with its own vector and repeatedly averages
with its neighbors until all agents hold the global average.

    python examples/consensus.py                      # 16 simulated agents
    python examples/consensus.py --topology ring --iters 200 --plot err.png
    fogrun -np 4 python examples/consensus.py         # one MPI process per agent

Each line printed is ``iteration  consensus error``, the error being
sqrt(mean_i ||x_i - xbar||^2) with xbar the true average, which neighbor averaging
preserves (W is doubly stochastic for the topologies offered here).
"""

from __future__ import annotations

import numpy as np
from _common import finish, parser, report, setup

import fogsim as fs


def consensus_error(x, xbar) -> float:
    """Return sqrt(mean_i ||x_i - xbar||^2), the same number on every agent."""
    sq = fs.vmap(lambda v, m: float(np.sum((v - m) ** 2)))(x, xbar)
    return float(np.sqrt(np.ravel(fs.allreduce(sq))[0]))


def main(argv: list[str] | None = None) -> list[float]:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--dim", type=int, default=4, help="length of each agent's vector")
    args = p.parse_args(argv)
    step_weights = setup(args)

    data = np.random.default_rng(args.seed).standard_normal((fs.size(), args.dim))
    x = fs.local(lambda r: data[r])  # agent r's own vector
    xbar = fs.allreduce(x)

    errors = [consensus_error(x, xbar)]
    report(0, errors[0])
    for k in range(1, args.iters + 1):
        x = fs.neighbor_allreduce(x, src_weights=step_weights())
        errors.append(consensus_error(x, xbar))
        report(k, errors[-1])
    finish(args, x, errors, "consensus error")
    return errors


if __name__ == "__main__":
    main()
