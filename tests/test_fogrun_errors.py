"""One error, once: fogrun prints each distinct rank error once, without the MPI banners.

The ranks of a fogrun job report their uncaught exception in ``FOGSIM_RANK_DIR``
(`fogsim.run._errors`); fogrun groups the reports and leaves the launchers' abort banners
out of the job's output (`fogsim.run._banner`) unless ``--verbose``.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from fogsim.run import _banner, _errors
from tests import _jobs

TRACEBACK = "Traceback (most recent call last)"

# ---------------------------------------------------------------- the banner filter, pure

HYDRA = (
    b"\n"
    b"===================================================================================\n"
    b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    b"=   PID 4242 RUNNING AT vm\n"
    b"=   EXIT CODE: 9\n"
    b"=   CLEANING UP REMAINING PROCESSES\n"
    b"=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    b"===================================================================================\n"
    b"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
    b"This typically refers to a problem with your application.\n"
    b"Please see the FAQ page for debugging suggestions\n"
)
MPICH_ABORT = (
    b"Abort(1) on node 3 (rank 3 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1)"
    b" - process 3\n"
)
DASHES = b"-" * 74 + b"\n"
OPENMPI_ABORT = (
    DASHES + b"MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\n"
    b"  Proc:          [[5370,1],1]\n  Errorcode:     1\n\n"
    b"NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
    b"You may or may not see output from other processes, depending on\n"
    b"exactly when Open MPI kills them.\n"
    + DASHES
    + DASHES
    + b"prterun has exited due to process rank 1 with PID 0 on node vm calling\n"
    b'"abort". This may have caused other processes in the application to be\n'
    b"terminated by signals sent by prterun (as reported here).\n"
    + DASHES
    + b"[vm:01234] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n"
    b'[vm:01234] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error '
    b"messages\n"
)
USER = b"step 1\n\n" + DASHES + b"| a | b |\n" + DASHES + b"[1, 2]\n-1.5\n= 3\nAbort? no\nall done"


def filtered(data: bytes, piece: int | None = None) -> bytes:
    f = _banner.Filter()
    step = piece or max(len(data), 1)
    out = b"".join(f.feed(data[i : i + step]) for i in range(0, len(data), step))
    return out + f.close()


@pytest.mark.parametrize("piece", [None, 1, 7])
@pytest.mark.parametrize("banner", [HYDRA, MPICH_ABORT, OPENMPI_ABORT])
def test_banners_are_left_out_and_the_rest_passes_whole(banner, piece):
    assert filtered(USER, piece) == USER  # what looks like a banner's start but is not
    assert filtered(b"before\n" + banner + USER, piece) == b"before\n" + USER
    assert filtered(USER + b"\n" + banner, piece) == USER + b"\n"


def test_a_line_is_passed_on_before_its_end_unless_it_may_be_a_banner():
    f = _banner.Filter()
    assert f.feed(b" 10%|#") == b" 10%|#"  # a progress bar: live
    assert f.feed(b"#  \r 20%|##") == b"#  \r 20%|##"
    assert f.feed(b"\nAbo") == b"\n"  # may become "Abort(1) on node ...": held
    assert f.feed(b"ut to stop\n") == b"About to stop\n"
    assert f.feed(b"Abort(1) on node 0 (rank 0 in comm 0): ") == b""
    assert f.feed(b"application called MPI_Abort(MPI_COMM_WORLD, 1) - process 0\nok") == b"ok"
    assert f.close() == b""


def test_the_nul_byte_open_mpi_ends_its_output_with_is_left_out():
    assert filtered(b"x\n" + OPENMPI_ABORT + b"\x00") == b"x\n"
    assert filtered(b"x\n\x00y\n") == b"x\n\x00y\n"  # not alone on its line: data


def test_a_block_of_dashes_that_never_closes_is_given_back():
    text = DASHES + b"MPI_ABORT was invoked on rank 1\n" + b"line\n" * 100
    assert filtered(text) == text
    assert filtered(DASHES + b"MPI_ABORT was invoked, then the end") == (
        DASHES + b"MPI_ABORT was invoked, then the end"
    )


# ---------------------------------------------------------------- reports and their summary


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ([2], "rank 2"),
        ([3, 0, 1, 2], "ranks 0-3"),
        ([0, 2, 5, 6, 7], "ranks 0, 2, 5-7"),
        ([1, 1, 2], "ranks 1-2"),
        ([4, 6], "ranks 4, 6"),
    ],
)
def test_rank_ranges(ranks, expected):
    assert _errors.rank_ranges(ranks) == expected


def _raise_as_rank(rank_dir, rank: int, code: str, *, variable: str = "PMI_RANK") -> _jobs.Job:
    env = _jobs.job_env(FOGSIM_RANK_DIR=str(rank_dir), **{variable: str(rank)})
    return _jobs.run([sys.executable, "-c", f"import fogsim\n{code}"], timeout=60, env=env)


def test_a_rank_reports_its_error_instead_of_printing_it(tmp_path):
    code = "def f(r):\n    raise ValueError(f'bad {r % 2}')\nf(RANK)"
    for rank in range(4):
        variable = "OMPI_COMM_WORLD_RANK" if rank % 2 else "PMI_RANK"
        done = _raise_as_rank(tmp_path, rank, code.replace("RANK", str(rank)), variable=variable)
        assert done.returncode == 1 and done.stderr == "", done.describe()
    reports = _errors.read(str(tmp_path))
    assert [r["rank"] for r in reports] == [0, 1, 2, 3]
    assert [r["error"] for r in reports] == ["ValueError: bad 0", "ValueError: bad 1"] * 2
    text = _errors.summary(reports)
    lines = text.splitlines()
    assert lines[0] == "fogrun: ranks 0, 2: ValueError: bad 0"
    assert lines[1] == TRACEBACK + ":"
    assert "fogrun: ranks 1, 3: ValueError: bad 1" in lines
    assert text.count(TRACEBACK) == 2 and text.count("line 3, in f") == 2  # after 'import fogsim'
    assert _errors.summary(reports, tracebacks=False).splitlines() == [
        "fogrun: ranks 0, 2: ValueError: bad 0",
        "fogrun: ranks 1, 3: ValueError: bad 1",
    ]


def test_the_same_message_raised_at_another_line_is_another_error(tmp_path):
    for rank, line in ((0, "raise KeyError('x')"), (1, "\nraise KeyError('x')")):
        assert _raise_as_rank(tmp_path, rank, line).returncode == 1
    assert _errors.summary(_errors.read(str(tmp_path))).count(TRACEBACK) == 2


def test_without_a_launcher_or_with_verbose_the_traceback_is_printed(tmp_path):
    env = _jobs.job_env(FOGSIM_RANK_DIR=str(tmp_path))  # fogrun --sim: no rank
    done = _jobs.run(
        [sys.executable, "-c", "import fogsim\nraise KeyError('k')"], timeout=60, env=env
    )
    assert TRACEBACK in done.stderr and os.listdir(tmp_path) == []
    (tmp_path / _errors.VERBOSE_NAME).write_text("")
    done = _raise_as_rank(tmp_path, 5, "raise KeyError('k')")
    assert "KeyError: 'k'" in done.stderr
    assert json.loads((tmp_path / "error-5.json").read_text())["error"] == "KeyError: 'k'"


def test_a_report_that_cannot_be_written_is_printed(tmp_path):
    done = _raise_as_rank(tmp_path / "gone", 0, "raise KeyError('k')")
    assert done.returncode == 1 and "KeyError: 'k'" in done.stderr


# ---------------------------------------------------------------- real jobs

SAME = """
import sys
import fogsim as fs
fs.init()
sys.stdout.write(f"rank {fs.rank()} ran\\n")
sys.stdout.flush()
fs.barrier()
def step(r):
    raise ValueError("the step size must be positive, got -0.1")
step(fs.rank())
"""

TWO = """
import fogsim as fs
fs.init()
fs.barrier()
if fs.rank() < 2:
    raise ValueError("low ranks give up")
raise KeyError("high ranks give up")
"""

BEFORE_INIT = """
import sys
import fogsim as fs
if len(sys.argv) < 3:
    raise SystemExit("not this")
raise TypeError(f"--lr {sys.argv[1]!r} is not a number")
"""

BANNERS = ("application called MPI_Abort", "BAD TERMINATION", "MPI_ABORT was invoked")


@pytest.mark.mpi
def test_one_error_on_every_rank_is_printed_once(tmp_path):
    run = _jobs.fogrun_script(tmp_path, SAME, 4, timeout=120)
    assert not run.timed_out and run.returncode not in (0, 124), run.describe()
    assert sorted(run.stdout.splitlines()) == [f"rank {r} ran" for r in range(4)]
    assert run.stderr.count(TRACEBACK) == 1, run.stderr
    assert (
        "fogrun: ranks 0-3: ValueError: the step size must be positive, got -0.1\n" in run.stderr
    ), run.stderr
    assert 'in step\n    raise ValueError("the step size' in run.stderr, run.stderr
    assert "mpi4py" not in run.stderr and "runpy" not in run.stderr  # the script's frames only
    assert not [b for b in BANNERS if b in run.stdout + run.stderr], run.stderr
    # fogrun still names the rank(s) that ended the job
    assert re.search(
        r"(?m)^fogrun: ranks? [\d, ]+ (\(process \d+\) failed and ended the job"
        r"|ended at the same moment)",
        run.stderr,
    ), run.stderr


@pytest.mark.mpi
def test_two_errors_make_two_groups(tmp_path):
    run = _jobs.fogrun_script(tmp_path, TWO, 4, timeout=120)
    assert not run.timed_out and run.returncode not in (0, 124), run.describe()
    heads = [line for line in run.stderr.splitlines() if line.startswith("fogrun: rank")]
    assert "fogrun: ranks 0-1: ValueError: low ranks give up" in heads, run.stderr
    assert "fogrun: ranks 2-3: KeyError: 'high ranks give up'" in heads, run.stderr
    assert run.stderr.count(TRACEBACK) == 2, run.stderr
    assert not [b for b in BANNERS if b in run.stdout + run.stderr], run.stderr


@pytest.mark.mpi
def test_an_error_before_init_is_printed_once_too(tmp_path):
    run = _jobs.fogrun_script(tmp_path, BEFORE_INIT, 3, "0.x", "more", timeout=120)
    assert not run.timed_out and run.returncode not in (0, 124), run.describe()
    assert run.stderr.count(TRACEBACK) == 1, run.stderr
    assert "fogrun: ranks 0-2: TypeError: --lr '0.x' is not a number" in run.stderr, run.stderr


@pytest.mark.mpi
def test_verbose_shows_every_traceback_and_the_banner(tmp_path):
    for _ in range(2):
        run = _jobs.fogrun_script(tmp_path, SAME, 4, options=("--verbose",), timeout=120)
        assert not run.timed_out and run.returncode not in (0, 124), run.describe()
        assert run.stderr.count(TRACEBACK) == 4, run.stderr
        # Hydra may end before it has passed on what the aborting rank printed (about one
        # job in fifteen here, with every rank aborting at once): then once more
        if "application called MPI_Abort" in run.stdout + run.stderr:
            break
    assert "application called MPI_Abort" in run.stdout + run.stderr, run.stderr
    # fogrun still says which ranks raised what, once, without a fifth traceback
    assert run.stderr.count("fogrun: ranks 0-3: ValueError: the step size must be positive") == 1, (
        run.stderr
    )


BEFORE_IMPORT = """
import sys
import a_module_no_one_installed
import fogsim
"""


@pytest.mark.mpi
@pytest.mark.parametrize("form", ["script", "-c"])
def test_an_error_before_importing_fogsim_is_printed_once_too(tmp_path, form):
    """fogrun's ranks start in fogsim.run._rank, which reports before the program runs."""
    if form == "script":
        run = _jobs.fogrun_script(tmp_path, BEFORE_IMPORT, 3, timeout=120)
    else:
        run = _jobs.fogrun(3, "-c", BEFORE_IMPORT, timeout=120)
    assert not run.timed_out and run.returncode not in (0, 124), run.describe()
    assert run.stderr.count(TRACEBACK) == 1, run.stderr
    assert (
        "fogrun: ranks 0-2: ModuleNotFoundError: No module named "
        "'a_module_no_one_installed'" in run.stderr
    ), run.stderr
    assert "_rank.py" not in run.stderr and "runpy" not in run.stderr, run.stderr


ARGV_AND_PATH = """
import os, sys
sys.stdout.write(f"{sys.argv!r} {os.path.basename(sys.path[0]) or '<cwd>'} {__name__}\\n")
"""


@pytest.mark.mpi
def test_the_program_sees_the_argv_and_path_python_would_give_it(tmp_path):
    run = _jobs.fogrun_script(tmp_path, ARGV_AND_PATH, 2, "a", "--b", timeout=120)
    run.check()
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and len(set(lines)) == 1, run.stdout
    argv, folder, name = lines[0].rsplit(" ", 2)
    assert eval(argv)[1:] == ["a", "--b"] and eval(argv)[0].endswith(".py"), lines
    assert folder == os.path.basename(tmp_path) and name == "__main__", lines
