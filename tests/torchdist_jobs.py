"""How tests/test_torchdist.py starts its gloo workers: torchrun's variables, fogrun, or
alone; each way the ranks can meet. The workers run that file as the driver."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from tests import _jobs

TIMEOUT = 200
DRIVER = ("-m", "tests.test_torchdist")


def _env(**extra: str) -> dict[str, str]:
    return _jobs.job_env(FOGSIM_BACKEND="torch", **extra)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_torchrun_style(n: int, cases: list[str], driver: tuple[str, ...] = DRIVER) -> _jobs.Job:
    """Start n workers of ``driver`` with torchrun's variables (what torchrun itself
    would set when its workers serve the store).

    The workers are judged as one job: its exit code is the first non-zero worker's, its
    output rank 0's, and it timed out if any worker did (all are then killed).
    """
    port = str(_free_port())

    def worker_env(r: int) -> dict[str, str]:
        return _env(
            RANK=str(r),
            WORLD_SIZE=str(n),
            LOCAL_RANK=str(r),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )

    script = [sys.executable, *driver, *cases]
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            script,
            env=worker_env(r),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=_jobs.ROOT,
            start_new_session=True,
        )
        for r in range(n)
    ]
    deadline = start + TIMEOUT
    outs, timed_out = [], False
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:  # a hang fails the cases not reported, not the session
                _jobs._kill_group(q)
            outs.append(p.communicate())
    codes = [p.wait() for p in procs]
    code = next((c for c in codes if c != 0), 0)
    stderr = "\n".join(f"[worker {r}] {err}" for r, (_, err) in enumerate(outs))
    return _jobs.Job(
        script, None if timed_out else code, outs[0][0], stderr, timed_out, time.monotonic() - start
    )


def _run_fogrun(n: int, cases: list[str], **env: str) -> _jobs.Job:
    """Start n workers under fogrun (mpiexec): FOGSIM_BACKEND=torch wins over its "mpi"."""
    return _jobs.fogrun(n, *DRIVER, *cases, timeout=TIMEOUT, env={"FOGSIM_BACKEND": "torch", **env})


def _run_alone(n: int, cases: list[str]) -> _jobs.Job:
    """Start one process without a launcher: a world of one on a free port."""
    return _jobs.python(*DRIVER, *cases, timeout=TIMEOUT, env=_env())
