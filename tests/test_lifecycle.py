"""Worlds made and shut down in a loop release everything they made.

Notebooks and test harnesses call ``init()`` and ``shutdown()`` again and again: each
world's communicators (MPI) or process groups (torch), their threads and their sockets
must go with it. One ``fogrun -np 2`` job per runtime runs the cycles ``init();
neighbor_allreduce(...); shutdown()`` and each rank reports its resident memory, open file
descriptors and threads along the way.
"""

from __future__ import annotations

import json

import pytest

from tests._jobs import fogrun_script

CYCLES = """
import json, os, sys
import numpy as np
import fogsim as fs

cycles, backend = int(sys.argv[1]), sys.argv[2]
marks = {int(m) for m in sys.argv[3].split(",")}
if backend == "torch":
    import torch
    torch.set_num_threads(1)


def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


seen, rank = {}, None
for cycle in range(1, cycles + 1):
    fs.init(backend=backend)
    rank = int(fs.rank())
    got = fs.neighbor_allreduce(np.full(3, float(rank)))
    assert np.allclose(got, 0.5), got  # 2 ranks: each averages with the other
    fs.shutdown()
    if cycle in marks:
        seen[cycle] = {
            "rss": rss_kib(),
            "fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task")),
        }
print(json.dumps({"rank": rank, "seen": seen}), flush=True)
"""


def _cycles(tmp_path, cycles, backend, marks):
    marked = ",".join(map(str, marks))
    return fogrun_script(tmp_path, CYCLES, 2, str(cycles), backend, marked, timeout=120)


def _reports(run, marks):
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    reports = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"rank"')]
    assert sorted(r["rank"] for r in reports) == [0, 1], said[-3000:]
    for report in reports:
        assert sorted(map(int, report["seen"])) == marks, report
    return [{int(k): v for k, v in r["seen"].items()} for r in reports]


@pytest.mark.mpi
def test_ten_thousand_mpi_worlds_free_their_communicators(tmp_path):
    # MPICH has 2,048 communicator ids per process: a world that leaked one per cycle
    # died at cycle 2,042 ("Too many communicators"). Its memory grew by ~10 kB a cycle.
    marks = [1, 1000, 10000]
    run = _cycles(tmp_path, 10000, "mpi", marks)
    for seen in _reports(run, marks):
        assert seen[10000]["fds"] == seen[1000]["fds"] == seen[1]["fds"], seen
        assert seen[10000]["threads"] == seen[1]["threads"], seen
        assert seen[10000]["rss"] - seen[1000]["rss"] < 2048, seen  # KiB over 9,000 cycles


@pytest.mark.mpi
def test_torch_worlds_end_their_groups_threads_and_sockets(tmp_path):
    pytest.importorskip("torch")
    # Each world's gloo group holds threads and sockets; they used to live on until the
    # garbage collector met the world (tens of them at a time, 150 more descriptors).
    # torch itself keeps ~1-2 kB per group made and destroyed (its store's keys and
    # more), so memory is only held to a loose bound here.
    marks = [1, *range(2, 11), 50, 100, 150, 200]
    run = _cycles(tmp_path, 200, "torch", marks)
    for seen in _reports(run, marks):
        first = seen[1]
        for cycle, now in seen.items():
            assert now["fds"] == first["fds"], (cycle, seen)
            assert now["threads"] == first["threads"], (cycle, seen)
        assert seen[200]["rss"] - seen[50]["rss"] < 4096, seen  # KiB over 150 cycles
