"""One script with the clock, simulated (virtual time) and under MPI (real time).

This file is also the job: ``fogrun [--sim] -np 2 python -m tests.test_clock_mpi OUT.json``.
Rank 1 is twice as slow (the platform's speed); each rank computes 50 ms of work, then
all-reduces: in simulation the clocks are the model's, under MPI ``compute`` sleeps and
the clocks read real time, and in both the slow rank holds the other back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import _jobs

WORK = 0.05  # seconds of computation at speed 1


def job(out: str) -> None:
    import fogsim as fs
    from fogsim import algorithms as A
    from fogsim import clock as C

    fs.init()
    n = fs.size()
    platform = C.Platform.uniform(n, latency=1e-5, bandwidth=1e9, speed=[1.0] + [0.5] * (n - 1))
    C.start(platform)
    charged = C.compute(WORK)
    after_compute = np.asarray(fs.global_view(np.atleast_1d(C.now()))).ravel()
    fs.allreduce(fs.local(lambda r: np.ones(4)))
    after_allreduce = np.asarray(fs.global_view(np.atleast_1d(C.now()))).ravel()
    problem = A.LeastSquares.random(10, 3, seed=0)
    result = A.dgd(problem, 0.02, 3)
    if fs.is_main_process():
        Path(out).write_text(
            json.dumps(
                {
                    "charged": np.atleast_1d(charged).tolist(),
                    "after_compute": after_compute.tolist(),
                    "after_allreduce": after_allreduce.tolist(),
                    "time": result.history["time"].tolist(),
                }
            )
        )
    fs.shutdown()


def run(tmp_path: Path, mode: tuple[str, ...]) -> dict:
    out = tmp_path / (("-".join(m.strip("-") for m in mode) or "mpi") + ".json")
    _jobs.fogrun(2, "-m", "tests.test_clock_mpi", str(out), options=mode, timeout=90).check()
    return json.loads(out.read_text())


def test_the_clock_is_virtual_when_simulated(tmp_path):
    got = run(tmp_path, ("--sim",))
    np.testing.assert_allclose(got["after_compute"], [WORK, 2 * WORK])
    ring = 2 * (1e-5 + 0.5 * 32 / 1e9)  # 2 agents: one step each way, twice (Eq. 1)
    np.testing.assert_allclose(got["after_allreduce"], [2 * WORK + ring] * 2, rtol=1e-12)
    assert got["time"][0] == 0 and np.all(np.diff(got["time"]) > 0)


def test_the_sharded_simulator_keeps_the_same_clocks(tmp_path):
    _jobs.environment.require_mpiexec()
    sharded, whole = run(tmp_path, ("--sim", "--shards", "2")), run(tmp_path, ("--sim",))
    assert sharded["charged"] == whole["charged"][:1]  # the main process's block: agent 0
    del sharded["charged"], whole["charged"]
    assert sharded == whole  # every clock and the history's times, bit for bit


def test_the_same_script_under_mpi_reads_real_time(tmp_path):
    _jobs.environment.require_mpiexec()
    got = run(tmp_path, ())
    assert got["charged"] == [WORK]  # rank 0's share: its own speed
    fast, slow = got["after_compute"]
    assert fast >= WORK and slow >= 2 * WORK  # each slept its share, at its own speed
    # the all-reduce waits for the slow rank: both clocks pass its computation
    assert min(got["after_allreduce"]) >= 2 * WORK
    # wall-clock seconds since the run began (the metrics themselves take a little)
    assert got["time"][0] >= 0 and np.all(np.diff(got["time"]) > 0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        pytest.exit("usage: python -m tests.test_clock_mpi OUT.json")
    job(sys.argv[1])
