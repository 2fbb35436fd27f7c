"""``fogrun --check-modes`` on scripts a user writes, run as the user runs them: the console
script ``fogrun`` next to this Python, its exit status and what it prints.

* replicas built apart and then broadcast from the root (``fo.replicate`` and
  ``fo.broadcast_parameters``, as the training guide starts every replica alike) print the
  same numbers in every mode, and the checker agrees: a broadcast's non-root inputs are not
  compared; a root whose value differs between the modes is still named;
* BlueFog code (a scalar rank: it cannot run stacked) is checked as SPMD agents against an
  MPI run with ``fogrun --bluefog --check-modes``, naming the first op and line that differ.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests import _jobs, environment

ROOT = _jobs.ROOT
FOGRUN = os.path.join(os.path.dirname(sys.executable), "fogrun")

TORCH_REPLICAS = """
import torch
import torch.nn.functional as F
from torch import nn

import fogsim as fs
from fogsim import optim as fo

fs.init(size=8, seed=0)
torch.manual_seed(0)


def make_model():
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))


w_true = torch.arange(5.0).reshape(5, 1)
x = fs.local(lambda r: torch.randn(32, 5, generator=torch.Generator().manual_seed(r)))
y = x @ w_true
model = fo.replicate(lambda r: make_model())  # every replica drawn on its own
sgd = torch.optim.SGD(model.parameters(), lr=0.05)
opt = fo.DistributedAdaptThenCombineOptimizer(sgd, model)
fo.broadcast_parameters(model.state_dict(), root_rank=0)  # every replica starts as agent 0's
for _ in range(10):
    loss = fo.per_agent(F.mse_loss)(model(x), y)
    opt.zero_grad()
    loss.sum().backward()
    opt.step()
mean = fs.allreduce(loss.detach())
if fs.is_main_process():
    print(f"mean loss {float(mean.reshape(-1)[0]):.12e}")
fs.shutdown()
"""

# Per-agent numpy values that differ by mode on every agent but the root (numpy's global
# generator: one stream for the stacked agents, each SPMD agent's own stream), then broadcast.
NUMPY_BROADCAST = """
import numpy as np

import fogsim as fs

fs.init(size=4)
np.random.seed(0)
x = fs.local(lambda r: np.random.rand(3))
x = fs.broadcast(x, root_rank=ROOT)
for _ in range(3):
    x = fs.neighbor_allreduce(x)
view = fs.global_view(x)
if fs.is_main_process():
    print("every agent holds", view[0])
fs.shutdown()
"""


def _check(path, n: int, *options: str, timeout: float = 300) -> _jobs.Job:
    return _jobs.run(
        [FOGRUN, *options, "--check-modes", "-np", str(n), "python", str(path)], timeout=timeout
    )


def _fogrun(path, n: int, *options: str) -> str:
    job = _jobs.run([FOGRUN, *options, "-np", str(n), "python", str(path)], timeout=300)
    return job.check().stdout


def test_replicas_broadcast_from_the_root_agree_in_every_mode(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TORCH_REPLICAS)
    job = _check(path, 8)
    assert job.returncode == 0, job.describe()
    assert "ops agree, simulated and as 8 SPMD agents" in job.stdout
    # and the script does print the same numbers in every mode
    environment.require_mpiexec()
    printed = {_fogrun(path, 8, *options) for options in (("--sim",), ("--spmd",), ())}
    assert len(printed) == 1 and printed.pop().startswith("mean loss"), printed


def test_a_broadcast_of_per_agent_numpy_values_agrees(tmp_path):
    path = tmp_path / "bcast.py"
    path.write_text(NUMPY_BROADCAST.replace("ROOT", "0"))
    job = _check(path, 4)
    assert job.returncode == 0, job.describe()
    assert "fogsim check-modes: 4 ops agree, simulated and as 4 SPMD agents" in job.stdout


def test_a_root_whose_value_differs_between_the_modes_is_named(tmp_path):
    # agent 2 draws numbers 7-9 of the one stream stacked, the first 3 of its own in SPMD
    path = tmp_path / "bcast.py"
    path.write_text(NUMPY_BROADCAST.replace("ROOT", "2"))
    job = _check(path, 4)
    assert job.returncode == 1, job.describe()
    assert f"op 1 (broadcast) at {path}:9: input of agent 2 differs by up to" in job.stderr


# -- BlueFog code: SPMD agents against an MPI run -----------------------------------------
BLUEFOG_EXAMPLES = {
    "average_consensus.py": ("--max-iters", "20"),
    "push_sum_least_squares.py": ("--max-iters", "20"),
    "synthetic_mnist.py": ("--epochs", "1"),
}

# SPMD agents are threads of one process and share imported modules; MPI ranks do not. A
# helper module's list that every agent appends to is one list as SPMD agents.
SHARED_STATE_HELPER = """
seen = []


def batch_size(rank):
    seen.append(rank)
    return float(len(seen))
"""
SHARED_STATE = """
import bluefog.torch as bf
import torch
from helper import batch_size

bf.init()
x = torch.full((3,), float(bf.rank()))
x = bf.neighbor_allreduce(x)
scale = torch.tensor([batch_size(bf.rank())])
total = bf.allreduce(scale, average=False)
if bf.rank() == 0:
    print("total", float(total))
"""


def test_bluefog_examples_agree_as_spmd_agents_and_under_mpi():
    environment.require_mpiexec()
    for name, args in BLUEFOG_EXAMPLES.items():
        path = ROOT / "examples" / "bluefog" / name
        job = _jobs.run(
            [FOGRUN, "--bluefog", "--check-modes", "-np", "4", "python", str(path), *args],
            timeout=300,
        )
        assert job.returncode == 0, job.describe()
        assert "ops agree, as 4 SPMD agents and as 4 MPI processes" in job.stdout, name


def test_bluefog_code_that_differs_under_mpi_is_named_op_and_line(tmp_path):
    environment.require_mpiexec()
    (tmp_path / "helper.py").write_text(SHARED_STATE_HELPER)
    path = tmp_path / "script.py"
    path.write_text(SHARED_STATE)
    job = _check(path, 4, "--bluefog")
    assert job.returncode == 1, job.describe()
    assert f"op 2 (allreduce) at {path}:10: input of agent" in job.stderr, job.stderr


def test_check_modes_compares_any_two_modes_from_python(tmp_path):
    import fogsim as fs

    environment.require_mpiexec()
    path = tmp_path / "bcast.py"
    path.write_text(NUMPY_BROADCAST.replace("ROOT", "0"))
    report = fs.check_modes(path, 4, modes=("sim", "mpi"))
    assert report.ok and report.ops == 4, str(report)
    assert str(report) == "fogsim check-modes: 4 ops agree, simulated and as 4 MPI processes"
    # the script's init(size=4) wins in simulation: the report says so
    report = fs.check_modes(path, 3, modes=("sim", "mpi"))
    assert "the simulated run has 4 agents, not 3" in str(report), str(report)
    with pytest.raises(ValueError, match="modes must be two different modes of"):
        fs.check_modes(path, 3, modes=("sim", "sim"))
    with pytest.raises(ValueError, match="modes must be two different modes of"):
        fs.check_modes(path, 3, modes=("sim", "gpu"))
