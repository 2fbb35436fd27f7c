"""Under MPI: randomized mismatched send/receive sets are all caught; dead ranks end the job;
mutex-protected window accumulates under random timing keep every bit of mass.

One fogrun job of 4 ranks makes 200 dynamic neighbor_allreduce calls whose senders and
receivers disagree somewhere (a drawn set of edges, then one edge removed from the
receiver's side or added to the sender's); every rank must raise the same ValueError for
each, and a valid call after each must still give the simulator's numbers. The job has
a time bound: a hang fails the test instead of blocking the suite.
"""

from __future__ import annotations

import pytest

from tests._jobs import fogrun_script

PATTERNS = 200

SCRIPT = """
import sys
import numpy as np
from mpi4py import MPI
import fogsim as fs

fs.init()
n, r = fs.size(), fs.rank()
comm = MPI.COMM_WORLD
rng = np.random.default_rng(12345)  # the same draws on every rank
caught, messages = 0, set()
for k in range({patterns}):
    A = rng.random((n, n)) < 0.5
    np.fill_diagonal(A, False)
    edges = np.argwhere(A)  # A[i, j]: j sends to i
    if rng.random() < 0.5 and len(edges):  # the receiver forgets one sender
        i, j = edges[rng.integers(len(edges))]
        recv = A.copy()
        recv[i, j] = False
        send = A
    else:  # a sender sends to someone who does not expect it
        i, j = rng.integers(n), rng.integers(n)
        while i == j:
            j = rng.integers(n)
        recv, send = A.copy(), A.copy()
        recv[i, j] = False
        send[i, j] = True
    src = {{int(s): 0.5 for s in np.flatnonzero(recv[r])}}
    dst = {{int(d): 1.0 for d in np.flatnonzero(send[:, r])}}
    try:
        fs.neighbor_allreduce(np.full(3, float(r)), self_weight=0.5, src_weights=src,
                              dst_weights=dst)
    except ValueError as exc:
        caught += "topology check failed: agent" in str(exc)
        messages.add(str(exc).split(":")[0])
    # a valid call right after: the world still works
    ok = fs.neighbor_allreduce(np.full(2, float(r)), self_weight=0.5,
                               src_weights={{(r - 1) % n: 0.5}}, dst_weights=[(r + 1) % n])
    assert np.allclose(ok, 0.5 * r + 0.5 * ((r - 1) % n)), ok
counts = comm.gather(caught, root=0)
if r == 0:
    print("caught", counts, sorted(messages)[:3])
    sys.stdout.flush()
fs.shutdown()
"""


@pytest.mark.mpi
def test_random_mismatched_dynamic_patterns_all_raise_on_every_rank(tmp_path):
    run = fogrun_script(tmp_path, SCRIPT.format(patterns=PATTERNS), 4)
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("caught"))
    assert f"caught [{PATTERNS}, {PATTERNS}, {PATTERNS}, {PATTERNS}]" in line, line


MIXED = """
import sys
import numpy as np
from mpi4py import MPI
import fogsim as fs
from fogsim import topology as T

fs.init(topology=T.exponential_two_graph)
n, r = fs.size(), fs.rank()
x = np.ones(3)
# (a rank's own receive weights, src_weights alone, are its business: not in the list)
OPS = {{
    "plain": lambda: fs.neighbor_allreduce(x),
    "fused": lambda: fs.wait(fs.neighbor_allreduce_nonblocking(x)),
    "two fused": lambda: [fs.wait(h) for h in [fs.neighbor_allreduce_nonblocking(x),
                                               fs.neighbor_allreduce_nonblocking(np.ones(5))]],
    "dynamic": lambda: fs.neighbor_allreduce(x, self_weight=0.5,
                                             src_weights={{(r - 1) % n: 0.5}},
                                             dst_weights=[(r + 1) % n]),
    "bad argument": lambda: fs.neighbor_allreduce(x, self_weight=0.5),
    "allreduce": lambda: fs.allreduce(x),
    "broadcast": lambda: fs.broadcast(x, 0),
    "neighbor_allgather": lambda: fs.neighbor_allgather(x),
}}
caught = 0
pairs = [(a, b) for b in ("plain", "fused") for a in OPS if a != b]
pairs += [(b, a) for a, b in pairs]
for odd, rest in pairs:  # rank 1 makes one op, the others another
    try:
        OPS[odd if r == 1 else rest]()
    except ValueError as exc:  # the agreement's refusal, or rank 1's bad argument, everywhere
        caught += "ranks disagree: " in str(exc) or "self_weight and src_weights" in str(exc)
    ok = fs.neighbor_allreduce(np.full(2, float(r)))  # the world still works
    assert np.allclose(ok, fs.neighbor_allreduce(np.full(2, float(r)),
                                                 enable_topo_check=False)), ok
counts = MPI.COMM_WORLD.gather(caught, root=0)
if r == 0:
    print("caught", counts, "of", len(pairs))
fs.shutdown()
"""


@pytest.mark.mpi
@pytest.mark.parametrize("stall_timeout", ["60", "0"])
def test_different_ops_on_one_rank_raise_everywhere(tmp_path, stall_timeout):
    # The checked static call and the fused batch send their data beside the agreement;
    # a rank that is in another op must still let them finish and raise with everyone.
    run = fogrun_script(
        tmp_path, MIXED.format(), 4, timeout=60, env={"FOGSIM_STALL_TIMEOUT": stall_timeout}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("caught"))
    total = int(line.split()[-1])
    assert total == 2 * 2 * 7, line
    assert f"caught [{total}, {total}, {total}, {total}]" in line, line


DIE = """
import os, signal, sys, time
import numpy as np
import fogsim as fs
fs.init()
x = fs.neighbor_allreduce(np.ones(3))
if fs.rank() == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("rank 1 gives up")
    os.kill(os.getpid(), signal.SIGKILL)
for _ in range(10_000):  # the others would go on for minutes
    x = fs.neighbor_allreduce(x)
    time.sleep(0.01)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["raise", "kill"])
def test_a_rank_that_dies_ends_the_job_naming_it(tmp_path, how):
    run = fogrun_script(tmp_path, DIE, 3, how, timeout=300)  # the timeout only guards a hang
    assert not run.timed_out and run.returncode not in (0, 124), run.describe()
    said = run.stdout + run.stderr
    # ended by the death: neither fogrun's timeout nor the survivors' stall report ended it
    assert not run.timed_out and "fogrun: timed out" not in said, said[-2000:]
    assert "StallError" not in said and "have not reached" not in said, said[-2000:]
    if how == "raise":
        # the error once, in fogrun's words, not MPICH's abort banner
        assert "fogrun: rank 1: RuntimeError: rank 1 gives up" in said, said[-2000:]
        assert said.count("Traceback (most recent call last)") == 1, said[-2000:]
        assert "(rank 1 in comm 0)" not in said, said[-2000:]
        assert "fogrun: rank 1 (process" in said and ") failed and ended" in said, said[-2000:]
    else:  # the rank's own end, as a shell shows it: 128 + SIGKILL
        assert "fogrun: rank 1 (process" in said, said[-2000:]
        assert ") was killed by SIGKILL and ended the job" in said, said[-2000:]
        assert run.returncode == 137, run.describe()


WINDOWS = """
import time
import numpy as np
import fogsim as fs
from fogsim import topology as T

fs.init(topology=T.exponential_two_graph)
n, r = fs.size(), fs.rank()
rng = np.random.default_rng(100 + r)  # each rank its own timing
topo = T.exponential_two_graph(n)
outs = topo.out_neighbors(r)
share = 1.0 / (len(outs) + 1)
start = np.random.default_rng(7).standard_normal((n, 3))
x = start[r].copy()
fs.set_win_ops_with_associated_p(True)
fs.win_create(x, "mass", zero_init=True)
accumulated = collected = 0
for step in range({rounds}):
    if rng.random() < 0.6:  # push a share of the mass to a random subset of out-neighbors
        dst = {{int(j): share for j in outs if rng.random() < 0.7}}
        keep = 1.0 - share * len(dst)
        fs.win_accumulate(x, "mass", self_weight=keep, dst_weights=dst, require_mutex=True)
        accumulated += 1
    else:
        fs.win_update_then_collect("mass")
        collected += 1
    if rng.random() < 0.3:
        time.sleep(rng.random() * 0.003)  # random timing: ranks drift apart
fs.barrier()  # everything pushed has arrived: collect the rest
fs.win_update_then_collect("mass")
p = np.asarray(fs.win_associated_p("mass"), dtype=float).reshape(1)
total_x = fs.allreduce(x, average=False)
total_p = fs.allreduce(p, average=False)
assert np.allclose(total_x, start.sum(axis=0), rtol=1e-12, atol=1e-12), (total_x, start.sum(0))
assert abs(total_p[0] - n) < 1e-12 * n, total_p
if r == 0:
    print("mass kept", accumulated, collected, flush=True)
fs.win_free()
fs.shutdown()
"""


@pytest.mark.mpi
def test_mutex_protected_window_mass_survives_random_timing(tmp_path):
    run = fogrun_script(tmp_path, WINDOWS.format(rounds=1000), 4, timeout=120)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "mass kept" in run.stdout
