"""Run a small script as an MPI job under fogrun, for the tests that need real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def fogrun_script(tmp_path: Path, text: str, n: int, *args: str, options: tuple = (),
                  timeout: float = 150, env: dict | None = None,
                  ) -> subprocess.CompletedProcess:  # fmt: skip
    """Write ``text`` to a file and run it under ``fogrun -np n [options]``.

    Skips (with the reason) when mpi4py or the mpiexec next to this Python is missing.
    The job gets ``timeout`` seconds from fogrun, and the test 40 more before it fails;
    ``env`` adds variables to its environment.
    """
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'fogsim[mpi]')")
    if not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip("no mpiexec next to the interpreter (pip install 'fogsim[mpi]')")
    script = tmp_path / "job.py"
    script.write_text(text)
    return fogrun_path(script, n, *args, options=options, timeout=timeout, env=env)


def fogrun_path(script: Path, n: int, *args: str, options: tuple = (), timeout: float = 150,
                env: dict | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    """Run the script file ``script`` under ``fogrun -np n [options]`` (see fogrun_script)."""
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (pip install 'fogsim[mpi]')")
    if not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip("no mpiexec next to the interpreter (pip install 'fogsim[mpi]')")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    env.pop("FOGSIM_BACKEND", None)
    cmd = [sys.executable, "-m", "fogsim.run", "-np", str(n), *options, "--timeout",
           str(timeout), "python", str(script), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 40, env=env)
