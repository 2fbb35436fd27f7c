"""The suite's own rules: jobs are judged by exit code and output; CI=true forbids fall-backs.

Each rule is tried on a small copy: a job that fails after its last case, a hung job, a
session under ``CI=true`` without the compiled extension or without the venv's ``mpiexec``,
and a skip that is not for missing hardware.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests import _jobs, environment

ROOT = environment.ROOT


# -- jobs ---------------------------------------------------------------------------------
def _reporting(*, exit_code: int, failed: dict | None = None) -> str:
    record = json.dumps({"case": "a", "failed": failed or {}})
    return f"import sys; print({record!r}, flush=True); sys.exit({exit_code})"


def test_a_job_that_ends_badly_after_its_last_case_fails_that_case():
    job = _jobs.python("-c", _reporting(exit_code=3), timeout=60)
    assert job.records()["a"]["failed"] == {}
    with pytest.raises(pytest.fail.Exception, match=r"case a passed, but job .* exited with 3"):
        job.case("a")
    with pytest.raises(pytest.fail.Exception, match="exited with 3"):
        job.check()


def test_a_case_failed_on_one_rank_or_not_reported_fails():
    job = _jobs.python("-c", _reporting(exit_code=0, failed={"1": "boom on rank 1"}), timeout=60)
    assert job.ok
    with pytest.raises(pytest.fail.Exception, match="case a failed:\nrank 1:\nboom on rank 1"):
        job.case("a")
    with pytest.raises(pytest.fail.Exception, match="the job did not report case b"):
        job.case("b")


def test_a_hung_job_is_killed_with_its_children_and_fails():
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '120'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    job = _jobs.python("-c", code, timeout=3)
    assert job.timed_out and job.returncode is None and not job.ok
    with pytest.raises(pytest.fail.Exception, match="timed out after"):
        job.check()
    child = int(job.stdout.split()[0])
    for _ in range(100):  # the process group was killed; wait for init to reap the child
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the hung job's child {child} outlived the job")


@pytest.mark.mpi
def test_an_mpi_rank_that_fails_after_the_last_report_fails_the_case(tmp_path):
    script = (
        "import json\nfrom mpi4py import MPI\n"
        "rank = MPI.COMM_WORLD.Get_rank()\n"
        "if rank == 0:\n    print(json.dumps({'case': 'a', 'failed': {}}), flush=True)\n"
        "MPI.COMM_WORLD.barrier()\n"
        "if rank == 1:\n    raise RuntimeError('rank 1 fails after the last case')\n"
    )
    job = _jobs.fogrun_script(tmp_path, script, 2, timeout=60)
    assert "a" in job.records() and not job.timed_out and job.returncode != 0
    with pytest.raises(pytest.fail.Exception, match="case a passed, but job"):
        job.case("a")


# -- CI=true ------------------------------------------------------------------------------
SAMPLE = """
import pytest

from tests import environment


def test_plain():
    pass


def test_compiled(compiled):
    assert compiled.__file__.endswith((".so", ".pyd"))


def test_mpi():
    environment.require_mpiexec()


def test_software_skip():
    pytest.skip("some software is missing")


def test_hardware_skip():
    pytest.skip(environment.needs_hardware("a GPU"))
"""


def _sample_tree(tmp_path: Path, *, compiled: bool) -> Path:
    """A copy of fogsim (with or without its compiled extension) and the suite's rules."""
    tree = tmp_path / "tree"
    ignore = ["__pycache__", "*.c", "*.html"] + ([] if compiled else ["*.so", "*.pyd"])
    shutil.copytree(ROOT / "fogsim", tree / "fogsim", ignore=shutil.ignore_patterns(*ignore))
    (tree / "tests").mkdir()
    for name in ("__init__.py", "conftest.py", "environment.py"):
        shutil.copy(ROOT / "tests" / name, tree / "tests" / name)
    (tree / "tests" / "test_sample.py").write_text(SAMPLE)
    return tree


def _pytest(tree: Path, *, ci: bool, python: str = sys.executable) -> _jobs.Job:
    env = _jobs.job_env()
    env.pop("CI", None)
    if ci:
        env["CI"] = "true"
    # from the copy's root: its fogsim and tests come first on sys.path (python -m)
    return _jobs.run(
        [python, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "tests/test_sample.py"],
        timeout=120,
        env=env,
        cwd=tree,
    )


def _fake_venv_without_mpiexec(tmp_path: Path) -> str:
    """This venv's interpreter and packages, seen from a folder with no ``mpiexec`` in it."""
    venv = Path(sys.prefix)
    fake = tmp_path / "venv"
    (fake / "bin").mkdir(parents=True)
    shutil.copy(venv / "pyvenv.cfg", fake / "pyvenv.cfg")
    (fake / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    (fake / "lib").symlink_to(venv / "lib")
    return str(fake / "bin" / "python")


def test_outside_ci_missing_pieces_skip_with_their_reason(tmp_path):
    job = _pytest(_sample_tree(tmp_path, compiled=True), ci=False)
    assert job.returncode == 0, job.describe()
    assert "3 passed, 2 skipped" in job.stdout, job.stdout
    bare = _pytest(_sample_tree(tmp_path / "bare", compiled=False), ci=False)
    assert bare.returncode == 0, bare.describe()
    assert "2 passed, 3 skipped" in bare.stdout, bare.stdout
    assert "the compiled extension is not built (fogsim._core._kernels" in bare.stdout


def test_under_ci_only_skips_for_missing_hardware_are_allowed(tmp_path):
    job = _pytest(_sample_tree(tmp_path, compiled=True), ci=True)
    assert not job.timed_out and job.returncode == 1, job.describe()
    assert "1 failed, 3 passed, 1 skipped" in job.stdout, job.stdout
    assert "skipped under CI=true" in job.stdout and "some software is missing" in job.stdout
    assert "FAILED tests/test_sample.py::test_software_skip" in job.stdout


def test_under_ci_a_missing_compiled_extension_fails_the_session(tmp_path):
    job = _pytest(_sample_tree(tmp_path, compiled=False), ci=True)
    assert not job.timed_out and job.returncode == 1, job.describe()
    said = job.stdout + job.stderr
    assert "the compiled extension is not built" in said and "fogsim._core._kernels" in said
    assert "passed" not in said  # no test ran


def test_under_ci_a_missing_mpiexec_fails_the_session(tmp_path):
    python = _fake_venv_without_mpiexec(tmp_path)
    tree = _sample_tree(tmp_path, compiled=True)
    job = _pytest(tree, ci=True, python=python)
    assert not job.timed_out and job.returncode == 1, job.describe()
    said = job.stdout + job.stderr
    assert f"no mpiexec next to {python}" in said and "passed" not in said, said
    outside = _pytest(tree, ci=False, python=python)
    assert outside.returncode == 0, outside.describe()
    assert f"no mpiexec next to {python}" in outside.stdout  # the skip's reason
