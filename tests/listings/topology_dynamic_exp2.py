# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog topology document, second snippet: one-peer dynamic exponential-2 averaging.

Written against BlueFog's older ``neighbor_allreduce`` keywords (``neighbor_weights``,
``send_neighbors``), which the compat layer accepts with a ``DeprecationWarning``. At
each step every agent averages with the one peer ``2**k`` away (k cycling), so with a
power-of-two size all agents hold the exact average after ``log2(size)`` steps; the
check after the snippet measures the consensus error.
"""

from _harness import report

maxite = 12  # the snippet's iteration count (not set in the document)

# --- topology snippet 2 as printed ---
import torch
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util

bf.init()
# Since Default topology is Exponential-2, the following utility function
# will generate one-peer dynamic Exponential-2 topology.
dynamic_neighbors = topology_util.GetDynamicSendRecvRanks(
        bf.load_topology(), bf.rank())
x = torch.Tensor([bf.rank()])
for _ in range(maxite):
    to_neighbors, from_neighbors = next(dynamic_neighbors)
    avg_weight = 1/(len(from_neighbors) + 1)
    x = bf.neighbor_allreduce(x, name='x',
        self_weight=avg_weight,
        neighbor_weights={r: avg_weight for r in from_neighbors},
        send_neighbors=to_neighbors)
# --- end of listing ---

average = (bf.size() - 1) / 2
report(x.to(torch.double), "exp2_consensus_err", abs(float(x) - average), 1e-6)
