"""fogsim.optim under fogrun: every wrapper gives the simulator's parameters to 1e-9.

Both distributed backends are checked, MPI and torch.distributed (gloo, selected with
``FOGSIM_BACKEND=torch``). This file is also the job: from the repository root, ``fogrun
-np 4 python -m tests.test_optim_mpi OUT.npz`` (or ``job(OUT, backend="sim", size=4)``) trains
a small float64 MLP for a few steps with each wrapper (SGD with momentum or Nesterov, Adam; one
run mixes hierarchically, on two machines of two agents),
starting from per-agent initializations equalized by broadcast_parameters, and the main
process saves every agent's parameters. Distributed, the wrappers overlap communication
with the backward pass from hooks; simulated, they do the whole step in ``step()``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests import _jobs

STEPS = 6


def job(out: str, **world) -> None:
    """Train with every wrapper; save the results on the main process.

    ``world``: :func:`fogsim.init`'s arguments (none: the world fogrun made).
    """
    import torch

    import fogsim as fs

    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _train_all(out, world)
    finally:
        torch.set_default_dtype(default_dtype)
        fs.shutdown()


def _train_all(out: str, world: dict) -> None:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import fogsim as fs
    from fogsim import optim as fo
    from fogsim import topology as T

    fs.init(topology=T.exponential_two_graph, **world)
    n = fs.size()
    one_peer = T.one_peer_exponential_two(n)

    def net(r: int) -> nn.Module:
        torch.manual_seed(100 + r)
        return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))

    def data(r: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1000 * r + t)
        return torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)

    def train(wrapper, make_opt, schedule=None, broadcast_state=False, **options):
        model = fo.replicate(net)
        fo.broadcast_parameters(model.state_dict(), root_rank=1)
        inner = make_opt(model.parameters())
        opt = wrapper(inner, model, **options)
        loss_fn = fo.per_agent(F.cross_entropy)
        for t in range(STEPS):
            if schedule == "one-peer":
                opt.src_weights = next(one_peer).weights
            if schedule == "periodic-allreduce":
                opt.communication_type = "allreduce" if t % 3 == 2 else "neighbor_allreduce"
            x = fs.local(lambda r, t=t: data(r, t)[0])
            y = fs.local(lambda r, t=t: data(r, t)[1])
            opt.zero_grad()
            fo.per_agent(lambda v: v)(loss_fn(model(x), y)).sum().backward()
            opt.step()
            if broadcast_state and t == 1:
                if broadcast_state == "with None":  # e.g. a buffer not made yet
                    inner.state[next(iter(model.parameters()))]["momentum_buffer"] = None
                fo.broadcast_optimizer_state(opt, root_rank=2 % n)
        if isinstance(opt, fo.DistributedWinPutOptimizer):
            opt.free_windows()
        return {name: fs.global_view(p.detach()).numpy() for name, p in model.named_parameters()}

    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)  # noqa: E731
    nesterov = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)  # noqa: E731
    adam = lambda ps: torch.optim.Adam(ps, lr=0.01)  # noqa: E731
    runs = {
        "atc_sgd": lambda: train(fo.DistributedAdaptThenCombineOptimizer, sgd),
        "atc_adam_one_peer": lambda: train(
            fo.DistributedAdaptThenCombineOptimizer, adam, schedule="one-peer"
        ),
        "atc_periodic_allreduce": lambda: train(
            fo.DistributedAdaptThenCombineOptimizer, sgd, schedule="periodic-allreduce"
        ),
        "atc_every_2": lambda: train(
            fo.DistributedAdaptThenCombineOptimizer,
            adam,
            num_steps_per_communication=2,
            broadcast_state=True,
        ),
        "awc_nesterov": lambda: train(
            fo.DistributedAdaptWithCombineOptimizer, nesterov, broadcast_state="with None"
        ),
        "gradient_allreduce_adam": lambda: train(fo.DistributedGradientAllreduceOptimizer, adam),
        "push_sum_sgd": lambda: train(fo.DistributedPushSumOptimizer, sgd),
        "atc_hierarchical": lambda: train(
            fo.DistributedAdaptThenCombineOptimizer, sgd, communication_type="hierarchical"
        ),
    }
    saved = {}
    for run_name, run in runs.items():
        for name, value in run().items():
            saved[f"{run_name}.{name}"] = value
    # asynchronous under MPI (no two runs alike): only that it runs and stays finite
    try:
        for name, value in train(fo.DistributedWinPutOptimizer, sgd).items():
            saved[f"async/win_put.{name}"] = value
    except ValueError as exc:  # e.g. the torch backend, which has no window ops (yet)
        if "no window ops" not in str(exc):
            raise
    if fs.is_main_process():
        np.savez(out, **saved)


def fogrun(tmp_path: Path, backend: str, n: int) -> dict[str, np.ndarray]:
    out = tmp_path / f"optim-{backend}-{n}.npz"
    _jobs.fogrun(
        n,
        "-m",
        "tests.test_optim_mpi",
        str(out),
        options=("--local-size", "2"),
        timeout=120,
        env={"FOGSIM_BACKEND": backend},
    ).check()
    with np.load(out) as saved:
        return dict(saved)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict[str, np.ndarray]:
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("optim") / "sim.npz"
    job(str(out), backend="sim", size=4, local_size=2)
    with np.load(out) as saved:
        return dict(saved)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_distributed_runs_give_the_simulators_parameters(tmp_path, simulated, backend):
    _jobs.environment.require_mpiexec()
    if backend == "torch":
        import fogsim.backends.torchdist  # noqa: F401 - fails the test when it cannot import
    distributed = fogrun(tmp_path, backend, 4)
    synchronous = {key for key in simulated if not key.startswith("async/")}
    assert set(distributed) - synchronous <= set(simulated) - synchronous
    assert synchronous <= set(distributed)
    assert len({key.split(".")[0] for key in synchronous}) == 8
    if backend == "mpi":  # it has window ops
        assert set(distributed) == set(simulated)
    for key in distributed:
        assert simulated[key].shape[0] == 4
        if key.startswith("async/"):
            assert np.all(np.isfinite(distributed[key])), key
            continue
        np.testing.assert_allclose(distributed[key], simulated[key], rtol=0, atol=1e-9, err_msg=key)
    worst = max(np.abs(distributed[k] - simulated[k]).max() for k in synchronous)
    print(f"{backend}: largest difference from the simulator: {worst:.3g}")
    # the agents really differ (mixing, not a copy), except where gradients are averaged
    assert simulated["atc_sgd.0.weight"].std(axis=0).max() > 1e-4
    ga = simulated["gradient_allreduce_adam.0.weight"]
    np.testing.assert_allclose(ga, np.broadcast_to(ga[0], ga.shape), atol=1e-15)


if __name__ == "__main__":
    job(sys.argv[1])
