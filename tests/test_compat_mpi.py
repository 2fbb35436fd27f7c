"""A per-agent BlueFog script runs under fogrun (MPI) with only its import line changed."""

from __future__ import annotations

import pytest

from tests._jobs import fogrun_script

SCRIPT = """
import torch
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util

bf.init()
bf.set_topology(topology_util.ExponentialTwoGraph(bf.size()))
torch.manual_seed(123 + bf.rank())
A, b = torch.randn(8, 3, dtype=torch.double), torch.randn(8, 1, dtype=torch.double)
x = torch.zeros(3, 1, dtype=torch.double)
for _ in range(300):                       # Listing 1: DGD
    y = x - 0.02 * A.t().mm(A.mm(x) - b)
    x = bf.neighbor_allreduce(y)
spread = bf.allreduce((x - bf.allreduce(x)).norm().reshape(1), average=False)
gen = topology_util.GetDynamicOnePeerSendRecvRanks(bf.load_topology(), bf.rank())
v = torch.tensor([float(bf.rank())], dtype=torch.double)
for _ in range(2):                         # Listing 7's dynamic weights, log2(4) steps
    dst, src = next(gen)
    v = bf.neighbor_allreduce(v, 1 / (len(dst) + 1), {r: 1 for r in src},
                              {r: 1 / (len(dst) + 1) for r in dst})
if bf.rank() == 0:
    print("spread", float(spread), "average", float(v))
bf.barrier()
"""


@pytest.mark.mpi
def test_bluefog_listing_runs_under_fogrun(tmp_path):
    pytest.importorskip("torch", reason="the listing uses torch tensors")
    run = fogrun_script(tmp_path, SCRIPT, 4, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    words = run.stdout.split()
    spread, average = float(words[words.index("spread") + 1]), float(words[-1])
    assert spread < 0.5  # DGD: agents close to each other (a neighborhood, not exact)
    assert average == pytest.approx(1.5, abs=1e-12)  # one-peer exp-2: exact after 2 steps
