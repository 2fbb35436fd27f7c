"""BlueFog's environment variables, read as BlueFog documents them (``bf.init()``)."""

from __future__ import annotations

import sys

import pytest

from tests import _jobs

MACHINES = """
import sys
import torch
import bluefog.torch as bf
from bluefog.common import topology_util

bf.init()
bf.set_machine_topology(topology_util.ExponentialGraph(bf.machine_size()))
y = bf.hierarchical_neighbor_allreduce(torch.full((2,), float(bf.rank())))
sys.stdout.write(f"{bf.rank()} {bf.local_size()} {bf.local_rank()} {bf.machine_size()} "
                 f"{bf.machine_rank()} {y.tolist()}\\n")
"""


def _rows(stdout: str) -> list[list[str]]:
    return sorted(line.split(" ", 5) for line in stdout.splitlines() if line.strip())


@pytest.mark.mpi
def test_nodes_per_machine_sets_the_machine_layout_under_mpi(tmp_path):
    job = _jobs.fogrun_script(tmp_path, MACHINES, 4, options=("--bluefog",), timeout=120,
                              env=_jobs.job_env(BLUEFOG_NODES_PER_MACHINE="2"))  # fmt: skip
    job.check()
    # machines {0, 1} and {2, 3}; with two machines each averages the two machine means
    assert _rows(job.stdout) == [[str(r), "2", str(r % 2), "2", str(r // 2), "[1.5, 1.5]"]
                                 for r in range(4)], job.describe()  # fmt: skip


def test_nodes_per_machine_as_spmd_agents(tmp_path):
    env = _jobs.job_env(BLUEFOG_NODES_PER_MACHINE="2")
    job = _jobs.fogrun_script(tmp_path, MACHINES, 4, options=("--bluefog", "--spmd"),
                              timeout=120, env=env)  # fmt: skip
    job.check()
    assert [row[:5] for row in _rows(job.stdout)] == [
        [str(r), "2", str(r % 2), "2", str(r // 2)] for r in range(4)], job.describe()  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize("value", ["two", "0", "3"])
def test_a_bad_nodes_per_machine_is_one_clear_error(tmp_path, value):
    job = _jobs.fogrun_script(tmp_path, MACHINES, 4, options=("--bluefog",), timeout=120,
                              env=_jobs.job_env(BLUEFOG_NODES_PER_MACHINE=value))  # fmt: skip
    assert job.returncode not in (0, 124), job.describe()
    assert "fogrun: ranks 0-3: ValueError:" in job.stderr, job.describe()
    assert ("BLUEFOG_NODES_PER_MACHINE" if value != "3" else "local_size") in job.stderr, \
        job.describe()  # fmt: skip
    assert job.stderr.count("Traceback") == 1, job.stderr


def test_fogsim_local_size_wins(monkeypatch):
    from fogsim.compat.bluefog import _api

    monkeypatch.setenv("BLUEFOG_NODES_PER_MACHINE", "2")
    assert _api._nodes_per_machine() == 2
    monkeypatch.setenv("FOGSIM_LOCAL_SIZE", "4")
    assert _api._nodes_per_machine() is None
    assert sys.modules["fogsim.compat.bluefog._api"] is _api
