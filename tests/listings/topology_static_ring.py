# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog topology document, first snippet: neighbor averaging over a static ring.

The whole snippet is a complete program (``maxite`` is not used); it prints every agent's
``x``. 100 rounds of uniform ring averaging bring every agent to the average of the
ranks, ``(size - 1) / 2``, to float32 precision (``torch.Tensor`` is float32), which the
check after the snippet measures.
"""

from _harness import report

# --- topology snippet 1 as printed ---
import torch
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util

bf.init()  # Default topology is Exponential-2 graph
bf.set_topology(topology_util.RingGraph(bf.size()))  # change to ring graph.
x = torch.Tensor([bf.rank()])
for _ in range(100):
    x = bf.neighbor_allreduce(x)  # Use previous set ring graph.
print("rank {} has x={}".format(bf.rank(), x))
# --- end of listing ---

# float32 (torch.Tensor): every average rounds, so consensus is to float32's precision.
average = (bf.size() - 1) / 2
report(x.to(torch.double), "ring_consensus_err", abs(float(x) - average), 1e-4)
