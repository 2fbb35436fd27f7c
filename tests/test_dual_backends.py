"""The same op tests on the simulator (in process) and under mpiexec (1-4 processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dual_cases
import pytest

import fogsim as fs

HERE = Path(__file__).parent
SIZES = [1, 2, 3, 4]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", dual_cases.CASES)
def test_simulated(case, n, monkeypatch):
    monkeypatch.setenv("FOGSIM_BACKEND", "sim")
    monkeypatch.setenv("FOGSIM_SIZE", str(n))
    try:
        getattr(dual_cases, case)()
    finally:
        fs.shutdown()


def _run_mpi(n: int) -> dict[str, dict]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    for var in ("FOGSIM_BACKEND", "FOGSIM_SIZE"):
        env.pop(var, None)
    # fogrun selects the MPI backend even for one process and sets what the MPI needs
    cmd = [sys.executable, "-m", "fogsim.run", "-np", str(n), "--timeout", "200", "python",
           str(HERE / "dual_driver.py")]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    results = {}
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["case"]] = record["failed"]
    if run.returncode != 0 or len(results) != len(dual_cases.CASES):
        results["__job__"] = {"rc": run.returncode, "stderr": run.stderr[-3000:]}
    return results


@pytest.fixture(scope="session")
def mpi_results():
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'fogsim[mpi]')")
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable} (pip install 'fogsim[mpi]')")
    cache: dict[int, dict] = {}

    def get(n: int) -> dict:
        if n not in cache:
            cache[n] = _run_mpi(n)
        return cache[n]

    return get


@pytest.mark.mpi
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("case", dual_cases.CASES)
def test_mpi(case, n, mpi_results):
    results = mpi_results(n)
    assert case in results, f"the MPI job did not report {case}: {results.get('__job__')}"
    failed = results[case]
    assert not failed, "\n".join(f"rank {r}:\n{tb}" for r, tb in failed.items())
