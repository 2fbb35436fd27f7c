"""fogsim.algorithms and the torch optimizer replicas sharded: one process's numbers.

This file is also the job: ``fogrun -np P python -m tests.test_sim_sharded_algorithms OUT``.
Each process runs :func:`algorithms` and :func:`training` twice: in the world
``fs.init(backend="sim", size=N)`` starts (sharded over the P launched processes) and in a
one-process simulator of the same N agents (``fs.Context``, made by hand, never sharded),
then compares its block's rows. The iterates (neighbour averaging and per-agent arithmetic
only) must agree bit for bit; the metrics, whose sums are added block by block, to 1e-12
relative, and they must be the same on every process. The window optimizer must refuse
with the sharded backend's ``NotImplementedError``.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim import topology as T
from tests import _jobs
from tests.test_algorithms import hub_digraph, random_push_schedule

WORLDS = (64, 50)
#: Relative agreement of the metrics (sums added in another order).
RTOL = 1e-12


def algorithms(n: int) -> dict[str, A.Result]:
    """Every reference algorithm, written once for the stacked agents of the current world."""
    fs.set_topology(T.exponential_two_graph(n))
    x0 = fs.local(lambda r: np.random.default_rng(r).standard_normal(3))
    problem = A.LeastSquares.random(m=6, d=3, seed=2)
    return {
        "consensus": A.consensus(x0, 12),
        "consensus_one_peer": A.consensus(x0, 5, T.one_peer_exponential_two(n)),
        "push_sum": A.push_sum(x0, 15, A.push_weights(hub_digraph(n))),
        "dgd_atc": A.dgd(problem, 0.02, 15),
        "dgd_awc": A.dgd(problem, 0.02, 15, form="awc", schedule=T.one_peer_exponential_two(n)),
        "exact_diffusion": A.exact_diffusion(problem, 0.03, 20, schedule=T.ring_graph(n)),
        "gradient_tracking": A.gradient_tracking(problem, 0.03, 20),
        "push_diging": A.push_diging(problem, 0.03, 20, random_push_schedule(n, 0)),
        "diffusion_lms": A.diffusion_lms(A.MovingTarget(3, batch=2, seed=1), 0.05, 15),
        "diffusion_lms_cta": A.diffusion_lms(A.MovingTarget(3, seed=4), 0.05, 10, form="cta"),
        "problem": A.Result(  # what a problem reduces: as metrics (sums in another order)
            x0,
            {"solution": problem.solution()[0], "lipschitz": np.array([problem.lipschitz()])},
        ),
    }


def training(n: int) -> dict[str, np.ndarray]:
    """Three steps of a stacked-replica training (fogsim.optim, as the README writes it),
    then the last agent's optimizer state given to every agent."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from fogsim import optim as fo

    torch.set_default_dtype(torch.float64)
    fs.set_topology(T.exponential_two_graph(n))

    def net(r: int) -> nn.Module:
        torch.manual_seed(100 + r)
        return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))

    def inputs(t: int, r: int) -> torch.Tensor:
        return torch.randn(6, 5, generator=torch.Generator().manual_seed(t + r))

    out: dict[str, np.ndarray] = {}
    for name, wrapper in (
        ("atc", fo.DistributedAdaptThenCombineOptimizer),
        ("push_sum", fo.DistributedPushSumOptimizer),
    ):
        model = fo.replicate(net)
        inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        opt = wrapper(inner, model)
        fo.broadcast_parameters(model.state_dict(), root_rank=n - 1)
        for t in range(3):
            x = fs.local(functools.partial(inputs, t))
            y = fs.local(
                lambda r: torch.randint(0, 3, (6,), generator=torch.Generator().manual_seed(r))
            )
            opt.zero_grad()
            fo.per_agent(F.cross_entropy)(model(x), y).sum().backward()
            opt.step()
        fo.broadcast_optimizer_state(opt, root_rank=n - 1)
        for key, p in model.named_parameters():
            out[f"{name}.{key}"] = p.detach().numpy().copy()
            momentum = opt.state[p]["momentum_buffer"]
            out[f"{name}.{key}.momentum"] = momentum.numpy().copy()
        opt.remove_hooks()
    model = fo.replicate(net)
    try:
        fo.DistributedWinPutOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model)
    except NotImplementedError as exc:
        out["win_put_refused"] = np.array(float("win_create" in str(exc)))
    return out


def per_agent_scalars() -> dict[str, np.ndarray]:
    """Reductions of one number per agent (stacked ``(rows,)``), as the metrics take them."""
    x = fs.local(lambda r: 0.5 + r)
    return {
        "allreduce": np.asarray(fs.allreduce(x)),
        "allreduce_sum": np.asarray(fs.allreduce(x, average=False)),
    }


def relative(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference relative to the larger of the two values (0 where both are 0)."""
    scale = np.maximum(np.abs(got), np.abs(want))
    diff = np.abs(got - want)
    return float(np.max(np.where(scale > 0, diff / np.where(scale > 0, scale, 1), 0), initial=0))


def compare(n: int) -> dict[str, Any]:
    """Run the algorithms sharded and in one process; report this process's comparison."""
    fs.init(backend="sim", size=n, seed=1)
    lo, hi = int(fs.rank()[0]), int(fs.rank()[-1]) + 1
    sharded, trained = algorithms(n), training(n)
    scalars = per_agent_scalars()
    with fs.Context(backend="sim", size=n, seed=1):
        whole, whole_trained = algorithms(n), training(n)
        whole_scalars = per_agent_scalars()
    report: dict[str, Any] = {"block": [lo, hi], "held": {}, "x_same": {}, "metrics": {}}
    histories = {}
    for name, result in sharded.items():
        want = whole[name]
        x = np.asarray(result.x)
        report["held"][name] = x.shape[0]
        report["x_same"][name] = x.shape == want.x[lo:hi].shape and bool(
            np.array_equal(x, want.x[lo:hi])
        )
        for key in ("z", "p", "u", "v", "y", "psi"):
            if key in result.state:
                same = np.array_equal(result.state[key], want.state[key][lo:hi])
                report["x_same"][f"{name}.{key}"] = bool(same)
        assert result.history.keys() == want.history.keys(), name
        for key, values in result.history.items():
            report["metrics"][f"{name}.{key}"] = relative(values, want.history[key])
            histories[f"{name}.{key}"] = np.asarray(values).tolist()
    report["histories"] = histories
    report["trained"] = {
        key: bool(np.array_equal(value, whole_trained[key][lo:hi] if value.ndim else value))
        for key, value in trained.items()
    }
    report["scalars"] = {
        key: relative(value, whole_scalars[key][lo:hi]) for key, value in scalars.items()
    }
    report["win_put_refused"] = float(trained.get("win_put_refused", 0.0))
    fs.shutdown()
    return report


def job(out: str) -> None:
    from mpi4py import MPI

    reports = {f"{n}": compare(n) for n in WORLDS}
    gathered = MPI.COMM_WORLD.gather(reports, root=0)
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(out).write_text(json.dumps(gathered))


@pytest.mark.mpi
@pytest.mark.parametrize("parts", [2, 4])
def test_algorithms_and_optimizers_sharded_give_one_processs_numbers(tmp_path, parts):
    pytest.importorskip("torch")
    out = tmp_path / "report.json"
    _jobs.fogrun(parts, "-m", "tests.test_sim_sharded_algorithms", str(out), timeout=120).check()
    reports = json.loads(out.read_text())
    assert len(reports) == parts
    for n in WORLDS:
        mine = [r[str(n)] for r in reports]
        for report in mine:
            lo, hi = report["block"]
            assert set(report["held"].values()) == {hi - lo} and hi - lo < n  # only the block
            wrong = [name for name, ok in report["x_same"].items() if not ok]
            assert not wrong, f"N={n}, block {lo}..{hi}: iterates differ: {wrong}"
            off = {k: v for k, v in report["metrics"].items() if v > RTOL}
            assert not off, f"N={n}, block {lo}..{hi}: metrics differ: {off}"
            wrong = [name for name, ok in report["trained"].items() if not ok]
            assert not wrong, f"N={n}, block {lo}..{hi}: parameters differ: {wrong}"
            assert report["win_put_refused"] == 1.0
            assert max(report["scalars"].values()) <= RTOL
            assert report["histories"] == mine[0]["histories"]  # the same on every process
        assert len(mine[0]["x_same"]) >= 11 and len(mine[0]["trained"]) >= 17


if __name__ == "__main__":
    job(sys.argv[1])
