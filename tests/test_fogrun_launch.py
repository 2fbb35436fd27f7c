"""The ``fogrun`` launcher's real launches: MPI ranks, --sim, --spmd, exit codes, time-outs
(command building without launching: tests/test_fogrun.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fogsim import run as fr
from tests import _jobs

ROOT = Path(__file__).resolve().parent.parent


def fogrun(*args: str, timeout: float = 60) -> _jobs.Job:
    return _jobs.python("-m", "fogsim.run", *args, timeout=timeout)


def _mpi_missing() -> str | None:
    if fr.find_mpi(os.environ) is None:
        return "no mpiexec installed"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py is not installed"
    return None


needs_mpi = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


@needs_mpi
def test_two_ranks_print():
    # One write per line: with PYTHONUNBUFFERED each piece of print('rank', r) is its own
    # write, and mpiexec forwards the ranks' writes as they come, interleaved.
    done = fogrun(
        "-np",
        "2",
        "python",
        "-c",
        "import sys; from mpi4py import MPI; "
        "sys.stdout.write(f'rank {MPI.COMM_WORLD.Get_rank()}\\n')",
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["rank 0", "rank 1"]


@needs_mpi
def test_script_arguments_reach_every_rank_word_for_word(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(
        "import json, sys\nfrom mpi4py import MPI\n"
        "sys.stdout.write(json.dumps([MPI.COMM_WORLD.Get_rank(), sys.argv[1:]]) + '\\n')\n"
    )
    words = ["-np", "5", "--sim", "$HOME", "a b", "*", ";"]
    done = fogrun("-np", "2", "python", str(script), *words)
    assert done.returncode == 0, done.stderr
    rows = sorted(json.loads(line) for line in done.stdout.splitlines())
    assert rows == [[0, words], [1, words]]


@needs_mpi
def test_failing_rank_aborts_the_job():
    code = (
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n    raise RuntimeError('rank 1 fails')\n"
        "MPI.COMM_WORLD.barrier()\n"
    )
    # The timeouts only guard a hang: the failure, not fogrun's timeout, ends the job.
    done = fogrun("--timeout", "120", "-np", "2", "python", "-c", code, timeout=180)
    assert not done.timed_out and done.returncode not in (0, fr.TIMEOUT_EXIT_CODE), done.stderr
    assert "fogrun: timed out" not in done.stderr
    assert "rank 1 fails" in done.stderr


def test_sim_mode_runs_the_simulator():
    done = fogrun(
        "--sim", "-np", "3", "python", "-c", "import fogsim as fs; fs.init(); print(fs.size())"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"


@needs_mpi
def test_sim_shards_splits_one_simulation_over_processes():
    # The script is the one-process script: -np names the agents, --shards the processes.
    code = (
        "import fogsim as fs; fs.init(); r = fs.rank(); "
        "print(fs.size(), r[0], r[-1], fs.is_main_process(), flush=True)"
    )
    done = fogrun("--sim", "-np", "11", "--shards", "2", "python", "-c", code)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:-1]) == ["11 0 5 True", "11 6 10 False"]
    one = fogrun("--sim", "-np", "11", "--shards", "1", "python", "-c", code)
    assert one.returncode == 0, one.stderr
    assert one.stdout == "11 0 10 True\n"


def test_spmd_mode_runs_one_thread_per_agent(tmp_path):
    script = tmp_path / "agent.py"
    script.write_text(
        "import sys, fogsim as fs\nfs.init()\n"
        "print(fs.rank(), fs.size(), fs.allreduce(float(fs.rank())), sys.argv[1:])\n"
        "if fs.rank() == 2 and sys.argv[1] == 'fail':\n"
        "    raise KeyError('agent 2 gives up')\nfs.barrier()\n"
    )
    done = fogrun("--spmd", "-np", "3", "python", str(script), "ok")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"{r} 3 1.0 ['ok']" for r in range(3)]
    done = fogrun("--spmd", "-np", "3", "python", str(script), "fail")
    assert done.returncode == 1
    assert "KeyError: 'agent 2 gives up'" in done.stderr and "agent 2 of 3" in done.stderr


def test_exit_code_and_timeout():
    done = fogrun("--sim", "-np", "1", "python", "-c", "raise SystemExit(3)")
    assert done.returncode == 3
    # The script would sleep for an hour: only fogrun's kill ends it before the test's
    # own guard (60 s), which would mark the job timed out.
    done = fogrun(
        "--sim", "--timeout", "0.5", "-np", "1", "python", "-c", "import time; time.sleep(3600)"
    )
    assert not done.timed_out, done.describe()
    assert done.returncode == fr.TIMEOUT_EXIT_CODE
    assert done.stderr.strip() == "fogrun: timed out after 0.5 s; killed the job"


def test_the_launcher_imports_no_numerical_stack():
    # fogrun starts in a few hundredths of a second: fogsim's public names are imported lazily.
    code = (
        "import sys, fogsim.run, fogsim._settings; "
        "print(sorted(m for m in ('numpy', 'scipy', 'networkx', 'mpi4py', 'torch') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_lazy_package_names():
    code = (
        "import sys, fogsim; names = dir(fogsim); "
        "assert set(fogsim.__all__) <= set(names), 'dir() misses public names'; "
        "assert 'scipy' not in sys.modules, 'dir() imported the topology layer'; "
        "from fogsim import topology, init, Handle; "
        "assert fogsim.topology is topology and fogsim.init is init; "
        "import fogsim.topology as T; assert T is topology; "
        "assert 'scipy' in sys.modules; "
        "print(hasattr(fogsim, 'no_such_name'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_dry_run_in_a_process():
    done = fogrun("--dry-run", "--sim", "-np", "4", "python", "s.py", "--x", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "FOGSIM_BACKEND=sim",
        "FOGSIM_SIZE=4",
        shlex.join([sys.executable, "s.py", "--x", "1"]),
    ]
