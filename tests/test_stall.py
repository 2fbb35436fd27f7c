"""Stall detection: a rank that waits too long in a collective names who is missing."""

from __future__ import annotations

import itertools
import re
import sys

import pytest

from fogsim import StallError, _settings, _stall
from tests import _jobs, environment
from tests._jobs import fogrun_script


class FakePeers:
    """Answers as given; records how often the guard served and asked."""

    def __init__(self, answers):
        self.answers, self.served, self.asked = answers, 0, 0

    def serve(self, state):
        self.served += 1
        op, name, waited = state()
        assert isinstance(op, str) and waited >= 0

    def ask(self, state, seconds):
        self.asked += 1
        return dict(self.answers)


def test_the_report_names_missing_silent_and_waiting_ranks():
    answers = {1: ("allreduce", "w", 5.0), 3: ("neighbor_allreduce", None, 4.2)}
    text = _stall.stall_message(0, 5, ("allreduce", "w", 61.0), answers)
    first, *rest = text.splitlines()
    assert (
        first == "fogsim: rank 0 has waited 61 s in allreduce (name 'w'); ranks 2, 3, 4 "
        "have not reached it"
    )
    assert "  rank 3 waits in neighbor_allreduce (for 4 s)" in rest
    assert "  ranks 2, 4 did not answer: computing outside fogsim, hung elsewhere, or dead" in rest
    assert "  rank 1 waits in allreduce (name 'w') too" in rest
    assert rest[-1].startswith("Set FOGSIM_STALL_TIMEOUT")
    everyone = _stall.stall_message(1, 2, ("barrier", None, 9.0), {0: ("barrier", None, 9.0)})
    assert "every rank has reached it" in everyone and "rank 0 waits in barrier too" in everyone


class FakeClock:
    """The guard's clock, simulated: each reading advances it 0.1 ms, a sleep by its length.

    Installed as ``_stall.time``, it makes the guard's timing exact and independent of the
    machine's load (no wall-clock assert)."""

    def __init__(self):
        self.now, self.readings = 1000.0, []

    def monotonic(self):
        self.now += 1e-4
        self.readings.append(self.now)
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_guard_raises_after_the_timeout_and_serves_meanwhile(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(_stall, "time", clock)
    peers = FakePeers({1: ("barrier", None, 0.1)})
    guard = _stall.Guard(0, 3, timeout=0.3, warn_only=False, peers=peers)
    tested = []

    def test():
        tested.append(clock.now)
        # never done before the timeout; a guard that never raises is ended 10 s later (in
        # simulated time), and the missing StallError fails the test instead of hanging it
        return clock.now > tested[0] + 10.0

    with pytest.raises(
        StallError,
        match=r"rank 0 has waited 0 s in \w+; ranks 1, 2 have not "
        r"reached it\n  rank 1 waits in barrier \(for 0 s\)",
    ):
        guard.wait(test, lambda: pytest.fail("must not block"))
    start = clock.readings[0]  # the guard's first reading starts its wait
    # polled until the timeout, raised once it passed, not before and not much later
    assert start + 0.299 <= tested[-1] and start + 0.3 <= clock.now < start + 0.302
    assert peers.asked == 1 and peers.served >= 5  # every 0.05 s until the report


def test_warn_only_reports_once_and_keeps_waiting(capsys, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(_stall, "time", clock)
    peers = FakePeers({})
    guard = _stall.Guard(1, 2, timeout=0.1, warn_only=True, peers=peers)
    end = clock.now + 0.5  # done 0.4 s after the report
    guard.wait(lambda: clock.now > end, lambda: pytest.fail("must not block"))
    err = capsys.readouterr().err
    assert err.count("fogsim: rank 1 has waited") == 1 and "rank 0 did not answer" in err
    assert peers.asked == 1 and peers.served >= 9  # it kept serving after the report


def test_a_wait_for_a_lock_names_the_rank_that_holds_it(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(_stall, "time", clock)
    peers = FakePeers({2: ("barrier", None, 3.0)})
    guard = _stall.Guard(0, 4, timeout=0.2, warn_only=False, peers=peers)
    holders = itertools.chain([3], itertools.repeat(2))  # at each try; the last is named

    def held():
        return "the mutex of window 'x' on rank 1", holder[0]

    holder = [None]

    def take():
        holder[0] = next(holders)
        return False

    with pytest.raises(StallError) as raised:
        guard.wait(take, lambda: pytest.fail("must not block"), held)
    first, *rest = str(raised.value).splitlines()
    assert re.fullmatch(
        r"fogsim: rank 0 has waited 0 s in \w+ for the mutex of window 'x' on rank 1, held "
        r"by rank 2",
        first,
    ), first
    assert rest[0] == "  rank 2 waits in barrier (for 3 s)"
    stall = raised.value.stall  # what fogrun words in its last line
    assert (stall.rank, stall.missing, stall.lock) == (0, (2,), "the mutex of window 'x' on rank 1")
    silent = _stall.held_message(0, ("win_mutex", "x", 9.0), "the mutex", 3, {})
    assert silent.splitlines()[1] == (
        "  rank 3 did not answer: computing outside fogsim, hung elsewhere, or dead"
    )


def test_without_a_timeout_the_guard_blocks_in_the_backends_wait():
    blocked = []
    _stall.Guard(0, 4, None, False, None).wait(
        lambda: pytest.fail("no polling"), lambda: blocked.append(1)
    )
    assert blocked == [1]


@pytest.mark.parametrize(
    ("value", "timeout"), [("", 60.0), ("2.5", 2.5), ("0", None), (" 10 ", 10.0)]
)
def test_stall_timeout_setting(value, timeout):
    assert _settings.load({"FOGSIM_STALL_TIMEOUT": value}).stall_timeout == timeout


@pytest.mark.parametrize("value", ["soon", "-1", "inf", "nan"])
def test_bad_stall_timeouts_are_named(value):
    with pytest.raises(ValueError, match="FOGSIM_STALL_TIMEOUT"):
        _settings.load({"FOGSIM_STALL_TIMEOUT": value})


def test_stall_action_setting():
    assert _settings.load({"FOGSIM_STALL_ACTION": "WARN"}).stall_warn_only
    assert not _settings.load({}).stall_warn_only
    with pytest.raises(ValueError, match="FOGSIM_STALL_ACTION='ignore' is not 'raise' or 'warn'"):
        _settings.load({"FOGSIM_STALL_ACTION": "ignore"})


STALL = """
import sys, time
import numpy as np
import fogsim as fs
fs.init(backend=sys.argv[3])
fs.allreduce(np.ones(3), name="warmup")
if fs.rank() == 2:
    time.sleep(float(sys.argv[1]))  # rank 2 computes for too long
elif fs.rank() == 3 and sys.argv[2] == "astray":
    fs.neighbor_allreduce(np.ones(2))  # rank 3 is in another op
if fs.rank() != 3 or sys.argv[2] != "astray":
    got = fs.allgather(fs.allreduce(np.full(1, 1.0), name="w"))
    if fs.rank() == 0:
        print("got", got.tolist(), flush=True)
fs.shutdown()
"""


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_a_stalled_job_names_the_missing_ranks_and_ends(tmp_path, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    # fogrun's timeout (90 s, rank 2 sleeps 600 s) only guards a hang: the stall report
    # must end the job, so neither timeout may fire.
    run = fogrun_script(
        tmp_path, STALL, 4, "600", "astray", backend, timeout=90, env={"FOGSIM_STALL_TIMEOUT": "2"}
    )
    said = run.stdout + run.stderr
    assert not run.timed_out and run.returncode not in (0, 124), said[-3000:]
    assert "fogrun: timed out" not in said, said[-3000:]
    assert (
        "StallError: fogsim: rank 0 has waited 2 s in allreduce (name 'w'); ranks 2, 3 "
        "have not reached it" in said
    ), said[-3000:]
    assert "  rank 3 waits in neighbor_allreduce" in said
    assert "  rank 2 did not answer" in said
    # fogrun says that a rank stalled, waiting for whom, not that it failed
    fogrun = [line for line in run.stderr.splitlines() if line.startswith("fogrun: rank")]
    assert not [line for line in fogrun if "failed" in line], fogrun
    assert re.search(
        r"(?m)^fogrun: rank \d \(process \d+\) stalled: it waited 2 s in [a-z_]+ "
        r"(\(name 'w'\) )?for ranks [\d, ]+, which do not arrive; its stall report ended the "
        r"job$",
        run.stderr,
    ), run.stderr[-3000:]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_warn_only_reports_a_late_rank_and_the_job_completes(tmp_path, backend):
    if backend == "torch":  # its waits sleep on gloo's Work between stall checks
        pytest.importorskip("torch")
    run = fogrun_script(
        tmp_path,
        STALL,
        4,
        "4",
        "all",
        backend,
        timeout=90,
        env={"FOGSIM_STALL_TIMEOUT": "1", "FOGSIM_STALL_ACTION": "warn"},
    )
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    assert "got [1.0, 1.0, 1.0, 1.0]" in run.stdout, run.stdout
    assert (
        "fogsim: rank 0 has waited 1 s in allreduce (name 'w'); rank 2 has not reached it"
        in run.stderr
    ), run.stderr[-3000:]


MUTEX = """
import time
import numpy as np
import fogsim as fs

fs.init()
x = np.zeros(3)
fs.win_create(x, "w")
if fs.rank() == 1:
    with fs.win_mutex("w", for_self=True):
        fs.barrier()  # rank 0 asks for the mutex once rank 1 holds it
        time.sleep(600)  # and hangs, holding it
else:
    fs.barrier()
    with fs.win_mutex("w", ranks=[1]):
        print("rank 0 took the mutex", flush=True)
fs.shutdown()
"""


@pytest.mark.mpi
def test_a_rank_that_hangs_holding_a_window_mutex_is_named_and_the_job_ends(tmp_path):
    environment.require_mpiexec()
    script = tmp_path / "job.py"
    script.write_text(MUTEX)
    # no fogrun --timeout: the stall report alone must end the job (rank 1 sleeps 600 s,
    # so a job that ends by itself within the test's 60 s was ended by the report)
    run = _jobs.run(
        [sys.executable, "-m", "fogsim.run", "-np", "2", "python", str(script)],
        timeout=60,
        env=_jobs.job_env(FOGSIM_STALL_TIMEOUT="2"),
    )
    said = run.stdout + run.stderr
    assert not run.timed_out and run.returncode == 1, said[-3000:]
    assert "took the mutex" not in said
    assert (
        "StallError: fogsim: rank 0 has waited 2 s in win_mutex (name 'w') for the mutex of "
        "window 'w' on rank 1, held by rank 1\n"
        "  rank 1 did not answer: computing outside fogsim, hung elsewhere, or dead\n" in said
    ), said[-3000:]
    assert re.search(
        r"(?m)^fogrun: rank 0 \(process \d+\) stalled: it waited 2 s in win_mutex \(name 'w'\) "
        r"for the mutex of window 'w' on rank 1, held by rank 1; its stall report ended the job$",
        run.stderr,
    ), run.stderr[-3000:]
