"""Average consensus written as a BlueFog program: nothing of fogsim in it.

Every rank holds a random vector; repeated ``bf.neighbor_allreduce`` drives all of them to
the global average, which ``bf.allreduce`` computes directly for comparison. Run it on
fogsim, unchanged, with

    fogrun --bluefog -np 4 python examples/bluefog/average_consensus.py
    fogrun --bluefog --spmd -np 8 python examples/bluefog/average_consensus.py --topology ring

Rank 0 prints a header naming the columns, then ``iteration  mse`` every 10 iterations (the
mean squared distance of the ranks' vectors to the average after that many iterations) and,
last, ``converged: True`` when it fell below ``--tol`` (``False`` otherwise), with what that
means. ``--dynamic`` uses BlueFog's one-peer exponential-2 schedule (one in- and one
out-neighbour per iteration, ``dst_weights`` and ``src_weights`` given per call).
"""

import argparse
import sys

import bluefog.torch as bf
import torch
from bluefog.common import topology_util

parser = argparse.ArgumentParser(description="average consensus on BlueFog's API")
parser.add_argument("--data-size", type=int, default=100)
parser.add_argument("--max-iters", type=int, default=60)
parser.add_argument("--topology", choices=["expo2", "ring", "mesh", "star"], default="expo2")
parser.add_argument("--dynamic", action="store_true", help="one-peer dynamic topology")
parser.add_argument("--tol", type=float, default=1e-6)
args = parser.parse_args()

bf.init()
builders = {
    "expo2": topology_util.ExponentialTwoGraph,
    "ring": topology_util.RingGraph,
    "mesh": topology_util.MeshGrid2DGraph,
    "star": topology_util.StarGraph,
}
bf.set_topology(builders[args.topology](bf.size()))

torch.manual_seed(12345 + bf.rank())
x = torch.randn(args.data_size, dtype=torch.double)
x_bar = bf.allreduce(x, average=True, name="x_bar")
peers = topology_util.GetDynamicOnePeerSendRecvRanks(bf.load_topology(), bf.rank())

mse = []
if bf.rank() == 0:
    sys.stdout.write(" iter  mse (mean squared distance of the ranks' vectors to the average)\n")
for it in range(args.max_iters):
    if args.dynamic:
        send_ranks, recv_ranks = next(peers)
        x = bf.neighbor_allreduce(
            x,
            self_weight=0.5,
            src_weights={r: 0.5 / len(recv_ranks) for r in recv_ranks},
            dst_weights={r: 1.0 for r in send_ranks},
            name="x",
        )
    else:
        x = bf.neighbor_allreduce(x, name="x")
    mse.append(bf.allreduce(torch.mean((x - x_bar) ** 2), average=True, name="mse").item())
    if bf.rank() == 0 and (it % 10 == 0 or it == args.max_iters - 1):
        sys.stdout.write(f"{it + 1:5d}  {mse[-1]:.3e}\n")

if bf.rank() == 0:
    converged = mse[-1] < args.tol
    meaning = (
        "every rank holds the global average"
        if converged
        else "the ranks do not hold the global average yet"
    )
    sys.stdout.write(
        f"converged: {converged}: after {args.max_iters} iterations the mse is {mse[-1]:.1e}, "
        f"{'below' if converged else 'not below'} --tol {args.tol:g}: {meaning}\n"
    )
bf.barrier()
bf.shutdown()
