"""examples/async_push_sum.py: x/p reaches the average and no mass is lost, in both modes;
an agent far ahead, whose p underflows, keeps a finite estimate."""

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


def run(
    tmp_path: Path, mode: list[str], n: int, *options: str
) -> tuple[float, float, np.ndarray, list[list[float]]]:
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
    printed = table(done.stdout)
    assert printed.last.endswith(meaning)  # the last line, a header above the rows
    if float(error) <= 1e-6:
        assert meaning.startswith("every agent's x/p is the average of the initial vectors")
    else:
        assert "x/p" in meaning and "average" in meaning and "every agent" not in meaning
    kept = float(mass) == pytest.approx(n, rel=1e-9)
    assert meaning.endswith(
        "no mass was lost" if kept else "mass was lost (lost messages carry it away)"
    )
    return float(error), float(mass), np.load(out), printed.rows


def test_simulated_lock_step_reaches_the_average(tmp_path):
    error, mass, estimate, _ = run(tmp_path, ["--sim"], 16, "--iters", "150")
    assert error < 1e-10
    assert mass == pytest.approx(16, rel=1e-12)
    assert estimate.shape == (16, 4)


def test_simulated_asynchrony_with_delays_conserves_mass(tmp_path):
    error, mass, _, _ = run(
        tmp_path, ["--sim"], 12, "--iters", "600", "--activation", "bernoulli", "--max-delay", "4"
    )
    assert mass == pytest.approx(12, rel=1e-12)
    assert error < 1e-6


@pytest.mark.parametrize(("mode", "n", "ahead"), [("--sim", 16, 600), ("--spmd", 4, 750)])
def test_an_agent_far_ahead_holds_a_finite_estimate(tmp_path, mode, n, ahead):
    """Agent 0 alone for ``ahead`` rounds: its p underflows (after 463 rounds at d = 4, 679
    at d = 2), x/p would be nan; its estimate holds until the others run, then converges."""
    iters = ahead + 100
    error, mass, estimate, rows = run(
        tmp_path, [mode], n, "--iters", str(iters), "--ahead", str(ahead), "--report-every", "50"
    )
    assert [row[0] for row in rows] == list(range(0, iters + 1, 50))
    assert np.isfinite(rows).all(), rows
    assert all(row[1] == rows[0][1] for row in rows if row[0] <= ahead), rows  # held
    assert error < 1e-10
    assert mass == pytest.approx(n, rel=1e-12)
    assert np.isfinite(estimate).all()


@pytest.mark.mpi
def test_mpi_asynchronous_processes_reach_the_average(tmp_path):
    error, mass, _, _ = run(tmp_path, [], 4, "--iters", "300")
    assert error < 1e-6
    assert mass == pytest.approx(4, rel=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_mpi_lock_step_equals_the_simulator(tmp_path, n):
    options = ("--iters", "30", "--lockstep", "--topology", "ring")
    _, _, distributed, _ = run(tmp_path, [], n, *options)
    _, _, simulated, _ = run(tmp_path, ["--sim"], n, *options)
    np.testing.assert_array_equal(distributed, simulated)
