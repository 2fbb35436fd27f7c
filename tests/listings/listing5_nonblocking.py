# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 5: a nonblocking neighbor_allreduce overlapped with a gradient.

The listing is one step of decentralized gradient descent over a dynamic topology: start
the combination of ``x`` with explicit (positional) weights, compute the gradient while it
runs, then ``wait`` for it. The harness gives the step one-peer exponential-2 weights
(``dst_weights`` too: a dynamic step) and checks the result against the step computed
from every agent's ``x`` by the dense weight matrix.
"""

import torch
from _harness import linear_regression, report

import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util

bf.init()
A, b = linear_regression()
x = torch.arange(1.0, A.shape[1] + 1, dtype=torch.double).reshape(-1, 1) * (bf.rank() + 1)
x0 = x.clone()
lr = 0.1
# Step 2 of the one-peer exponential-2 schedule: send to rank + 2, receive from rank - 2
# (the first step is to the next rank; taking the second shows the weights at work).
gen = topology_util.GetDynamicOnePeerSendRecvRanks(bf.load_topology(), bf.rank())
next(gen)
dst, src = next(gen)
self_weight = 0.5
src_weights = {r: 0.5 for r in src}
dst_weights = {r: 1.0 for r in dst}


def ComputeGradient(x):
    """The local least-squares gradient ``A^T (A x - b)``."""
    return A.t().mm(A.mm(x) - b)


# --- listing 5 as printed ---
handle = bf.neighbor_allreduce_nonblocking(x, self_weight, src_weights, dst_weights)
grad = ComputeGradient(x) # Communication in parallel
# Wait() returns the tensor until the communication is done
x = bf.wait(handle) - lr * grad
# --- end of listing ---

# Reference: x_i <- w_ii x0_i + sum_j w_ij x0_j (every sender's dst weight is 1.0), from
# every agent's x0, minus the step along this agent's gradient at x0.
x0s = bf.allgather(x0.reshape(1, -1))
row = torch.zeros(bf.size(), dtype=torch.double)
row[bf.rank()] = self_weight
for j, w in src_weights.items():
    row[j] += w * 1.0
want = (row @ x0s).reshape(-1, 1) - lr * ComputeGradient(x0)
report(x, "step_err", float((x - want).abs().max()), 1e-12)
