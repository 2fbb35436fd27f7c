"""Simulation-only examples under a launcher: they run once, on rank 0, and say so.

``cost_model.py``, ``fault_tolerance.py`` and ``heterogeneity.py`` simulate all their
agents in one process; under ``fogrun -np N`` every process would print the same output.
They run on the first process only (``examples/_common.simulation_only``), the others end
quietly with status 0.
"""

from __future__ import annotations

import pytest

from tests import _jobs
from tests.example_output import table

ROOT = _jobs.ROOT
EXAMPLES = {
    "cost_model": ("--out", "", "--dim", "50", "--gpus-per-machine", "4"),
    "fault_tolerance": ("--size", "8", "--steps", "60", "--fail-at", "10"),
    "heterogeneity": ("--seeds", "1", "--iters", "100", "--steps", "10"),
}
#: The words of each one's header, and what its last line says with those options.
HEADER = {
    "cost_model": "GPUs ring two_level decomposed neighbor_exp2 one_peer hierarchical".split(),
    "fault_tolerance": "step parameter server decentralized".split(),
    "heterogeneity": "alpha label_TV dgd_mean std gt_mean std ed_mean std".split(),
}
LAST = {
    "cost_model": "per iteration the hierarchical neighbor allreduce is modelled at",
    "fault_tolerance": "after agent 0 failed at step 10 the parameter server stayed",
    "heterogeneity": "gradient tracking and exact diffusion were",
}


@pytest.mark.mpi
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_a_simulation_only_example_runs_once_under_fogrun(example):
    script = str(ROOT / "examples" / f"{example}.py")
    alone = _jobs.python(script, *EXAMPLES[example]).check()
    assert alone.stdout.strip() and "simulation-only" not in alone.stderr
    printed = table(alone.stdout)
    assert printed.header.split() == HEADER[example] and LAST[example] in printed.last
    launched = _jobs.fogrun(3, script, *EXAMPLES[example], timeout=120).check()
    assert launched.stdout == alone.stdout  # the same output, once
    notes = [line for line in launched.stderr.splitlines() if "simulation-only" in line]
    assert notes == [
        f"{example}.py: this example is simulation-only; ran once on rank 0 "
        "(not on all 3 processes)"
    ], launched.stderr
