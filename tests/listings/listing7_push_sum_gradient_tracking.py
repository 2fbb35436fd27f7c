# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 7 (Appendix B): push-sum gradient tracking, one-peer dynamic grid.

Same linear regression as Listing 1, over the one-peer variant of the 2-D mesh grid (a
time-varying directed graph; column-stochastic push weights, corrected by ``v``). Every
agent converges to the exact optimum, which the final check measures.

The printed ``Gradient_tracking_one_step`` takes ``gamma`` but steps with ``alpha``,
which it reads from the script's globals (as the tutorial's complete code defines it);
the harness defines ``alpha``, so the listing runs as printed and ``gamma`` goes unused.
"""

import torch
from _harness import linear_regression, optimum, report

# --- listing 7 as printed (lines 1-3) ---
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util
bf.init() # Initialize the BlueFog
# --- end of listing ---

# Harness: data, start (u = x = 0, v = 1, y = prev_grad_local = the local gradient at x)
# and the step alpha the printed function reads.
A, b = linear_regression()
x = A.new_zeros(A.shape[1], 1)
u = x.clone()
v = torch.ones(1, 1, dtype=torch.double)
prev_grad_local = A.t().mm(A.mm(x) - b)
y = prev_grad_local.clone()
x_opt = None  # the printed function takes it and does not use it
alpha, maxite = 0.1, 600

# --- listing 7 as printed (lines 4-39) ---

def Gradient_tracking_one_step(
    x, y, u, v, prev_grad_local, dynamic_neighbor_gen, x_opt, A, b, gamma=1e-2):

    # Get the update weights
    dst_neighbors, src_neighbors = next(dynamic_neighbor_gen)
    src_weights = {r: 1 for r in src_neighbors}
    self_weight = 1 / (len(dst_neighbors) + 1)
    dst_weights = {r: self_weight for r in dst_neighbors}

    # u update step: u_{k+1} = Wˆk (u_k - \alpha*y_k)
    w = u - alpha * y
    u_new = bf.neighbor_allreduce(w, self_weight, src_weights, dst_weights)

    # v update: v_{k+1} = Wˆk v_{k} --(Correction weights)
    v_new = bf.neighbor_allreduce(v, self_weight, src_weights, dst_weights)

    # x update: x_{k+1} = u_{k+1} / v_{k+1} (element-wise division)
    x_new = u_new / v_new

    # y update step: y_{k+1} = Wˆk (y_k + \grad f(x_{k+1}) - \grad f(x_{k}))
    grad_local = A.t().mm(A.mm(x_new) - b)
    q = y + grad_local - prev_grad_local
    y_new = bf.neighbor_allreduce(q, self_weight, src_weights, dst_weights)

    return x_new, y_new, u_new, v_new, grad_local

# Set up grid topology
bf.set_topology(topology_util.MeshGrid2DGraph(bf.size()))
# Set up one-peer variant of the grid topology
dynamic_neighbor_gen = topology_util.GetDynamicOnePeerSendRecvRanks(bf.load_topology(),
    bf.rank())

# Algorithm starts
for ite in range(maxite):
    x, y, u, v, prev_grad_local = Gradient_tracking_one_step(
        x, y, u, v, prev_grad_local, dynamic_neighbor_gen, x_opt, A, b, gamma=2e-2)
# --- end of listing ---

x_opt = optimum(A, b)
report(x, "gt_rel_err", float((x - x_opt).norm() / x_opt.norm()), 1e-8)
