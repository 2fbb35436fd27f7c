"""What a user sees of a fogrun job: Ctrl-C in one line, each warning once, the failing
rank's own exit status.

The jobs run as a user runs them: a script in a folder, ``fogrun -np 4 python job.py`` by
the installed console script, started in a process group of its own, so that a SIGINT to
that group is what a terminal's Ctrl-C does. The pure parts (the launcher's report of every
process's status, the rank-side warning hook, the grouping of warnings) are tested first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import fogsim.run as fr
from fogsim.run import _banner, _status, _warnings
from tests import _jobs, environment

FOGRUN = os.path.join(os.path.dirname(sys.executable), "fogrun")

# ---------------------------------------------------------------- pure parts


def test_hydra_report_of_every_process_gives_each_ranks_status():
    codes = _status.ExitCodes()
    for line in ("rank 0 ran", "[mpiexec@vm] Exit codes: [vm] 0,0,768,9", "after"):
        codes.feed(line)
    assert codes.by_rank() == {0: 0, 1: 0, 2: 768, 3: 9}
    assert [_status.shell_status(s) for s in (0, 768, 9, 6)] == [0, 3, 137, 134]
    several = _status.ExitCodes()  # the ranks' order over hosts is the launcher's: unused
    for line in ("[mpiexec@a] Exit codes: [a] 0,9", "[b] 768,9"):
        several.feed(line)
    assert several.by_rank() == {}


def test_the_first_failure_is_the_first_recorded_or_vanished():
    record = {"rank": 2, "pid": 42, "code": 3, "how": "exit", "time": 10.0}
    died = [(1, 41, "died")]
    ending = _status.first_ending([record], died, 11.0, {1: 9})
    assert ending == _status.Ending((2,), (42,), "exited with status 3", 3)
    ending = _status.first_ending([record], died, 9.0, {1: 10})  # rank 1 vanished first
    assert ending == _status.Ending((1,), (41,), "was killed by SIGUSR1", 138)
    assert _status.first_ending([], died, 9.0, {}) == _status.Ending((1,), (41,), "died", None)
    assert _status.first_ending([], [], None, {}) is None


def test_a_rank_that_stalled_is_told_as_waiting_for_the_ranks_it_waited_for():
    stall = {"rank": 0, "op": "allreduce (name 'w')", "waited": 60.2, "missing": [2, 3]}
    first = {"rank": 0, "pid": 40, "code": 1, "how": "stalled", "time": 10.0, "stall": stall}
    ending = _status.first_ending([first], [(1, 41, "died")], 11.0, {})
    assert ending == _status.Ending(
        (0,),
        (40,),
        "waited 60 s in allreduce (name 'w') for ranks 2, 3, which do not arrive",
        1,
        stalled=True,
    )
    lock = {**stall, "op": "win_put (name 'x')", "missing": [1], "lock": "the mutex of 'x'"}
    assert _status.waited_for(lock) == (
        "waited 60 s in win_put (name 'x') for the mutex of 'x', held by rank 1"
    )
    other = {**first, "rank": 1, "stall": {**stall, "missing": [2]}}
    assert (
        _status.stalled_line([first, other], [0, 1]) == "ranks 0, 1 stalled waiting for ranks 2, 3"
    )
    assert _status.stalled_line([first], [0]) == (
        "rank 0 stalled: it waited 60 s in allreduce (name 'w') for ranks 2, 3, which do not arrive"
    )
    assert _status.stalled_line([first], [0, 1]) is None  # rank 1 failed otherwise


def test_hydra_ctrl_c_messages_and_exit_codes_are_left_out_but_look_alikes_stay():
    f = _banner.Filter()
    text = (
        b"step 1\n[mpiexec@vm] Sending Ctrl-C to processes as requested\n"
        b"[mpiexec@vm] Press Ctrl-C again to force abort\n"
        b"[0] 1,2\n[mpiexec@vm] Exit codes: [a] 0,130\n[b] 130,9\n"  # the launcher's last words
    )
    assert f.feed(text) + f.close() == b"step 1\n[0] 1,2\n"
    f = _banner.Filter()
    assert f.feed(b"[0] 1,2\n[mpiexec@vm] other\n") + f.close() == b"[0] 1,2\n[mpiexec@vm] other\n"


def test_hydra_is_asked_for_every_process_status():
    o = fr.parse_args(["-np", "2", "python", "s.py"])
    hydra = fr.MPIInfo("/opt/mpi/bin/mpiexec", fr.MPICH, "5.0.2", exit_codes=True)
    argv, _ = fr.build_command(o, {}, hydra)
    assert argv[:4] == ["/opt/mpi/bin/mpiexec", "-n", "2", "-print-all-exitcodes"]
    argv, _ = fr.build_command(o, {}, fr.MPIInfo("/opt/mpi/bin/mpiexec", fr.MPICH))
    assert "-print-all-exitcodes" not in argv


def test_a_rank_reports_only_the_warnings_its_filters_let_through(tmp_path):
    code = (
        "import warnings\nimport fogsim\n"
        "warnings.warn('ignored by -W')\n"
        "warnings.warn('shown', RuntimeWarning)\n"
        "warnings.simplefilter('ignore', RuntimeWarning)\n"
        "warnings.warn('ignored by the script', RuntimeWarning)\n"
    )
    env = _jobs.job_env(FOGSIM_RANK_DIR=str(tmp_path), PMI_RANK="3")
    done = _jobs.run([sys.executable, "-W", "ignore::UserWarning", "-c", code], timeout=60, env=env)
    assert done.returncode == 0 and done.stderr == "", done.describe()
    [line] = (tmp_path / "warnings-3.jsonl").read_text().splitlines()
    report = json.loads(line)
    assert (report["rank"], report["category"], report["message"], report["lineno"]) == (
        3,
        "RuntimeWarning",
        "shown",
        4,
    )


def test_reports_of_one_warning_are_grouped_by_their_nth_time(tmp_path):
    def report(rank, message, lineno):
        return {
            "rank": rank,
            "category": "UserWarning",
            "message": message,
            "filename": "job.py",
            "lineno": lineno,
            "line": f"warn({message!r})",
        }

    for rank in (0, 1):
        lines = [report(rank, "again", 5), report(rank, "again", 5)]
        lines += [report(rank, f"rank {rank}", 6)] + ([report(0, "alone", 7)] if rank == 0 else [])
        (tmp_path / f"warnings-{rank}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in lines)
        )
    printed: list[str] = []
    collector = _warnings.Collector(str(tmp_path), 2, printed.append)
    collector.close()
    assert sorted(printed) == sorted(
        [
            "job.py:5: UserWarning (ranks 0-1): again\n  warn('again')\n",
            "job.py:5: UserWarning (ranks 0-1): again\n  warn('again')\n",
            "job.py:6: UserWarning (rank 0): rank 0\n  warn('rank 0')\n",
            "job.py:6: UserWarning (rank 1): rank 1\n  warn('rank 1')\n",
            "job.py:7: UserWarning (rank 0): alone\n  warn('alone')\n",
        ]
    )


# ---------------------------------------------------------------- jobs, as a user runs them


class Job:
    """``fogrun ARGS`` run from ``folder`` in a process group of its own (as a terminal's
    foreground job), its output read line by line as it comes."""

    def __init__(self, folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
        if "--sim" not in args and "--spmd" not in args:
            environment.require_mpiexec()
        self.folder = folder
        self.proc = subprocess.Popen(
            [FOGRUN, *args],
            cwd=folder,
            env=_jobs.job_env(**(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def describe(self) -> str:
        return (
            f"fogrun exited with {self.proc.poll()}\n--- stdout ---\n"
            + "\n".join(self.out)
            + "\n--- stderr ---\n"
            + "\n".join(self.err)
        )

    def wait_until(self, ready, timeout: float = 180) -> None:
        """Wait until ``ready()`` (the job still running); fail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the job never got ready\n{self.describe()}", pytrace=False)
            time.sleep(0.1)

    def ranks_started(self, n: int) -> bool:
        return all((self.folder / f"pid-{r}").exists() for r in range(n))

    def finish(self, timeout: float = 180) -> int:
        """Wait for fogrun to end by itself; return its exit status."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"fogrun did not end\n{self.describe()}", pytrace=False)
        for reader in self._readers:
            reader.join(30)
        return code

    def stop(self) -> None:
        """End what is left of a job that failed its test: fogrun, then its ranks."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in self.rank_pids():
            if running(pid):
                os.kill(pid, signal.SIGKILL)

    def rank_pids(self) -> list[int]:
        return [int(p.read_text()) for p in self.folder.glob("pid-*") if p.read_text()]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


RANK_PID = """
with open(f"pid-{fs.rank()}.part", "w") as f:
    f.write(str(os.getpid()))
os.replace(f"pid-{fs.rank()}.part", f"pid-{fs.rank()}")
"""

SLEEPER = f"""import os, signal, sys, time, warnings
import fogsim as fs

fs.init()
if sys.argv[1:] == ["stubborn"]:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
fs.barrier()
warnings.warn("weights look odd", UserWarning)
if fs.rank() == 0:
    warnings.warn("rank 0 alone")
{RANK_PID}
time.sleep(600)
"""

WARNED = [
    "job.py:8: UserWarning (ranks 0-3): weights look odd",
    '  warnings.warn("weights look odd", UserWarning)',
    "job.py:10: UserWarning (rank 0): rank 0 alone",
    '  warnings.warn("rank 0 alone")',
]


def _start_sleepers(tmp_path: Path, *options: str, script_args: tuple[str, ...] = ()) -> Job:
    (tmp_path / "job.py").write_text(SLEEPER)
    return Job(tmp_path, "-np", "4", *options, "python", "job.py", *script_args)


@pytest.mark.mpi
@pytest.mark.parametrize("to", ["fogrun", "its process group"])
def test_ctrl_c_prints_one_line_and_leaves_no_rank_running(tmp_path, to):
    job = _start_sleepers(tmp_path)
    # each warning is printed once while the job runs: the one of every rank at once, the
    # one of rank 0 alone after fogrun's wait for other ranks
    job.wait_until(lambda: job.ranks_started(4) and len(job.err) >= len(WARNED))
    assert job.err == WARNED, job.describe()
    if to == "fogrun":
        os.kill(job.proc.pid, signal.SIGINT)
    else:  # what a terminal's Ctrl-C does: SIGINT to the whole foreground process group
        os.killpg(job.proc.pid, signal.SIGINT)
    assert job.finish() == 130, job.describe()
    assert job.err == [*WARNED, "fogrun: interrupted (Ctrl-C): ended the job (4 ranks)"], (
        job.describe()
    )
    assert job.out == [], job.describe()
    assert [pid for pid in job.rank_pids() if running(pid)] == [], job.describe()


def test_ctrl_c_prints_one_line_for_a_simulation_too(tmp_path):
    (tmp_path / "job.py").write_text(
        "import os, time\nimport fogsim as fs\n\nfs.init()\n"
        'with open("pid-0.part", "w") as f:\n    f.write(str(os.getpid()))\n'
        'os.replace("pid-0.part", "pid-0")\ntime.sleep(600)\n'
    )
    job = Job(tmp_path, "--sim", "-np", "4", "python", "job.py")
    job.wait_until(lambda: job.ranks_started(1))
    os.killpg(job.proc.pid, signal.SIGINT)
    assert job.finish() == 130, job.describe()
    assert job.err == ["fogrun: interrupted (Ctrl-C): ended the job"], job.describe()
    assert job.out == [] and not any(running(pid) for pid in job.rank_pids()), job.describe()


def test_ctrl_c_prints_one_line_for_spmd_agents_too(tmp_path):
    job = _start_sleepers(tmp_path, "--spmd")
    # the agents' warnings: once each, with the agents that raised them
    job.wait_until(lambda: job.ranks_started(4) and len(job.err) >= len(WARNED))
    assert job.err == WARNED, job.describe()
    os.killpg(job.proc.pid, signal.SIGINT)
    assert job.finish() == 130, job.describe()
    assert job.err == [*WARNED, "fogrun: interrupted (Ctrl-C): ended the job"], job.describe()
    assert job.out == [], job.describe()


@pytest.mark.mpi
def test_a_second_ctrl_c_kills_ranks_that_ignore_the_first(tmp_path):
    job = _start_sleepers(tmp_path, script_args=("stubborn",))
    job.wait_until(lambda: job.ranks_started(4) and len(job.err) >= len(WARNED))
    os.killpg(job.proc.pid, signal.SIGINT)
    time.sleep(1.0)
    assert job.proc.poll() is None, job.describe()  # the ranks ignore SIGINT: still running
    os.killpg(job.proc.pid, signal.SIGINT)
    assert job.finish(timeout=60) == 130, job.describe()
    assert job.err == [*WARNED, "fogrun: interrupted (Ctrl-C twice): killed the job (4 ranks)"], (
        job.describe()
    )
    assert [pid for pid in job.rank_pids() if running(pid)] == [], job.describe()


@pytest.mark.mpi
@pytest.mark.parametrize(("name", "code"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_fogrun_told_to_end_says_so_and_ends_every_rank(tmp_path, name, code):
    job = _start_sleepers(tmp_path)
    job.wait_until(lambda: job.ranks_started(4) and len(job.err) >= len(WARNED))
    os.kill(job.proc.pid, getattr(signal, name))  # e.g. a batch system ending fogrun
    assert job.finish() == code, job.describe()
    # no rank is blamed: fogrun ended them, as it was told
    assert job.err == [*WARNED, f"fogrun: terminated ({name}): ended the job (4 ranks)"], (
        job.describe()
    )
    assert [pid for pid in job.rank_pids() if running(pid)] == [], job.describe()


@pytest.mark.mpi
def test_verbose_shows_every_ranks_warning_traceback_and_the_launchers_messages(tmp_path):
    job = _start_sleepers(tmp_path, "--verbose")
    job.wait_until(
        lambda: (
            job.ranks_started(4)
            and sum("UserWarning: weights look odd" in line for line in job.err) == 4
            and any("UserWarning: rank 0 alone" in line for line in job.err)
        )
    )
    os.killpg(job.proc.pid, signal.SIGINT)
    assert job.finish() == 130, job.describe()
    err = "\n".join(job.err)
    assert err.count("job.py:8: UserWarning: weights look odd") == 4, err
    assert err.count("Traceback (most recent call last)") == 4, err
    assert "Press Ctrl-C again to force abort" in "\n".join(job.out), job.describe()
    assert job.err[-1] == "fogrun: interrupted (Ctrl-C): ended the job (4 ranks)", err
    assert [pid for pid in job.rank_pids() if running(pid)] == [], job.describe()


WARNINGS = """import warnings
import numpy as np
import fogsim as fs

fs.init()
fs.barrier()
for step in range(3):
    warnings.warn("weights look odd", UserWarning)
if fs.rank() in (0, 2):
    warnings.warn("some ranks only")
warnings.warn("ignored by -W", RuntimeWarning)
fs.barrier()  # SPMD agents share the filters: simplefilter resets every agent's once-per-line
warnings.simplefilter("ignore", DeprecationWarning)
warnings.warn("ignored by the script", DeprecationWarning)
fs.set_topology(np.full((4, 4), 0.3), is_weighted=True)
"""


@pytest.mark.parametrize("mode", [pytest.param("mpi", marks=pytest.mark.mpi), "spmd"])
def test_a_warning_raised_alike_on_every_rank_prints_once_with_its_ranks(tmp_path, mode):
    (tmp_path / "job.py").write_text(WARNINGS)
    if mode == "mpi":
        job = Job(tmp_path, "-np", "4", "python", "-W", "ignore::RuntimeWarning", "job.py")
    else:  # agent threads of one process, the filter given as Python's variable
        env = {"PYTHONWARNINGS": "ignore::RuntimeWarning"}
        job = Job(tmp_path, "--spmd", "-np", "4", "python", "job.py", env=env)
    assert job.finish() == 0, job.describe()
    assert len(job.err) == 6, job.describe()
    blocks = dict(zip(job.err[::2], job.err[1::2], strict=True))
    assert blocks.pop("job.py:8: UserWarning (ranks 0-3): weights look odd") == (
        '  warnings.warn("weights look odd", UserWarning)'
    ), job.describe()
    assert blocks.pop("job.py:10: UserWarning (ranks 0, 2): some ranks only") == (
        '  warnings.warn("some ranks only")'
    ), job.describe()
    # fogsim's own warnings take the same path
    [(head, source)] = blocks.items()
    assert head.startswith(
        "job.py:15: WeightWarning (ranks 0-3): set_topology: the weights are neither row- nor "
        "column-stochastic: row 0 sums to 1.2"
    ), job.describe()
    assert source == "  fs.set_topology(np.full((4, 4), 0.3), is_weighted=True)", job.describe()


FAILING = """import atexit, os, signal, sys, time
import fogsim as fs

how = sys.argv[1]
if how == "slow-exit":
    atexit.register(time.sleep, 6)  # runs after fogsim's own exit handlers: a slow flush
fs.init()
if fs.rank() == 2:
    if how == "exit":
        sys.exit(3)
    if how in ("raise", "slow-exit"):
        raise ValueError("rank 2 gives up")
    if how == "os-exit":
        os._exit(5)
    os.kill(os.getpid(), getattr(signal, how))
fs.barrier()
"""


def _fail(tmp_path: Path, how: str) -> tuple[int, Job]:
    (tmp_path / "job.py").write_text(FAILING)
    job = Job(tmp_path, "-np", "4", "python", "job.py", how)
    return job.finish(), job


ENDED = re.compile(r"fogrun: rank 2 \(process \d+\) (.*) and ended the job")


@pytest.mark.mpi
def test_the_failing_ranks_status_comes_back_every_time(tmp_path):
    """An uncaught exception on one rank: 1, five times out of five."""
    for _ in range(5):
        code, job = _fail(tmp_path, "raise")
        assert code == 1, job.describe()
        assert ENDED.fullmatch(job.err[-1]) and "failed" in job.err[-1], job.describe()


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("how", "status", "told"),
    [
        ("exit", 3, "exited with status 3"),
        ("os-exit", 5, "exited with status 5"),
        # the rank still exiting when fogrun ends the others: was mpiexec's 15 (SIGTERM)
        ("slow-exit", 1, "failed"),
        ("SIGKILL", 128 + 9, "was killed by SIGKILL"),
        # mpiexec returns the OR of the ranks' statuses: 12 | 9 (its clean-up's SIGKILL) = 13
        ("SIGUSR2", 128 + 12, "was killed by SIGUSR2"),
    ],
)
def test_fogrun_exits_with_the_failing_ranks_own_status(tmp_path, how, status, told):
    code, job = _fail(tmp_path, how)
    assert code == status, job.describe()
    ended = ENDED.fullmatch(job.err[-1])
    assert ended is not None and ended.group(1) == told, job.describe()
