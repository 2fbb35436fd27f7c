"""Simulated time in torch training: the optimizer wrappers charge each training pass.

Every expected time is worked out here by hand: a linear layer ``d_in -> d_out`` on a batch
of B rows takes ``2 B d_in d_out`` FLOPs forward (a multiply and an add per weight and
row); backward, the weight's gradient takes as many again, and the gradient of the layer's
input as many again where the input needs one (the bias's gradient, a sum, counts none in
torch's FlopCounterMode). A device of peak P FLOP/s at efficiency e computes F FLOPs in
``F / (P e)`` seconds, over the agent's speed and times its straggler draw.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import clock as C  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from fogsim import topology as T  # noqa: E402
from fogsim.optim import _flops  # noqa: E402
from tests import _jobs  # noqa: E402

PEAK, EFF = 2e9, 0.25  # FLOP/s, fraction of the peak reached
ALPHA, W = 3e-5, 1e9  # latency (s), bandwidth (bytes/s)
N, B, D_IN, D_OUT = 4, 5, 6, 3

WRAPPERS = {
    "atc": fo.DistributedAdaptThenCombineOptimizer,
    "awc": fo.DistributedAdaptWithCombineOptimizer,
    "allreduce": fo.DistributedGradientAllreduceOptimizer,
    "push_sum": fo.DistributedPushSumOptimizer,
    "win_put": fo.DistributedWinPutOptimizer,
}


@pytest.fixture(autouse=True)
def _shutdown():
    yield
    fs.shutdown()


def platform(n: int = N, **options) -> C.Platform:
    options.setdefault("device", C.Device(PEAK, efficiency=EFF))
    return C.Platform.uniform(n, latency=ALPHA, bandwidth=W, **options)


def data(batch: int = B, d_in: int = D_IN, d_out: int = D_OUT, seed: int = 0):
    x = fs.local(
        lambda r: torch.randn(batch, d_in, generator=torch.Generator().manual_seed(seed + r))
    )
    y = fs.local(
        lambda r: torch.randn(batch, d_out, generator=torch.Generator().manual_seed(9 + r))
    )
    return x, y


def make(wrapper: str, model: nn.Module, **options):
    torch.manual_seed(0)
    replicated = fo.replicate(model)
    opt = WRAPPERS[wrapper](
        torch.optim.SGD(replicated.parameters(), lr=0.05), replicated, **options
    )
    return replicated, opt


def train(model, opt, x, y, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        loss = fo.per_agent(F.mse_loss)(model(x), y)
        opt.zero_grad()
        loss.sum().backward()
        opt.step()
        losses.append(float(loss.detach().sum()))
    return losses


def linear_pass(batch: int, d_in: int, d_out: int, input_grad: bool = False) -> int:
    forward = 2 * batch * d_in * d_out
    return forward + forward * (2 if input_grad else 1)


def test_each_step_charges_a_linear_layers_forward_and_backward_then_its_exchange():
    """ATC on a ring: per step, every agent computes c, then a neighbor exchange of the
    fused parameters (both messages of an agent share its link): ``k (c + m)``."""
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform())
    model, opt = make("atc", nn.Linear(D_IN, D_OUT))
    x, y = data()
    c = linear_pass(B, D_IN, D_OUT) / (PEAK * EFF)
    m = ALPHA + 2 * 4 * (D_IN * D_OUT + D_OUT) / W  # float32 weight and bias, one message
    for k in range(1, 4):
        train(model, opt, x, y, 1)
        np.testing.assert_allclose(C.now(), np.full(N, k * (c + m)), rtol=1e-12)
        np.testing.assert_allclose(C.breakdown()["computing"], np.full(N, k * c), rtol=1e-12)
        np.testing.assert_allclose(opt.time(), C.now())
    assert opt.last_step_flops == linear_pass(B, D_IN, D_OUT)


def test_a_hidden_layers_input_gradient_is_counted():
    """Two layers: the first needs no input gradient, the second does."""
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform())
    h = 7
    model, opt = make("awc", nn.Sequential(nn.Linear(D_IN, h), nn.Tanh(), nn.Linear(h, D_OUT)))
    x, y = data()
    train(model, opt, x, y, 3)
    flops = linear_pass(B, D_IN, h) + linear_pass(B, h, D_OUT, input_grad=True)
    assert opt.last_step_flops == flops
    np.testing.assert_allclose(
        C.breakdown()["computing"], np.full(N, 3 * flops / (PEAK * EFF)), rtol=1e-12
    )


class Scaled(nn.Module):
    """Not an nn.Sequential of known layers: an AgentModel runs it through vmap."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(D_IN, D_OUT)

    def forward(self, x):
        return 2 * self.layer(x)


def test_one_agents_pass_is_counted_whatever_runs_the_stacked_forward():
    """The batched path and vmap count alike: one agent's module on one agent's inputs."""
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform())
    model, opt = make("atc", Scaled())
    assert not model.batched
    x, y = data()
    train(model, opt, x, y, 2)
    assert opt.last_step_flops == linear_pass(B, D_IN, D_OUT)


def test_a_model_the_meta_device_cannot_run_is_counted_on_real_values():
    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(D_IN, D_OUT)

        def forward(self, x):
            return self.layer(x) if bool((x != 0).any()) else self.layer(x + 1)

    torch.manual_seed(0)
    gate = Gate()
    x = torch.randn(B, D_IN)
    want = linear_pass(B, D_IN, D_OUT)
    assert _flops.pass_flops(gate, (x,), {}) == want
    assert _flops.pass_flops(nn.Linear(D_IN, D_OUT), (x,), {}) == want
    assert _flops.pass_flops(nn.Linear(D_IN, D_OUT), (x.expand(N, B, D_IN),), {}, N) == want


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("overlap", [False, True])
def test_training_computes_the_same_numbers_with_and_without_the_clock(wrapper, overlap):
    """Dropout draws random numbers: counting must not draw any, nor touch a gradient.

    The window wrapper's messages land in virtual time: with agents of different speeds
    a read may come before a neighbour's put has landed (as on a real cluster), so it runs
    at one speed, where every put lands before it is read."""
    speed = [1.0] * 4 if wrapper == "win_put" else [1.0, 2.0, 0.5, 1.0]

    def run(clock: bool):
        fs.init(size=N, topology=T.ring_graph)
        if clock:
            C.start(platform(speed=speed))
        torch.manual_seed(1)
        net = nn.Sequential(nn.Linear(D_IN, 8), nn.ReLU(), nn.Dropout(0.3), nn.Linear(8, D_OUT))
        model, opt = make(wrapper, net, overlap=overlap)
        x, y = data()
        losses = train(model, opt, x, y, 4)
        x2, y2 = data(batch=3, seed=5)
        losses += train(model, opt, x2, y2, 2)
        grads = [p.grad.clone() for p in model.parameters()]
        params = [p.detach().clone() for p in model.parameters()]
        rng = torch.get_rng_state()
        charged = C.breakdown()["computing"] if clock else None
        if hasattr(opt, "free_windows"):
            opt.free_windows()
        fs.shutdown()
        return losses, grads, params, rng, charged

    plain, timed = run(False), run(True)
    assert plain[0] == timed[0]
    for a, b in zip(plain[1] + plain[2], timed[1] + timed[2], strict=True):
        assert torch.equal(a, b)
    assert torch.equal(plain[3], timed[3])
    per_pass = {
        b: linear_pass(b, D_IN, 8) + linear_pass(b, 8, D_OUT, input_grad=True) for b in (B, 3)
    }
    seconds = (4 * per_pass[B] + 2 * per_pass[3]) / (PEAK * EFF)
    np.testing.assert_allclose(timed[4], seconds / np.array(speed), rtol=1e-12)


def test_speeds_and_stragglers_scale_each_steps_computation():
    trace = [[1.0, 3.0, 1.0, 1.0], [2.0, 1.0, 1.0, 5.0]]
    speed = np.array([1.0, 1.0, 4.0, 0.5])
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform(speed=speed, stragglers=C.Stragglers(trace=trace)))
    model, opt = make("atc", nn.Linear(D_IN, D_OUT))
    x, y = data()
    train(model, opt, x, y, 3)  # computations 0, 1, 0 of the trace
    c = linear_pass(B, D_IN, D_OUT) / (PEAK * EFF)
    want = c / speed * (2 * np.array(trace[0]) + np.array(trace[1]))
    np.testing.assert_allclose(C.breakdown()["computing"], want, rtol=1e-12)


def test_the_count_runs_once_per_input_shape(monkeypatch):
    calls = []
    count = _flops.pass_flops

    def spy(model, args, kwargs, agents=1):
        calls.append(tuple(args[0].shape))
        return count(model, args, kwargs, agents)

    monkeypatch.setattr(_flops, "pass_flops", spy)
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform())
    model, opt = make("allreduce", nn.Linear(D_IN, D_OUT))
    batches = [data(batch=b) for b in (B, B, 2, B, 2, 9)]
    for x, y in batches:
        train(model, opt, x, y, 1)
    assert calls == [(N, B, D_IN), (N, 2, D_IN), (N, 9, D_IN)]
    flops = sum(linear_pass(b, D_IN, D_OUT) for b in (B, B, 2, B, 2, 9))
    np.testing.assert_allclose(
        C.breakdown()["computing"], np.full(N, flops / (PEAK * EFF)), rtol=1e-12
    )


def test_the_passes_of_a_round_are_charged_at_its_step():
    """num_steps_per_communication = 2 with both passes before one step: one charge of two
    passes (one straggler draw), before the exchange."""
    fs.init(size=N, topology=T.ring_graph)
    C.start(platform(stragglers=C.Stragglers(trace=[[1.0, 1.0, 1.0, 3.0]])))
    model, opt = make("atc", nn.Linear(D_IN, D_OUT), num_steps_per_communication=2)
    x, y = data()
    for _ in range(2):
        fo.per_agent(F.mse_loss)(model(x), y).sum().backward()
    np.testing.assert_array_equal(C.now(), np.zeros(N))  # charged at the step
    opt.step()
    c = 2 * linear_pass(B, D_IN, D_OUT) / (PEAK * EFF)
    np.testing.assert_allclose(C.breakdown()["computing"], c * np.array([1, 1, 1, 3.0]))
    assert opt.last_step_flops == 2 * linear_pass(B, D_IN, D_OUT)


def test_nothing_is_counted_without_a_clock_a_device_or_a_training_pass(monkeypatch):
    calls = []
    monkeypatch.setattr(_flops, "pass_flops", lambda *a: calls.append(a) or 1.0)
    fs.init(size=N, topology=T.ring_graph)
    model, opt = make("atc", nn.Linear(D_IN, D_OUT))
    x, y = data()
    train(model, opt, x, y, 2)
    assert opt.time() is None and not calls  # no clock
    C.start(C.Platform.uniform(N))  # no device: FLOPs take no time
    train(model, opt, x, y, 2)
    assert not calls and np.all(C.breakdown()["computing"] == 0)
    C.start(platform())
    with torch.no_grad():
        model(x)  # evaluation is free
    model.eval()
    model(x)
    model.train()
    opt.count_flops = False
    train(model, opt, x, y, 1)
    assert not calls and np.all(C.breakdown()["computing"] == 0)
    opt.count_flops = True
    train(model, opt, x, y, 1)
    assert len(calls) == 1
    np.testing.assert_allclose(C.breakdown()["computing"], np.full(N, 1.0 / (PEAK * EFF)))


MPI_JOB = """
import torch
import torch.nn.functional as F
from torch import nn

import fogsim as fs
from fogsim import clock as C
from fogsim import optim as fo

fs.init()
n, r = fs.size(), fs.rank()
c, flops = 0.02, 2 * (2 * 5 * 6 * 3)  # an agent's pass: seconds at speed 1, FLOPs
speed = [1.0, 2.0] * (n // 2)
C.start(C.Platform.uniform(n, speed=speed, device=C.Device(flops / c)))
torch.manual_seed(0)
model = fo.replicate(nn.Linear(6, 3))
opt = fo.DistributedAdaptThenCombineOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model)
x = torch.randn(5, 6, generator=torch.Generator().manual_seed(r))
for _ in range(3):
    loss = F.mse_loss(model(x), torch.zeros(5, 3))
    opt.zero_grad()
    loss.backward()
    opt.step()
parts, want = C.breakdown(), 3 * c / speed[r]
assert abs(parts["computing"] - want) <= 1e-9 * want, (parts, want)
assert opt.time() >= want and opt.last_step_flops == flops, (opt.time(), opt.last_step_flops)
print("rank", r, "computed", parts["computing"], "of", parts["time"], "s")
fs.shutdown()
"""


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_under_fogrun_each_rank_sleeps_its_passes_at_its_speed(tmp_path, backend):
    """Real time: the wrapper charges this rank's pass (hooks overlap by default), and the
    rank's WallClock sleeps it at the rank's speed."""
    _jobs.environment.require_mpiexec()
    if backend == "torch":
        import fogsim.backends.torchdist  # noqa: F401 - fails the test when it cannot import
    _jobs.fogrun_script(tmp_path, MPI_JOB, 2, timeout=120, env={"FOGSIM_BACKEND": backend}).check()
