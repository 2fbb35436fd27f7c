"""The same op tests on the simulator (in process) and under mpiexec (1-4 processes)."""

from __future__ import annotations

import pytest

import fogsim as fs
from tests import _jobs, dual_cases

SIZES = [1, 2, 3, 4]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", dual_cases.CASES)
def test_simulated(case, n, monkeypatch):
    monkeypatch.setenv("FOGSIM_BACKEND", "sim")
    monkeypatch.setenv("FOGSIM_SIZE", str(n))
    try:
        getattr(dual_cases, case)()
    finally:
        fs.shutdown()


@pytest.fixture(scope="session")
def mpi_job():
    """The MPI job of n processes that ran every case (one job per n, run once)."""
    cache: dict[int, _jobs.Job] = {}

    def get(n: int) -> _jobs.Job:
        _jobs.environment.require_mpiexec()
        if n not in cache:
            # fogrun selects the MPI backend even for one process and sets what the MPI needs
            cache[n] = _jobs.fogrun(n, "-m", "tests.dual_driver", timeout=200)
        return cache[n]

    return get


@pytest.mark.mpi
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", dual_cases.CASES)
def test_mpi(case, n, mpi_job):
    mpi_job(n).case(case)
