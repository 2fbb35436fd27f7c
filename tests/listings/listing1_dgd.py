# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 1: decentralized gradient descent (DGD), static exponential-2 graph.

Solves the decentralized linear regression ``min_x sum_i ||A_i x - b_i||^2 / 2``. DGD
with a constant step converges to a neighborhood of the optimum (its bias is O(gamma)),
which the final check measures. Run with ``fogrun -np 4 python listing1_dgd.py`` or
``fogsim.spmd.run_path(<this file>, size=4)``; ``--out FILE`` saves the final iterates.
"""

from _harness import linear_regression, optimum, report

# --- listing 1 as printed (lines 1-6) ---
import fogsim.compat.bluefog as bf
bf.init() # Initialize the BlueFog

# Set topology as static exponential graph.
G = bf.ExponentialTwoGraph(bf.size())
bf.set_topology(G)
# --- end of listing ---

# Harness: the data, the start and the step the paper leaves out.
A, b = linear_regression()
x = A.new_zeros(A.shape[1], 1)
gamma, maxite = 0.2, 300

# --- listing 1 as printed (lines 7-12) ---
# DGD implementation
for ite in range(maxite):
    grad_local = A.t().mm(A.mm(x) - b)  # compute local grad
    y = x - gamma * grad_local          # local update
    x = bf.neighbor_allreduce(y)        # partial averaging
# --- end of listing ---

x_opt = optimum(A, b)
report(x, "dgd_rel_err", float((x - x_opt).norm() / x_opt.norm()), 0.1)
