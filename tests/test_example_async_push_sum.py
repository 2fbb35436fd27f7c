"""examples/async_push_sum.py: x/p reaches the average and no mass is lost, in both modes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests import _jobs
from tests.example_output import table

ROOT = _jobs.ROOT
FINAL = re.compile(
    r"final relative error (\S+) \(\S+ at the start\), total mass sum\(p\) = (\S+) "
    r"\(n = (\d+)\): (.*)"
)


def run(tmp_path: Path, mode: list[str], n: int, *options: str) -> tuple[float, float, np.ndarray]:
    out = tmp_path / f"ps-{'-'.join(mode) or 'mpi'}-{n}-{len(list(tmp_path.iterdir()))}.npy"
    done = _jobs.fogrun(
        n,
        str(ROOT / "examples" / "async_push_sum.py"),
        "--save",
        str(out),
        *options,
        options=tuple(mode),
        timeout=150,
    ).check()
    found = FINAL.findall(done.stdout)
    assert len(found) == 1, done.stdout[-2000:]  # printed once per job
    error, mass, size, meaning = found[0]
    assert int(size) == n
    assert table(done.stdout).last.endswith(meaning)  # the last line, a header above the rows
    if float(error) <= 1e-6:
        assert meaning.startswith("every agent's x/p is the average of the initial vectors")
    else:
        assert "x/p" in meaning and "average" in meaning and "every agent" not in meaning
    kept = float(mass) == pytest.approx(n, rel=1e-9)
    assert meaning.endswith(
        "no mass was lost" if kept else "mass was lost (lost messages carry it away)"
    )
    return float(error), float(mass), np.load(out)


def test_simulated_lock_step_reaches_the_average(tmp_path):
    error, mass, estimate = run(tmp_path, ["--sim"], 16, "--iters", "150")
    assert error < 1e-10
    assert mass == pytest.approx(16, rel=1e-12)
    assert estimate.shape == (16, 4)


def test_simulated_asynchrony_with_delays_conserves_mass(tmp_path):
    error, mass, _ = run(
        tmp_path, ["--sim"], 12, "--iters", "600", "--activation", "bernoulli", "--max-delay", "4"
    )
    assert mass == pytest.approx(12, rel=1e-12)
    assert error < 1e-6


@pytest.mark.mpi
def test_mpi_asynchronous_processes_reach_the_average(tmp_path):
    error, mass, _ = run(tmp_path, [], 4, "--iters", "300")
    assert error < 1e-6
    assert mass == pytest.approx(4, rel=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_mpi_lock_step_equals_the_simulator(tmp_path, n):
    options = ("--iters", "30", "--lockstep", "--topology", "ring")
    _, _, distributed = run(tmp_path, [], n, *options)
    _, _, simulated = run(tmp_path, ["--sim"], n, *options)
    np.testing.assert_array_equal(distributed, simulated)
