"""fogsim.optim in simulation: every wrapper's step against the hand-written update.

The stacked parameters of an AgentModel hold every agent's replica; each test computes
the expected parameters from the same gradients with dense weight matrices (float64).
tests/test_optim_mpi.py checks that MPI runs give the simulator's numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import environment
from tests.example_output import table

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import algorithms as A  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from fogsim import topology as T  # noqa: E402

ROOT = Path(__file__).parent.parent
N = 4
LR = 0.1


@pytest.fixture(autouse=True)
def float64_world():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    fs.init(backend="sim", size=N, topology=T.exponential_two_graph)
    yield
    fs.shutdown()
    torch.set_default_dtype(default)


def net(r: int = 0) -> nn.Module:
    torch.manual_seed(100 + r)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


class Custom(nn.Module):
    """Not an nn.Sequential: runs under torch.func.vmap."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 3)
        self.scale = nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.scale * torch.tanh(self.fc(x))


def batch(t: int):
    x = fs.local(lambda r: torch.randn(6, 5, generator=torch.Generator().manual_seed(10 * r + t)))
    y = fs.local(lambda r: torch.randint(0, 3, (6,), generator=torch.Generator().manual_seed(r)))
    return x, y


def backward(model, t: int = 0) -> dict[str, torch.Tensor]:
    """Run forward and backward on batch t; return the parameters before both.

    (With ``overlap=True`` the backward hooks already take the local steps.)
    """
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    x, y = batch(t)
    model.zero_grad()
    fo.per_agent(F.cross_entropy)(model(x), y).sum().backward()
    return before


def grads(model) -> dict[str, torch.Tensor]:
    return {k: v.grad.clone() for k, v in model.named_parameters()}


def mix(W: np.ndarray, x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,j...->i...", torch.as_tensor(W), x)


def params(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def assert_close(got: dict, want: dict, atol: float = 1e-12) -> None:
    assert got.keys() == want.keys()
    for k in got:
        torch.testing.assert_close(got[k], want[k], rtol=0, atol=atol, msg=k)


def uniform_W() -> np.ndarray:
    return fs.load_topology().uniform().to_dense()


# -- the agent axis -----------------------------------------------------------------------
@pytest.mark.parametrize("make", [net, lambda r=0: Custom()], ids=["sequential", "custom"])
def test_replicate_runs_every_agent_on_its_own_data(make):
    model = fo.replicate(lambda r: make(r))
    assert isinstance(model, fo.AgentModel) and model.batched == (make is net)
    names = [k for k, _ in make().named_parameters()]
    assert [k for k, _ in model.named_parameters()] == names  # the module's own names
    assert list(model.state_dict()) == list(make().state_dict())
    x, _ = batch(0)
    out = model(x)
    for i in range(N):
        one = model.agent(i)
        assert [tuple(p.shape) for p in one.parameters()] == [
            tuple(p.shape[1:]) for p in model.parameters()
        ]
        torch.testing.assert_close(out[i], one(x[i]), rtol=0, atol=1e-14)
    if make is net:  # agent r was built by make(r)
        torch.testing.assert_close(model.agent(2)[0].weight, net(2)[0].weight)


def test_replicate_copies_one_module_and_per_agent_is_vmap():
    model = fo.replicate(net())
    w = model[0].weight
    assert w.shape == (N, 7, 5) and torch.equal(w[0], w[3])
    out = torch.randn(N, 6, 3)
    y = torch.randint(0, 3, (N, 6))
    losses = fo.per_agent(F.cross_entropy)(out, y)
    torch.testing.assert_close(
        losses, torch.stack([F.cross_entropy(out[i], y[i]) for i in range(N)])
    )


def _ce_case(shape, classes=4, **kw):
    def make(g):
        out = torch.randn(N, *shape[:1], classes, *shape[1:], generator=g, dtype=torch.float64)
        y = torch.randint(0, classes, (N, *shape), generator=g)
        if kw.get("ignore_index") is not None or "ignore" in kw:
            y[0, ...] = -100  # agent 0 ignores everything: nan, as torch gives
            y[1].view(-1)[::2] = -100
        return out, y, {k: v for k, v in kw.items() if k != "ignore"}

    return make


@pytest.mark.parametrize(
    "fn, make",
    [
        (F.cross_entropy, _ce_case((6,))),
        (F.cross_entropy, _ce_case((6,), reduction="sum")),
        (F.cross_entropy, _ce_case((6, 3))),  # spatial targets: class axis second
        (F.cross_entropy, _ce_case((6,), ignore=True)),
        (F.cross_entropy, _ce_case((6,), label_smoothing=0.1)),  # vmap fallback
        (
            F.cross_entropy,
            lambda g: (
                torch.randn(N, 5, generator=g, dtype=torch.float64),
                torch.randint(0, 5, (N,), generator=g),
                {},
            ),
        ),  # unbatched
        (
            F.cross_entropy,
            lambda g: (
                torch.randn(N, 6, 4, generator=g, dtype=torch.float64),
                torch.rand(N, 6, 4, generator=g, dtype=torch.float64).softmax(-1),
                {},
            ),
        ),  # probabilities: vmap fallback
        (
            F.nll_loss,
            lambda g: (
                torch.randn(N, 6, 4, generator=g, dtype=torch.float64).log_softmax(-1),
                torch.randint(0, 4, (N, 6), generator=g),
                {},
            ),
        ),
        (
            F.mse_loss,
            lambda g: (
                torch.randn(N, 6, 2, generator=g, dtype=torch.float64),
                torch.randn(N, 6, 2, generator=g, dtype=torch.float64),
                {},
            ),
        ),
        (
            F.mse_loss,
            lambda g: (
                torch.randn(N, 6, 2, generator=g, dtype=torch.float64),
                torch.randn(N, 6, 2, generator=g, dtype=torch.float64),
                {"reduction": "sum"},
            ),
        ),
        (
            F.l1_loss,
            lambda g: (
                torch.randn(N, 6, generator=g, dtype=torch.float64),
                torch.randn(N, 6, generator=g, dtype=torch.float64),
                {},
            ),
        ),
    ],
)
def test_per_agent_losses_equal_each_agents_own_loss_and_gradient(fn, make):
    out, y, kw = make(torch.Generator().manual_seed(3))
    out.requires_grad_(True)
    losses = fo.per_agent(fn)(out, y, **kw)
    assert losses.shape == (N,)
    (grad,) = torch.autograd.grad(losses.nansum(), out)
    one = out.detach().clone().requires_grad_(True)
    expected = torch.stack([fn(one[i], y[i], **kw) for i in range(N)])
    (expected_grad,) = torch.autograd.grad(expected.nansum(), one)
    torch.testing.assert_close(losses, expected, rtol=1e-12, atol=1e-12, equal_nan=True)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_per_agent_loss_takes_the_batched_path_only_for_what_it_covers(monkeypatch):
    calls = []
    real = F.cross_entropy

    def spy(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    from fogsim.optim import _agents

    monkeypatch.setitem(_agents._BATCHED_LOSSES, F.cross_entropy, _agents._batched_class_loss(spy))
    out, y = torch.randn(N, 6, 4), torch.randint(0, 4, (N, 6))
    fo.per_agent(F.cross_entropy)(out, y)
    assert calls == [(N * 6, 4)]  # one call on the stacked samples, no vmap
    fo.per_agent(F.cross_entropy)(out, y, label_smoothing=0.2)
    assert calls == [(N * 6, 4)]  # smoothing: vmap of the real loss, not the batched form
    assert "cross_entropy" in repr(fo.per_agent(F.cross_entropy))


def test_agent_model_hooks_see_stacked_values_and_flatten_keeps_the_agent_axis():
    model = fo.replicate(nn.Sequential(nn.Flatten(), nn.Linear(6, 2)))
    seen = []
    model[1].register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape)))
    out = model(torch.randn(N, 3, 2, 3))
    assert out.shape == (N, 3, 2) and seen == [(N, 3, 2)]


# -- each wrapper's step ------------------------------------------------------------------
def step_once(wrapper, model, inner=None, **options):
    opt = wrapper(inner or torch.optim.SGD(model.parameters(), lr=LR), model, **options)
    before = backward(model)
    g = grads(model)
    opt.step()
    return opt, before, g


@pytest.mark.parametrize("overlap", [False, True])
def test_atc_is_mix_of_local_steps(overlap):
    model = fo.replicate(net)
    opt, x, g = step_once(fo.DistributedAdaptThenCombineOptimizer, model, overlap=overlap)
    W = uniform_W()
    assert_close(params(model), {k: mix(W, x[k] - LR * g[k]) for k in x})
    assert opt.overlap is overlap and len(opt._hooks) == 4  # one per parameter: counting


@pytest.mark.parametrize("overlap", [False, True])
def test_awc_steps_from_the_mix(overlap):
    model = fo.replicate(net)
    _, x, g = step_once(fo.DistributedAdaptWithCombineOptimizer, model, overlap=overlap)
    W = uniform_W()
    assert_close(params(model), {k: mix(W, x[k]) - LR * g[k] for k in x})


@pytest.mark.parametrize("overlap", [False, True])
def test_gradient_allreduce_averages_gradients(overlap):
    model = fo.replicate(net)
    _, x, g = step_once(fo.DistributedGradientAllreduceOptimizer, model, overlap=overlap)
    assert_close(params(model), {k: x[k] - LR * g[k].mean(0, keepdim=True) for k in x})


@pytest.mark.parametrize("overlap", [False, True])
def test_win_put_in_lockstep_is_adapt_with_combine(overlap):
    # BlueFog puts x during the forward pass; step() combines, then steps with grad(x)
    model = fo.replicate(net)
    opt, x, g = step_once(fo.DistributedWinPutOptimizer, model, overlap=overlap)
    assert len(fs.win_names()) == 4
    W = uniform_W()
    assert_close(params(model), {k: mix(W, x[k]) - LR * g[k] for k in x})
    opt.free_windows()
    assert fs.win_names() == []
    with pytest.raises(ValueError, match="the windows were freed"):
        opt.step()


def hub_digraph(n: int) -> T.Topology:
    """Directed: everyone sends to agent 0, agent 0 sends to agent 1 (irregular degrees)."""
    W = np.eye(n)
    W[0, 1:] = 1.0
    W[1, 0] = 1.0
    return T.Topology(W)


@pytest.mark.parametrize("overlap", [False, True])
def test_push_sum_tracks_numerator_and_weight(overlap):
    fs.set_topology(hub_digraph(N))
    P = A.push_weights(hub_digraph(N)).to_dense()
    assert not np.allclose(P.sum(1), 1)  # column-, not row-stochastic: w moves
    model = fo.replicate(net)
    opt = fo.DistributedPushSumOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, overlap=overlap
    )
    w = torch.ones(N)
    numerator = {k: v.detach().clone() for k, v in model.named_parameters()}
    for t in range(3):
        z = backward(model, t)
        g = grads(model)
        for k in z:
            numerator[k] = mix(P, numerator[k] - LR * g[k])
        opt.step()
        w = mix(P, w)
        shape = lambda k: (N,) + (1,) * (numerator[k].dim() - 1)  # noqa: E731
        assert_close(params(model), {k: numerator[k] / w.reshape(shape(k)) for k in z})
    torch.testing.assert_close(opt.push_sum_weight.ravel(), w, rtol=0, atol=1e-14)
    assert abs(float(w.sum()) - N) < 1e-12  # push-sum conserves the total weight


@pytest.mark.parametrize(
    "make_inner",
    [
        lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9),
        lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda ps: torch.optim.Adam(ps, lr=0.01),
        lambda ps: torch.optim.AdamW(ps, lr=0.01),
    ],
    ids=["momentum", "nesterov", "adam", "adamw"],
)
@pytest.mark.parametrize("overlap", [False, True])
def test_atc_wraps_any_elementwise_optimizer(make_inner, overlap):
    model = fo.replicate(net)
    reference = fo.replicate(net)  # the same replicas, stepped by hand
    opt = fo.DistributedAdaptThenCombineOptimizer(
        make_inner(model.parameters()), model, overlap=overlap
    )
    ref_opt = make_inner(reference.parameters())
    W = uniform_W()
    for t in range(3):
        backward(model, t)
        backward(reference, t)
        opt.step()
        ref_opt.step()
        with torch.no_grad():
            for p in reference.parameters():
                p.copy_(mix(W, p))
        assert_close(params(model), params(reference))


# -- per-step settings --------------------------------------------------------------------
def test_num_steps_per_communication_mixes_every_kth_step():
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, num_steps_per_communication=2
    )
    W = uniform_W()
    for t, communicates in enumerate([False, True, False, True]):
        x = backward(model, t)
        g = grads(model)
        opt.step()
        local = {k: x[k] - LR * g[k] for k in x}
        assert_close(
            params(model), {k: mix(W, v) for k, v in local.items()} if communicates else local
        )


def test_communication_type_switches_per_step():
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model)
    assert opt.communication_type is fo.CommunicationType.neighbor_allreduce
    for kind in ["allreduce", fo.CommunicationType.empty, "neighbor_allreduce"]:
        opt.communication_type = kind
        x = backward(model)
        g = grads(model)
        opt.step()
        local = {k: x[k] - LR * g[k] for k in x}
        if kind == "allreduce":
            want = {k: v.mean(0, keepdim=True).expand_as(v) for k, v in local.items()}
        elif kind == "empty":
            want = local
        else:
            want = {k: mix(uniform_W(), v) for k, v in local.items()}
        assert_close(params(model), want)


def test_dynamic_weights_from_a_schedule():
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model)
    schedule = T.one_peer_exponential_two(N)
    for t in range(3):
        W = next(schedule).weights
        opt.src_weights = W
        x = backward(model, t)
        g = grads(model)
        opt.step()
        assert_close(params(model), {k: mix(W.to_dense(), x[k] - LR * g[k]) for k in x})
    # per-agent dicts, BlueFog style: each agent averages with its predecessor only
    opt.self_weight = 0.5
    opt.src_weights = fs.local(lambda r: {(r - 1) % N: 0.5})
    opt.dst_weights = fs.local(lambda r: [(r + 1) % N])
    fs.set_topology(T.ring_graph(N))
    x = backward(model)
    g = grads(model)
    opt.step()
    W = (np.eye(N) + np.roll(np.eye(N), -1, axis=1)) / 2  # W[i, i-1] = 1/2
    assert_close(params(model), {k: mix(W, x[k] - LR * g[k]) for k in x})


@pytest.mark.parametrize("machine_weights", [False, True])
def test_atc_hierarchical_mixes_machine_averages(machine_weights):
    fs.init(backend="sim", size=N, local_size=2)  # two machines of two agents
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, communication_type="hierarchical"
    )
    assert opt.communication_type.value == "hierarchical_neighbor_allreduce"
    Wm = np.full((2, 2), 0.5)  # the exponential-2 graph over 2 machines, uniform
    if machine_weights:  # machine m keeps 0.75 of its own average, takes 0.25 of the other
        opt.self_weight = 0.75
        opt.src_machine_weights = fs.local(lambda r: {1 - r // 2: 0.25})
        Wm = np.array([[0.75, 0.25], [0.25, 0.75]])
    x = backward(model)
    g = grads(model)
    opt.step()
    W = np.kron(Wm, np.full((2, 2), 0.5))  # agent i: sum_m Wm[i // 2, m] * machine m's mean
    assert_close(params(model), {k: mix(W, x[k] - LR * g[k]) for k in x})


# -- broadcasts ---------------------------------------------------------------------------
def test_broadcast_parameters_copies_the_root_agent():
    model = fo.replicate(net)  # agent r starts from net(r)
    root = params(model)
    fo.broadcast_parameters(model.state_dict(), root_rank=2)
    for k, v in params(model).items():
        torch.testing.assert_close(v, root[k][2].expand_as(v), rtol=0, atol=0)
    other = fo.replicate(net)
    fo.broadcast_parameters(other.named_parameters(), root_rank=1)
    fo.broadcast_parameters(other, root_rank=1)  # a module: its state dict
    assert torch.equal(other[0].bias[0], other[0].bias[3])
    with pytest.raises(ValueError, match=f"root_rank={N} is out of range"):
        fo.broadcast_parameters(model.state_dict(), root_rank=N)
    with pytest.raises(TypeError, match="params must be a module, .* not one tensor"):
        fo.broadcast_parameters(model[0].weight)
    with pytest.raises(TypeError, match="broadcast_parameters: w is a float, not a tensor"):
        fo.broadcast_parameters({"w": 1.0})
    # an unstacked tensor in simulation
    with pytest.raises(ValueError, match=r"x has 3 entries on its leading \(agent\) axis"):
        fo.broadcast_parameters({"w": torch.zeros(3, 2)})


def test_broadcast_optimizer_state_copies_per_agent_state():
    model = fo.replicate(net)
    inner = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    opt = fo.DistributedAdaptThenCombineOptimizer(inner, model)
    fo.broadcast_optimizer_state(opt, root_rank=0)  # no state yet: nothing to do
    backward(model)
    opt.step()
    bufs = {p: inner.state[p]["momentum_buffer"].clone() for p in model.parameters()}
    fo.broadcast_optimizer_state(opt, root_rank=3)
    for p, buf in bufs.items():
        torch.testing.assert_close(inner.state[p]["momentum_buffer"], buf[3].expand_as(buf))
    inner.state[model[0].bias]["momentum_buffer"] = None  # robust to None-valued state
    fo.broadcast_optimizer_state(inner, root_rank=1)
    with pytest.raises(TypeError, match="optimizer must be a torch optimizer"):
        fo.broadcast_optimizer_state(model)


# -- errors and integration ---------------------------------------------------------------
def test_bad_arguments_are_refused():
    model = fo.replicate(net)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    ATC = fo.DistributedAdaptThenCombineOptimizer
    with pytest.raises(TypeError, match=r"optimizer must be a torch\.optim\.Optimizer"):
        ATC(model, model)
    with pytest.raises(TypeError, match=r"model must be an nn\.Module"):
        ATC(sgd, sgd)
    with pytest.raises(ValueError, match="none of model's parameters"):
        ATC(sgd, net())
    with pytest.raises(ValueError, match="communication_type must be one of"):
        ATC(sgd, model, communication_type="gossip")
    with pytest.raises(ValueError, match="supports communication_type"):
        fo.DistributedGradientAllreduceOptimizer(sgd, model, "neighbor_allreduce")
    for bad, exc in [(0, ValueError), (1.5, TypeError), (True, TypeError)]:
        with pytest.raises(exc, match="num_steps_per_communication"):
            ATC(sgd, model, num_steps_per_communication=bad)
    with pytest.raises(TypeError, match="overlap must be a bool or None"):
        ATC(sgd, model, overlap="yes")
    opt = ATC(sgd, model)
    with pytest.raises(TypeError, match="optimizer is already wrapped"):
        ATC(opt, model)
    with pytest.raises(NotImplementedError, match="before wrapping"):
        opt.add_param_group({"params": [torch.zeros(N, 2, requires_grad=True)]})
    with pytest.raises(ValueError, match=r"positional argument 0 has shape \(3, 5\)"):
        model(torch.zeros(3, 5))
    with pytest.raises(TypeError, match=r"model must be an nn\.Module or a function"):
        fo.replicate(3)
    with pytest.raises(TypeError, match=r"model\(0\) must return an nn.Module"):
        fo.replicate(lambda r: None)
    with pytest.raises(TypeError, match="per_agent.*fn must be a function"):
        fo.per_agent(None)
    with pytest.raises(ValueError, match="differ in structure"):
        fo.AgentModel([nn.Linear(2, 2), nn.Linear(3, 2)])


def test_backward_twice_before_step_is_an_error_with_hooks():
    model = fo.replicate(net)
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR), model, overlap=True
    )
    backward(model)
    with pytest.raises(RuntimeError, match="computed 2 times before step"):
        backward(model)
    model.zero_grad()
    backward(model)  # recovers: the next step works
    opt.step()
    opt.remove_hooks()
    assert opt._hooks == []


def test_schedulers_state_dicts_and_closures_go_to_the_wrapped_optimizer():
    model = fo.replicate(net)
    inner = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    opt = fo.DistributedAdaptThenCombineOptimizer(inner, model)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = batch(0)

    def closure():
        opt.zero_grad()
        loss = fo.per_agent(F.cross_entropy)(model(x), y).sum()
        loss.backward()
        return loss

    assert float(opt.step(closure).detach()) > 0
    sched.step()
    assert inner.param_groups[0]["lr"] == pytest.approx(LR / 2)
    state = opt.state_dict()
    assert state == inner.state_dict() or state.keys() == inner.state_dict().keys()
    opt.load_state_dict(state)
    backward(model)
    opt.step()  # after load_state_dict replaced the optimizer's groups, steps stay local
    assert "DistributedAdaptThenCombineOptimizer(SGD" in repr(opt)


def test_example_reaches_95_percent_test_accuracy(capsys):
    """The simulated example, all three methods on 8 agents (speed: benchmarks/bench_torch.py)."""
    example = environment.load_example("decentralized_training")
    results = example.main(["--no-progress"])
    printed = capsys.readouterr().out
    assert table(printed, label_columns=1).header.split()[:3] == ["method", "epoch", "loss"]
    rows = [line.split() for line in printed.splitlines()]
    last_epoch = [row[0] for row in rows if len(row) == 5 and row[1] == "15"]
    assert last_epoch == list(example.METHODS) and "final test accuracy" in printed
    assert printed.splitlines()[-1].startswith("after 15 epochs the mean test accuracy is")
    for method in example.METHODS:
        assert results[method]["accuracy"][-1] >= 0.95, (method, results[method])
        assert results[method]["worst_accuracy"][-1] >= 0.94, method
    try:
        import sklearn  # noqa: F401
    except ImportError:
        assert results["source"].startswith("synthetic")
    else:
        assert results["source"] == "digits"


def test_public_namespace():
    assert sorted(fo.__all__) == [
        "AgentModel",
        "CommunicationType",
        "DistributedAdaptThenCombineOptimizer",
        "DistributedAdaptWithCombineOptimizer",
        "DistributedGradientAllreduceOptimizer",
        "DistributedOptimizer",
        "DistributedPushSumOptimizer",
        "DistributedWinPutOptimizer",
        "broadcast_optimizer_state",
        "broadcast_parameters",
        "is_simulated",
        "per_agent",
        "replicate",
    ]
    assert all(hasattr(fo, name) for name in fo.__all__)
