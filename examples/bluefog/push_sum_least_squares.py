"""Decentralized least squares with push-sum over one-sided windows, as a BlueFog program.

Rank i holds (A_i, b_i) and the problem is min_x sum_i ||A_i x - b_i||^2 / 2. Each
iteration takes a local gradient step on its part of the state, then pushes shares of it
to its out-neighbours with ``bf.win_accumulate`` and collects what it received with
``bf.win_update_then_collect`` (push-sum: the extended vector [x, p] is mixed by a
column-stochastic matrix, and x / p is the estimate). The step size decays, so every rank's
estimate approaches the exact minimizer, which rank 0 computes from all the data
(``bf.allgather``) to report the error. Run it unchanged with

    fogrun --bluefog -np 4 python examples/bluefog/push_sum_least_squares.py

Rank 0 prints a header naming the columns, then ``iteration  error`` every 100 iterations
and after the last (the worst rank's relative error ||x_i - x*|| / ||x*||), the final
relative errors (its own, the worst rank's) and, last, ``converged: True`` when the worst
rank's relative error is below ``--tol`` (``False`` otherwise), with what that means.
"""

import argparse
import sys

import bluefog.torch as bf
import torch
from bluefog.common import topology_util

parser = argparse.ArgumentParser(description="push-sum least squares on BlueFog's windows")
parser.add_argument("--rows", type=int, default=20, help="rows of A_i per rank")
parser.add_argument("--dim", type=int, default=5)
parser.add_argument("--max-iters", type=int, default=400)
parser.add_argument("--lr", type=float, default=0.02)
parser.add_argument("--tol", type=float, default=0.05)
args = parser.parse_args()

bf.init()
bf.set_topology(topology_util.ExponentialGraph(bf.size()))
torch.manual_seed(2021 + bf.rank())
A = torch.randn(args.rows, args.dim, dtype=torch.double)
b = torch.randn(args.rows, dtype=torch.double)

# The exact minimizer, for the report: from everyone's data.
A_all = bf.allgather(A, name="A")
b_all = bf.allgather(b, name="b")
x_star = torch.linalg.lstsq(A_all, b_all.unsqueeze(1)).solution.squeeze(1)

outs = bf.out_neighbor_ranks()
share = 1.0 / (len(outs) + 1)
z = torch.zeros(args.dim + 1, dtype=torch.double)  # [x * p, p]
z[-1] = 1.0
bf.win_create(z, name="z", zero_init=True)


def worst_error() -> float:
    """Return the largest relative error ||x_i - x*|| / ||x*|| over the ranks."""
    error = (torch.norm(z[:-1] / z[-1] - x_star) / torch.norm(x_star)).item()
    return bf.allgather(torch.tensor([error]), name="errors").max().item()


if bf.rank() == 0:
    sys.stdout.write(" iter  ||x_i - x*|| / ||x*|| (the worst rank's relative error)\n")
for it in range(args.max_iters):
    x = z[:-1] / z[-1]
    grad = A.t() @ (A @ x - b)
    z[:-1] -= args.lr / (1 + it) ** 0.5 * grad
    bf.win_accumulate(
        z, name="z", self_weight=share, dst_weights={r: share for r in outs}, require_mutex=True
    )
    # In step: every push of this iteration has landed before anyone collects. Without the
    # barriers the ranks drift apart, and a rank far ahead keeps pushing its weight p away
    # faster than its slower neighbours send any back (asynchronous push-sum needs
    # bounded delays); with them every launch mode gives the same numbers.
    bf.barrier()
    bf.win_update_then_collect(name="z")
    bf.barrier()
    if (it + 1) % 100 == 0 or it + 1 == args.max_iters:
        worst = worst_error()
        if bf.rank() == 0:
            sys.stdout.write(f"{it + 1:5d}  {worst:.3e}\n")

x = z[:-1] / z[-1]
error = (torch.norm(x - x_star) / torch.norm(x_star)).item()
worst = bf.allgather(torch.tensor([error]), name="errors").max().item()
if bf.rank() == 0:
    sys.stdout.write(f"relative error: rank 0 {error:.3e}, worst rank {worst:.3e}\n")
    converged = worst < args.tol
    meaning = (
        "every rank's estimate is near the least-squares solution x*"
        if converged
        else "some rank's estimate is still far from the least-squares solution x*"
    )
    sys.stdout.write(
        f"converged: {converged}: the worst rank's relative error {worst:.1e} is "
        f"{'below' if converged else 'not below'} --tol {args.tol:g}: {meaning}\n"
    )
bf.win_free()
bf.shutdown()
