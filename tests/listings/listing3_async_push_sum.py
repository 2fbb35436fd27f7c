# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 3: asynchronous push-sum average consensus with window ops.

Every agent pushes ``x_ext = [x, p]`` scaled by ``1/(outdegree+1)`` into its
out-neighbors' windows (``win_accumulate``, scaling its own ``x_ext`` in place) and adds
what it received (``win_update_then_collect``, in place). Mass is conserved: the sum of
``x_ext`` over the agents stays the initial one (the sum of p stays ``size``), and
``x / p`` converges to the average of the initial ``x``, which the checks measure.

Under MPI the agents run asynchronously (no agent waits for another until the final
barrier); in SPMD mode every window op is a rendezvous, so they run in lock step.
"""

import argparse

import torch
from _harness import report

import fogsim.compat.bluefog as bf

parser = argparse.ArgumentParser()
parser.add_argument("--max-iters", type=int, default=200)
parser.add_argument("--out")
args = parser.parse_args()

bf.init()  # the listing starts with x and an initialized BlueFog (exponential-2 graph)
gen = torch.Generator().manual_seed(2021 + bf.rank())
x = torch.randn(6, dtype=torch.double, generator=gen)
x0 = x.clone()

# --- listing 3 as printed ---
p = torch.DoubleTensor([1.0]).to(x.device) # associated p for correction
x_ext = torch.cat([x, p], 0)
bf.win_create(x_ext, name="x_ext", zero_init=True)

# Set up the weights through the push-style.
outdegree = len(bf.out_neighbor_ranks())
dst_weights = {rank: 1.0 / (outdegree + 1) for rank in bf.out_neighbor_ranks()}
self_weight = 1/(1+outdegree)

for i in range(args.max_iters):
    bf.win_accumulate(x_ext, name="x_ext", self_weight=self_weight,
                      dst_weights=dst_weights, require_mutex=True)
    bf.win_update_then_collect(name="x_ext")
    x, associated_p = x_ext[:-1], x_ext[-1]

bf.barrier() # Because different processes may end in different time.
bf.win_update_then_collect(name="x_ext")
bf.win_free(name="x_ext")
# --- end of listing ---

# The listing reads x and p from x_ext inside the loop; the final collect changed x_ext
# again, so read them once more.
x, associated_p = x_ext[:-1], x_ext[-1]
total = bf.allreduce(x_ext, average=False)
mass_err = float((total[:-1] - bf.allreduce(x0, average=False)).abs().max()
                 + (total[-1] - bf.size()).abs())
average = bf.allreduce(x0)
if mass_err > 1e-12:
    raise AssertionError(f"push-sum lost mass: {mass_err:.3e}")
report(x / associated_p, f"mass_err={mass_err:.1e} push_sum_err",
       float((x / associated_p - average).abs().max()), 1e-10)
