"""``init(size=)`` under a launcher: the launcher's count wins, with one notice from rank 0.

A script that asks for 8 simulated agents runs unchanged under ``fogrun -np 2`` (MPI) and
``fogrun --spmd -np 2`` with 2 agents; the simulator keeps 8.
"""

from __future__ import annotations

import re

import pytest

from tests import _jobs

SCRIPT = """
import fogsim as fs

ctx = fs.init(size=8)
total = fs.allreduce(fs.local(lambda r: float(r) + 1.0), average=False)
got = fs.global_view(fs.local(lambda r: float(r)))
print(f"rank {ctx.backend.rank() if fs.size() < 8 else 'all'}: size {fs.size()} "
      f"total {float(total if fs.size() < 8 else total[0])} ranks {len(got)}", flush=True)
fs.shutdown()
"""

NOTICE = "fogsim: init(size=8) ignored"


@pytest.mark.parametrize("options", [(), ("--spmd",)], ids=["mpi", "spmd"])
def test_launcher_count_wins_with_one_notice(tmp_path, options):
    job = _jobs.fogrun_script(tmp_path, SCRIPT, 2, options=options, timeout=90).check()
    # the ranks' lines may run together in the launcher's merged stdout: find, not split
    found = sorted(re.findall(r"rank (\d): size (\d+) total ([\d.]+) ranks (\d+)", job.stdout))
    assert found == [("0", "2", "3.0", "2"), ("1", "2", "3.0", "2")], job.describe()
    notices = [line for line in job.stderr.splitlines() if NOTICE in line]
    assert len(notices) == 1, job.describe()
    assert "2 agents" in notices[0] and "simulated agents only" in notices[0]


def test_simulator_keeps_the_size(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    job = _jobs.python(str(script), timeout=90).check()
    assert "rank all: size 8 total 36.0 ranks 8" in job.stdout
    assert NOTICE not in job.stderr


def test_a_bad_size_is_still_an_error_under_a_launcher(tmp_path):
    job = _jobs.fogrun_script(
        tmp_path, "import fogsim as fs\nfs.init(size=0)\n", 2, options=("--spmd",), timeout=90
    )
    assert not job.ok and "size must be >= 1, got 0" in job.stdout + job.stderr
