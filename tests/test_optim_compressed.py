"""compressor= in fogsim.optim: adapt-then-combine becomes CHOCO-SGD (Koloskova, Stich and
Jaggi 2019, Algorithm 2), written out here from the paper with dense weights:

    x_half = x - lr g;  q = C(x_half - x_hat);  x_hat += q;  x = x_half + gamma (W x_hat - x_hat)

and adapt-with-combine mixes ``x`` itself by CHOCO-gossip and steps from the gradient at ``x``:

    q = C(x - x_hat);  x_hat += q;  x = x + gamma (W x_hat - x_hat) - lr g(x)
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import compress as fc  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from tests.test_optim import LR, backward, batch, grads, net, params  # noqa: E402
from tests.test_optim_pga import N, float64_ring  # noqa: E402, F401  (autouse: a ring of N)


def atc(model, **options):
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    return fo.DistributedAdaptThenCombineOptimizer(sgd, model, **options)


def test_atc_with_a_compressor_is_choco_sgd():
    model = fo.replicate(net)
    compressor, gamma = fc.top_k(0.5), 0.4
    opt = atc(model, compressor=compressor, gamma=gamma)
    W = fs.load_topology().uniform().to_dense()
    x_hat = {k: torch.zeros_like(v) for k, v in params(model).items()}
    for t in range(4):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        for k in x:
            half = (x[k] - LR * g[k]).numpy()
            q = compressor.decompress_stacked(compressor.compress_stacked(half - x_hat[k].numpy()))
            x_hat[k] = x_hat[k] + torch.from_numpy(q)
            mixed = np.einsum("ij,j...->i...", W, x_hat[k].numpy())
            want = torch.from_numpy(half + gamma * (mixed - x_hat[k].numpy()))
            torch.testing.assert_close(params(model)[k], want, rtol=0, atol=1e-12, msg=k)


def test_identity_with_gamma_one_is_plain_atc():
    plain, choco = fo.replicate(net), fo.replicate(net)
    a, b = atc(plain), atc(choco, compressor=fc.identity(), gamma=1.0)
    for t in range(3):
        for model, opt in ((plain, a), (choco, b)):
            backward(model, t)
            opt.step()
    for k, v in params(plain).items():
        torch.testing.assert_close(params(choco)[k], v, rtol=0, atol=1e-12)


def test_each_parameter_is_its_own_compressed_message():
    model = fo.replicate(net)
    opt = atc(model, compressor=fc.top_k(2), gamma=0.5)
    fs.bytes_sent(reset=True)
    backward(model, 0)
    opt.step()
    per_agent = sum(fc.top_k(2).payload_bytes(p.shape[1:]) for p in model.parameters())
    np.testing.assert_array_equal(fs.bytes_sent(), np.full(N, 2 * per_agent))  # ring: 2 each


def awc(model, **options):
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    return fo.DistributedAdaptWithCombineOptimizer(sgd, model, **options)


def test_awc_with_a_compressor_steps_from_the_choco_mix():
    model = fo.replicate(net)
    compressor, gamma = fc.top_k(0.5), 0.4
    opt = awc(model, compressor=compressor, gamma=gamma)
    W = fs.load_topology().uniform().to_dense()
    x_hat = {k: np.zeros(v.shape) for k, v in params(model).items()}
    for t in range(4):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        for k in x:
            here = x[k].numpy()
            q = compressor.decompress_stacked(compressor.compress_stacked(here - x_hat[k]))
            x_hat[k] = x_hat[k] + q
            mixed = here + gamma * (np.einsum("ij,j...->i...", W, x_hat[k]) - x_hat[k])
            want = torch.from_numpy(mixed) - LR * g[k]
            torch.testing.assert_close(params(model)[k], want, rtol=0, atol=1e-12, msg=k)


def test_awc_with_identity_and_gamma_one_is_plain_awc_to_round_off():
    # Not bit for bit: CHOCO's x + (s - x_hat) rounds where W x does not (as for ATC).
    plain, choco = fo.replicate(net), fo.replicate(net)
    a, b = awc(plain), awc(choco, compressor=fc.identity(), gamma=1.0)
    for t in range(5):
        for model, opt in ((plain, a), (choco, b)):
            backward(model, t)
            opt.step()
    for k, v in params(plain).items():
        torch.testing.assert_close(params(choco)[k], v, rtol=0, atol=1e-12)


def average_model_loss(model, x, y) -> float:
    """The loss over every agent's batch of the agents' average parameters (the objective)."""
    with torch.no_grad():  # no gradients: not a training pass the wrapper counts
        saved = [p.clone() for p in model.parameters()]
        for p in model.parameters():
            p.copy_(p.mean(0, keepdim=True).expand_as(p))
        loss = float(fo.per_agent(F.cross_entropy)(model(x), y).mean())
        for p, value in zip(model.parameters(), saved, strict=True):
            p.copy_(value)
    return loss


def test_awc_with_top_k_trains_as_plain_awc_does():
    x, y = batch(0)
    curves = []
    for options in ({}, {"compressor": fc.top_k(0.3), "gamma": 0.3}):
        model = fo.replicate(net)
        opt = awc(model, **options)
        curve = [average_model_loss(model, x, y)]
        for t in range(60):
            model.zero_grad()
            fo.per_agent(F.cross_entropy)(model(x), y).sum().backward()
            opt.step()
            if t % 20 == 19:
                curve.append(average_model_loss(model, x, y))
        curves.append(np.array(curve))
    plain, compressed = curves
    assert np.all(np.diff(compressed) < 0), compressed
    # top-30% with error feedback loses little of what exact mixing gains
    assert compressed[0] - compressed[-1] > 0.8 * (plain[0] - plain[-1]), (plain, compressed)


def test_awc_sends_each_parameter_compressed_to_each_out_neighbor():
    model = fo.replicate(net)
    C = fc.qsgd(7, scaled=True)
    opt = awc(model, compressor=C, gamma=0.5)
    per_agent = sum(C.payload_bytes(p.shape[1:]) for p in model.parameters())
    out_degree = fs.load_topology().out_degrees()
    fs.bytes_sent(reset=True)
    for t in range(3):
        backward(model, t)
        opt.step()
        np.testing.assert_array_equal(fs.bytes_sent(), (t + 1) * per_agent * out_degree)


def test_bad_compression_arguments_are_refused():
    model = fo.replicate(net)
    with pytest.raises(TypeError, match="compressor"):
        atc(model, compressor="top_k", gamma=0.5)
    with pytest.raises(ValueError, match="needs gamma"):
        atc(model, compressor=fc.top_k(1))
    with pytest.raises(ValueError, match="needs a compressor"):
        atc(model, gamma=0.5)
    with pytest.raises(ValueError, match="gamma"):
        atc(model, compressor=fc.top_k(1), gamma=1.5)
    with pytest.raises(ValueError, match="does not gossip"):
        fo.DistributedGradientAllreduceOptimizer(
            torch.optim.SGD(model.parameters(), lr=LR), model, compressor=fc.top_k(1), gamma=0.5
        )
    opt = atc(model, compressor=fc.top_k(1), gamma=0.5)
    opt.self_weight = 0.5
    backward(model, 0)
    with pytest.raises(ValueError, match="static topology's weights"):
        opt.step()
