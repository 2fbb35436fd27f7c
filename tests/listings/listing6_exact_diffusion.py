# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 6 (Appendix A): Exact-Diffusion over a static ring.

Same linear regression as Listing 1. Exact-Diffusion corrects DGD's bias: every agent
converges to the exact optimum (linearly), which the final check measures. Run with
``fogrun -np 4 python listing6_exact_diffusion.py`` or ``fogsim.spmd.run_path``.
"""

from _harness import linear_regression, optimum, report

# --- listing 6 as printed (lines 1-7) ---
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util
bf.init() # Initialize the BlueFog

# Set topology as static ring graph.
G = topology_util.RingGraph(bf.size())
bf.set_topology(G)
# --- end of listing ---

# Harness: data, start (psi^{-1} = x^0, the usual initialization) and step.
A, b = linear_regression()
x = A.new_zeros(A.shape[1], 1)
pre_psi = x.clone()
gamma, maxite = 0.2, 400

# --- listing 6 as printed (lines 8-15) ---
# ED implementation
for ite in range(maxite):
    grad_local = A.t().mm(A.mm(x) - b)  # compute local grad
    psi = x - gamma * grad_local        # local update
    phi = psi + x - pre_psi             # bias correction
    x = bf.neighbor_allreduce(phi)      # partial averaging
    pre_psi = psi.clone()
# --- end of listing ---

x_opt = optimum(A, b)
report(x, "ed_rel_err", float((x - x_opt).norm() / x_opt.norm()), 1e-8)
