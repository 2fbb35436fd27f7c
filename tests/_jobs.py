"""Run subprocess jobs (MPI under fogrun, torch.distributed workers, plain scripts) for tests.

Every job is judged the same way: :func:`run` never lets a hung job hang the suite (on its
timeout the whole process group is killed and the job is marked ``timed_out``), and
:meth:`Job.check` fails the test when the job timed out or exited non-zero, with the tail of
its output. Jobs that run named cases (``dual_driver``, the torch driver) print one JSON
line per case on rank 0; :meth:`Job.case` fails a case that is missing, failed on any
rank, or whose job ended badly after reporting it (so a crash after the last case still
fails).

Jobs run from the repository root (``cwd=ROOT``), so a driver inside this package starts as
``python -m tests.dual_driver``; fogsim itself is imported as installed, no ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fogsim import _settings

from . import environment

ROOT = environment.ROOT
MPIEXEC = environment.MPIEXEC

#: Variables a job must not inherit from the test process: they would choose its backend,
#: its size or its implementation, or make it believe a launcher started it.
_NOT_INHERITED = (
    "FOGSIM_BACKEND",
    "FOGSIM_SIZE",
    "FOGSIM_LOCAL_SIZE",
    "FOGSIM_SHARDS",
    "FOGSIM_SHARD_TRANSPORT",
    "FOGSIM_PURE_PYTHON",
    "FOGSIM_TORCH_PORT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "GLOO_SOCKET_IFNAME",
    # Unbuffered ranks write a print's text and its newline separately, and the launcher
    # interleaves the ranks' writes: lines of different ranks would run together.
    "PYTHONUNBUFFERED",
    *(var for pair in _settings._LAUNCHER_VARS for var in pair),
)


def job_env(**extra: str) -> dict[str, str]:
    """Return this process's environment for a job: one thread per rank, no backend chosen."""
    env = {key: value for key, value in os.environ.items() if key not in _NOT_INHERITED}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.update(extra)
    return env


@dataclass
class Job:
    """The outcome of one subprocess job."""

    cmd: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    _records: dict[str, dict] | None = field(default=None, repr=False)

    def describe(self) -> str:
        """One paragraph for a failure message: the command, how it ended, its output's tail."""
        how = "timed out" if self.timed_out else f"exited with {self.returncode}"
        return (
            f"job {' '.join(self.cmd)!r} {how} after {self.seconds:.1f} s\n"
            f"--- stdout (tail) ---\n{self.stdout[-2500:]}\n"
            f"--- stderr (tail) ---\n{self.stderr[-4000:]}"
        )

    @property
    def ok(self) -> bool:
        """True when the job ended by itself with exit code 0."""
        return not self.timed_out and self.returncode == 0

    def check(self) -> Job:
        """Fail the calling test unless the job ended by itself with exit code 0."""
        if not self.ok:
            pytest.fail(self.describe(), pytrace=False)
        return self

    def records(self) -> dict[str, dict]:
        """The JSON lines ``{"case": name, ...}`` the job printed, by case name."""
        if self._records is None:
            self._records = {}
            for line in self.stdout.splitlines():
                if line.startswith('{"case"'):
                    record = json.loads(line)
                    self._records[record["case"]] = record
        return self._records

    def case(self, name: str) -> dict:
        """Fail unless case ``name`` was reported passed on every rank by a job that ended well."""
        record = self.records().get(name)
        if record is None:
            pytest.fail(f"the job did not report case {name}\n{self.describe()}", pytrace=False)
        failed = record.get("failed") or {}
        if failed:
            detail = "\n".join(f"rank {rank}:\n{tb}" for rank, tb in failed.items())
            pytest.fail(f"case {name} failed:\n{detail}", pytrace=False)
        if not self.ok:  # every case reported, then a rank crashed or hung: still a failure
            pytest.fail(f"case {name} passed, but {self.describe()}", pytrace=False)
        return record


def run(
    cmd: list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: Path | str = ROOT,
    stdin: str | None = None,
) -> Job:
    """Run ``cmd`` to its end or for ``timeout`` seconds, then kill its process group."""
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(c) for c in cmd],
        cwd=cwd,
        env=job_env() if env is None else env,
        text=True,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        timed_out = True
    return Job(
        [str(c) for c in cmd],
        None if timed_out else proc.returncode,
        out,
        err,
        timed_out,
        time.monotonic() - start,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def python(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None, cwd: Path | str = ROOT
) -> Job:
    """Run ``sys.executable *args`` (see :func:`run`)."""
    return run([sys.executable, *args], timeout=timeout, env=env, cwd=cwd)


def fogrun(
    n: int,
    *command: str,
    options: tuple = (),
    timeout: float = 150,
    env: dict[str, str] | None = None,
    python_exe: str | None = None,
    cwd: Path | str = ROOT,
) -> Job:
    """Run ``fogrun -np n [options] --timeout T python *command`` from the repository root.

    MPI jobs (no ``--sim``/``--spmd`` in ``options``) need the venv's ``mpiexec``:
    :func:`tests.environment.require_mpiexec` skips, or fails under ``CI=true``, without it.
    fogrun ends the job after ``timeout`` seconds; the test allows 40 more before it kills
    the job itself.
    """
    if not {"--sim", "--spmd"} & set(options) and python_exe is None:
        environment.require_mpiexec()
    exe = python_exe or sys.executable
    cmd = [
        exe,
        "-m",
        "fogsim.run",
        "-np",
        str(n),
        *options,
        "--timeout",
        str(timeout),
        "python",
        *command,
    ]
    return run(cmd, timeout=timeout + 40, env=job_env(**(env or {})), cwd=cwd)


def fogrun_script(
    tmp_path: Path,
    text: str,
    n: int,
    *args: str,
    options: tuple = (),
    timeout: float = 150,
    env: dict | None = None,
) -> Job:
    """Write ``text`` to a file and run it under ``fogrun -np n [options]`` (see fogrun)."""
    script = tmp_path / "job.py"
    script.write_text(text)
    return fogrun(n, str(script), *args, options=options, timeout=timeout, env=env)


def fogrun_path(
    script: Path,
    n: int,
    *args: str,
    options: tuple = (),
    timeout: float = 150,
    env: dict | None = None,
) -> Job:
    """Run the script file ``script`` under ``fogrun -np n [options]`` (see fogrun)."""
    return fogrun(n, str(script), *args, options=options, timeout=timeout, env=env)
