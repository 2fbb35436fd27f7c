"""An outside client's script (tests/sharded_client.py) sharded: one process's numbers.

The script was written from the README and issue 22 only. It runs with N = 64 and 50 in
one process (plain ``python``) and under ``mpiexec -n 2`` and ``-n 4`` (``python -m
mpi4py``, no fogrun): the consensus, weighted, per-agent ``src_weights`` and broadcast
results must agree bit for bit, the reductions (allreduce, exact diffusion's optimum and
distances, its iterates) to 1e-12 relative, and every process must hold only its block.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests import _jobs, environment

SCRIPT = "tests/sharded_client.py"
EXACT = ("consensus", "weighted", "src_weights", "broadcast_last")


def outputs(job: _jobs.Job) -> tuple[list[dict], dict]:
    """The ``{"held": ...}`` objects and the results the job printed (lines of different
    processes may run together, so objects are decoded where they start)."""
    decoder, text, held, results = json.JSONDecoder(), job.stdout, [], None
    start = text.find('{"')
    while start >= 0:
        obj, end = decoder.raw_decode(text, start)
        if "held" in obj:
            held.append(obj)
        else:
            results = obj["results"]
        start = text.find('{"', end)
    assert results is not None, job.describe()
    return held, results


def run(n: int, parts: int) -> _jobs.Job:
    if parts == 1:
        return _jobs.python(SCRIPT, str(n), timeout=120).check()
    cmd = [str(_jobs.MPIEXEC), "-n", str(parts), sys.executable, "-m", "mpi4py", SCRIPT, str(n)]
    return _jobs.run(cmd, timeout=120).check()


@pytest.mark.mpi
@pytest.mark.parametrize("n", [64, 50])
def test_the_client_script_sharded_gives_one_processs_numbers(n):
    environment.require_mpiexec()
    held, alone = outputs(run(n, 1))
    assert held == [{"held": n, "first": 0, "size": n, "main": True}]
    for parts in (2, 4):
        held, results = outputs(run(n, parts))
        assert len(held) == parts and [h["main"] for h in held].count(True) == 1
        held.sort(key=lambda h: h["first"])
        firsts = [h["first"] for h in held] + [n]
        assert [h["held"] for h in held] == np.diff(firsts).tolist()  # blocks cover the world
        assert max(h["held"] for h in held) - min(h["held"] for h in held) <= 1
        assert all(h["size"] == n and h["held"] < n for h in held)
        assert results.keys() == alone.keys()
        for key, want in alone.items():
            got, want = np.array(results[key]), np.array(want)
            if key in EXACT:
                np.testing.assert_array_equal(got, want, err_msg=f"{key}, {parts} processes")
            else:
                np.testing.assert_allclose(
                    got, want, rtol=1e-12, atol=0, err_msg=f"{key}, {parts} processes"
                )
