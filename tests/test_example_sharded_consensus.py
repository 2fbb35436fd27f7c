"""examples/sharded_consensus.py: launched on 2 processes, the unchanged script prints one
process's errors (header, rows and last line once), and each process reports on stderr
holding only its block of the agents."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests import _jobs
from tests.example_output import table

SCRIPT = str(_jobs.ROOT / "examples" / "sharded_consensus.py")
BLOCK = re.compile(r"agents (\d+)\.\.(\d+) \((\d+)\): peak memory (\d+) MiB")


def errors(stdout: str) -> dict[int, float]:
    """The ``iteration  error`` lines, each printed once."""
    lines = [ln.split() for ln in stdout.splitlines()]
    lines = [ln for ln in lines if len(ln) == 2 and ln[0].isdigit()]
    assert lines and len({k for k, _ in lines}) == len(lines), stdout
    return {int(k): float(e) for k, e in lines}


def blocks(stderr: str) -> list[tuple[int, int]]:
    """Each process's ``[lo, hi)``, in the order of the agents."""
    found = [tuple(map(int, m.groups())) for m in BLOCK.finditer(stderr)]
    assert all(hi - lo + 1 == size and mib > 0 for lo, hi, size, mib in found), stderr
    return sorted((lo, hi + 1) for lo, hi, _, _ in found)


@pytest.mark.mpi
@pytest.mark.parametrize(("agents", "topology"), [(2000, "ring"), (2001, "exp2")])
def test_two_processes_print_one_processs_errors(agents, topology):
    args = ("--agents", str(agents), "--iters", "5", "--every", "2", "--topology", topology)
    alone = _jobs.python(SCRIPT, *args, timeout=180).check()
    sharded = _jobs.fogrun(2, SCRIPT, *args, timeout=180).check()
    printed = [table(alone.stdout), table(sharded.stdout)]
    assert {out.header for out in printed} == {
        " iter  consensus error (RMS distance of the agents' vectors to their average)"
    }
    assert all("in 5 iterations and is still falling" in out.last for out in printed)
    one, two = errors(alone.stdout), errors(sharded.stdout)
    assert sorted(one) == sorted(two) == [0, 2, 4, 5]
    np.testing.assert_allclose([two[k] for k in one], list(one.values()), rtol=1e-12)
    assert one[5] < one[0]  # consensus: the error falls
    assert blocks(alone.stderr) == [(0, agents)]
    held = blocks(sharded.stderr)  # two contiguous halves, each process its own
    assert len(held) == 2 and held[0][0] == 0 and held[0][1] == held[1][0]
    assert held[1][1] == agents and abs((held[0][1] - held[0][0]) * 2 - agents) <= 1
    assert sharded.stdout.count("steps/s") == 1
