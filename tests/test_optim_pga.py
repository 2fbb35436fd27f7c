"""Local SGD and periodic global averaging (Gossip-PGA, Chen et al. 2021) in fogsim.optim.

Gossip-PGA: every K-th communicating step averages the parameters over all agents, the
others mix them with the neighbours; with H local steps per communication it is local SGD
with periodic global averaging. Each test writes the update out from that definition with
dense matrices, as tests/test_optim.py does for the plain wrappers.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fogsim as fs  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from fogsim import topology as T  # noqa: E402
from tests.test_optim import LR, assert_close, backward, grads, mix, net, params  # noqa: E402

N = 6


@pytest.fixture(autouse=True)
def float64_ring():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    fs.init(backend="sim", size=N, topology=T.ring_graph)
    yield
    fs.shutdown()
    torch.set_default_dtype(default)


def ring_W() -> np.ndarray:
    return fs.load_topology().uniform().to_dense()


@pytest.mark.parametrize("overlap", [False, True])
def test_atc_averages_globally_every_kth_communication(overlap):
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, overlap=overlap, global_average_every=3
    )
    W, J = ring_W(), np.full((N, N), 1.0 / N)
    for t in range(7):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        mixing = J if (t + 1) % 3 == 0 else W
        assert_close(params(model), {k: mix(mixing, x[k] - LR * g[k]) for k in x})
        consensus = all(torch.allclose(v, v[:1].expand_as(v)) for v in params(model).values())
        assert consensus == ((t + 1) % 3 == 0)


def test_awc_averages_globally_every_kth_communication():
    model = fo.replicate(net)
    opt = fo.DistributedAdaptWithCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, global_average_every=2
    )
    W, J = ring_W(), np.full((N, N), 1.0 / N)
    for t in range(4):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        mixing = J if t % 2 == 1 else W
        assert_close(params(model), {k: mix(mixing, x[k]) - LR * g[k] for k in x})


def test_local_sgd_with_periodic_global_averaging():
    # H = 2 local steps per communication, every 2nd communication global: steps 2, 6 gossip,
    # step 4 (and 8) averages over every agent; the others are local steps only
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR),
        model,
        num_steps_per_communication=2,
        global_average_every=2,
    )
    W, J = ring_W(), np.full((N, N), 1.0 / N)
    for t in range(8):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        local = {k: x[k] - LR * g[k] for k in x}
        if t % 2 == 0:
            want = local
        else:
            want = {k: mix(J if t % 4 == 3 else W, v) for k, v in local.items()}
        assert_close(params(model), want)


def test_global_average_every_is_checked():
    model = fo.replicate(net)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    for bad, error in ((0, ValueError), (-2, ValueError), (1.5, TypeError), ("3", TypeError)):
        with pytest.raises(error, match="global_average_every"):
            fo.DistributedAdaptThenCombineOptimizer(sgd, model, global_average_every=bad)
    opt = fo.DistributedAdaptThenCombineOptimizer(sgd, model)
    assert opt.global_average_every is None
    opt.global_average_every = 4
    assert opt.global_average_every == 4
