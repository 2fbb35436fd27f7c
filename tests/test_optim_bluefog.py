"""fogsim.optim's ``num_steps_per_communication`` and window optimizer as BlueFog 0.3 documents.

BlueFog's optimizer docstrings: "num_steps_per_communication: Number of expected model
forward [backward, for the gradient-based wrappers] function calls before each
communication", with two usage scenarios:

1. local accumulation of gradients without updating the model: ``zero_grad()``, J forward
   and backward passes, one ``step()``, where the communication happens;
2. local updates: J times (forward, ``zero_grad()``, backward, ``step()``); the communication
   happens at the last one.

Its window-put optimizer puts the parameters during the forward pass, then ``step()`` waits,
combines with ``win_update`` and runs the wrapped optimizer; ``unregister_window()`` frees the
windows. Every expected value here is built by hand from the per-pass gradients (float64,
simulated agents, dense weight matrix).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from tests.test_optim import float64_world, net  # noqa: E402, F401 - the same world and model

N = 4
LR = 0.1
J = 2

ATC = fo.DistributedAdaptThenCombineOptimizer
AWC = fo.DistributedAdaptWithCombineOptimizer
GA = fo.DistributedGradientAllreduceOptimizer
WIN_PUT = fo.DistributedWinPutOptimizer


def batch(t: int):
    x = fs.local(lambda r: torch.randn(6, 5, generator=torch.Generator().manual_seed(10 * r + t)))
    y = fs.local(
        lambda r: torch.randint(0, 3, (6,), generator=torch.Generator().manual_seed(t + r))
    )
    return x, y


def run_pass(model, t: int) -> None:
    """One training pass (forward and backward, gradients accumulate) on batch t."""
    x, y = batch(t)
    fo.per_agent(F.cross_entropy)(model(x), y).sum().backward()


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def grad_at(x: dict[str, torch.Tensor], t: int) -> dict[str, torch.Tensor]:
    """Every agent's gradient of batch t's loss at parameters x (a model of its own)."""
    model = fo.replicate(net)
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(x[k])
    run_pass(model, t)
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def W() -> torch.Tensor:
    return torch.as_tensor(fs.load_topology().uniform().to_dense())


def mix(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,j...->i...", W(), x)


def mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(0, keepdim=True).expand_as(x)


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=1e-12, msg=k)


def assert_differ(got: dict, other: dict) -> None:
    assert any(not torch.allclose(got[k], other[k], rtol=0, atol=1e-9) for k in got)


def wrap(wrapper, model, overlap: bool, j: int = J):
    return wrapper(
        torch.optim.SGD(model.parameters(), lr=LR),
        model,
        num_steps_per_communication=j,
        overlap=overlap,
    )


# What one communicating step gives from parameters x and the round's summed gradient g.
COMMUNICATING = {
    ATC: lambda x, g: mix(x - LR * g),
    AWC: lambda x, g: mix(x) - LR * g,
    GA: lambda x, g: x - LR * mean(g),
    WIN_PUT: lambda x, g: mix(x) - LR * g,
}
WRAPPERS = pytest.mark.parametrize(
    "wrapper", list(COMMUNICATING), ids=["atc", "awc", "ga", "win_put"]
)
OVERLAP = pytest.mark.parametrize("overlap", [False, True], ids=["in_step", "overlap"])


@WRAPPERS
@OVERLAP
def test_j_passes_then_one_step_accumulate_gradients_and_communicate(wrapper, overlap):
    # scenario 1: zero_grad, J forward/backward passes, one step (communication happens here)
    model = fo.replicate(net)
    opt = wrap(wrapper, model, overlap)
    for t in range(3):
        x = params(model)
        g = {k: sum(grad_at(x, 10 * t + j)[k] for j in range(J)) for k in x}
        opt.zero_grad()
        for j in range(J):
            run_pass(model, 10 * t + j)
        if overlap and wrapper is ATC:  # the J-th backward pass took the step already
            assert_differ(params(model), x)
        opt.step()
        assert_close(params(model), {k: COMMUNICATING[wrapper](x[k], g[k]) for k in x})


@WRAPPERS
@OVERLAP
def test_one_pass_per_step_communicates_at_every_jth_step(wrapper, overlap):
    # scenario 2: J times (forward, zero_grad, backward, step); BlueFog's gradient allreduce
    # averages at every step (its step() allreduces every gradient not yet started)
    model = fo.replicate(net)
    opt = wrap(wrapper, model, overlap)
    for t in range(2 * J):
        x = params(model)
        g = grad_at(x, t)
        opt.zero_grad()
        run_pass(model, t)
        opt.step()
        if wrapper is GA or t % J == J - 1:
            want = {k: COMMUNICATING[wrapper](x[k], g[k]) for k in x}
        else:
            want = {k: x[k] - LR * g[k] for k in x}  # local step only
        assert_close(params(model), want)


@pytest.mark.parametrize("wrapper", [ATC, AWC, WIN_PUT], ids=["atc", "awc", "win_put"])
def test_a_step_without_a_pass_counts_as_one(wrapper):
    # gradients set by hand (no forward or backward pass): every J-th step communicates
    model = fo.replicate(net)
    opt = wrap(wrapper, model, overlap=False)
    for t in range(2 * J):
        x = params(model)
        g = grad_at(x, t)
        for k, p in model.named_parameters():
            p.grad = g[k].clone()
        opt.step()
        want = (
            {k: COMMUNICATING[wrapper](x[k], g[k]) for k in x}
            if t % J == J - 1
            else {k: x[k] - LR * g[k] for k in x}
        )
        assert_close(params(model), want)


@pytest.mark.parametrize("wrapper", [AWC, WIN_PUT], ids=["awc", "win_put"])
@OVERLAP
def test_only_training_forward_calls_count(wrapper, overlap):
    model = fo.replicate(net)
    opt = wrap(wrapper, model, overlap)
    x = params(model)
    g = grad_at(x, 0)
    opt.zero_grad()
    run_pass(model, 0)
    model.eval()
    model(batch(1)[0])  # evaluation: not a pass
    model.train()
    with torch.no_grad():
        model(batch(2)[0])  # no gradients: not a pass
    opt.step()  # one pass of J: local
    assert_close(params(model), {k: x[k] - LR * g[k] for k in x})


class Twice(nn.Module):
    """Calls one layer twice per forward (BlueFog's DuplicatedLinearNet)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(self.fc(x))


@pytest.mark.parametrize("wrapper", [AWC, WIN_PUT], ids=["awc", "win_put"])
@OVERLAP
def test_a_layer_called_twice_is_one_pass(wrapper, overlap):
    model = fo.replicate(Twice())
    opt = wrap(wrapper, model, overlap, j=1)
    x = params(model)
    inputs = fs.local(lambda r: torch.full((2, 3), float(r)))
    opt.zero_grad()
    model(inputs).square().sum().backward()
    g = {k: p.grad.clone() for k, p in model.named_parameters()}
    opt.step()
    assert_close(params(model), {k: mix(x[k]) - LR * g[k] for k in x})


@pytest.mark.parametrize("wrapper", [ATC, GA], ids=["atc", "ga"])
def test_more_than_j_backward_passes_before_step_is_an_error_with_hooks(wrapper):
    model = fo.replicate(net)
    opt = wrap(wrapper, model, overlap=True)
    for t in range(J):
        run_pass(model, t)
    with pytest.raises(RuntimeError, match=r"computed 3 times before step\(\).*=2"):
        run_pass(model, J)
    opt.zero_grad()
    x = params(model)
    g = {k: sum(grad_at(x, j)[k] for j in range(J)) for k in x}
    for j in range(J):  # recovers: the next round works
        run_pass(model, j)
    opt.step()
    assert_close(params(model), {k: COMMUNICATING[wrapper](x[k], g[k]) for k in x})


def test_win_put_puts_to_dst_weights_only_and_keeps_stale_buffers():
    # BlueFog's dynamic window put: each agent writes one out-neighbor's buffer per step; the
    # others keep what was put before, and win_update averages self and every buffer.
    model = fo.replicate(net)  # agents start apart: a stale buffer shows
    opt = WIN_PUT(torch.optim.SGD(model.parameters(), lr=LR), model)
    Wd = W().numpy()
    outs = [np.flatnonzero(Wd[:, i] * (np.arange(N) != i)) for i in range(N)]
    # buffers[k][(i, j)]: what j put at i; win_create fills them with i's own value
    buffers = {
        k: {(i, j): v[i].clone() for i in range(N) for j in range(N) if Wd[i, j] and i != j}
        for k, v in params(model).items()
    }
    for t in range(3):
        sent = [int(outs[j][t % len(outs[j])]) for j in range(N)]
        opt.dst_weights = [{sent[j]: 1.0} for j in range(N)]
        x = params(model)
        g = grad_at(x, t)
        opt.zero_grad()
        run_pass(model, t)
        opt.step()
        want = {}
        for k, v in x.items():
            for j in range(N):
                buffers[k][(sent[j], j)] = v[j].clone()
            rows = []
            for i in range(N):
                row = Wd[i, i] * v[i]
                for j in range(N):
                    if i != j and Wd[i, j]:
                        row = row + Wd[i, j] * buffers[k][(i, j)]
                rows.append(row)
            want[k] = torch.stack(rows) - LR * g[k]
        assert_close(params(model), want)


def test_unregister_window_is_bluefogs_name_for_free_windows():
    import fogsim.compat.bluefog as bf

    model = fo.replicate(net)
    opt = bf.DistributedWinPutOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, window_prefix="CPU"
    )
    assert sorted(fs.win_names()) == sorted(f"CPU.{k}" for k, _ in model.named_parameters())
    opt.unregister_window()
    assert fs.win_names() == []
    opt.unregister_window()  # a second call is harmless
