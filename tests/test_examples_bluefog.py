"""examples/bluefog/: BlueFog programs (``import bluefog.torch as bf``, nothing of fogsim)
run unchanged under ``fogrun --bluefog`` and do what their docstrings say."""

from __future__ import annotations

import re

import pytest

from tests import _jobs
from tests.example_output import table

EXAMPLES = _jobs.ROOT / "examples" / "bluefog"


def _run(name: str, *args: str, options: tuple = ()) -> _jobs.Job:
    job = _jobs.fogrun_path(
        EXAMPLES / f"{name}.py", 4, *args, options=("--bluefog", *options), timeout=240
    )
    job.check()
    return job


def test_the_examples_do_not_mention_fogsim():
    for path in EXAMPLES.glob("*.py"):
        code = path.read_text()
        assert "import bluefog.torch as bf" in code, path.name
        assert not re.search(r"^\s*(import|from) fogsim", code, re.M), path.name


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [(), ("--dynamic",), ("--topology", "ring")])
def test_average_consensus_converges_under_mpi(extra):
    job = _run("average_consensus", *extra)
    printed = table(job.stdout)
    assert printed.last.startswith("converged: True: after 60 iterations"), job.describe()
    assert printed.last.endswith("every rank holds the global average"), job.stdout
    errors = [mse for _, mse in printed.rows]
    assert errors[0] > 1e-3 and errors[-1] < 1e-12, job.stdout


def test_average_consensus_as_spmd_agents():
    job = _run("average_consensus", options=("--spmd",))
    assert table(job.stdout).last.startswith("converged: True"), job.describe()


@pytest.mark.mpi
def test_push_sum_least_squares_gives_the_same_numbers_under_mpi_and_spmd():
    mpi = _run("push_sum_least_squares")
    spmd = _run("push_sum_least_squares", options=("--spmd",))
    printed = table(mpi.stdout)
    assert printed.last.startswith("converged: True"), mpi.describe()
    assert [k for k, _ in printed.rows] == [100, 200, 300, 400], mpi.stdout
    line = [ln for ln in mpi.stdout.splitlines() if ln.startswith("relative error")]
    assert line and line[0] in spmd.stdout, (mpi.stdout, spmd.stdout)
    assert spmd.stdout == mpi.stdout  # every line: header, rows and the last


@pytest.mark.mpi
def test_synthetic_mnist_trains_and_the_replicas_agree():
    job = _run("synthetic_mnist", "--epochs", "2")
    printed = table(job.stdout)
    assert printed.last.startswith("accuracy ok: True: after 2 epochs"), job.describe()
    gap = float(re.search(r"consensus distance (\S+)", job.stdout).group(1))
    assert gap < 0.5, job.stdout
    assert [epoch for epoch, _, _ in printed.rows] == [1, 2], job.stdout
    losses = [loss for _, loss, _ in printed.rows]
    assert losses[-1] < losses[0], job.stdout
