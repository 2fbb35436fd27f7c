"""The ``fogrun`` command line: options as one validated object."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Options", "make_parser", "parse_args"]

_DESCRIPTION = (
    "Run a fogsim script with one process per agent under MPI, or (--sim) in one process "
    "with the simulator, or (--sim --shards P) simulated over P MPI processes. Python "
    "commands run through 'python -m mpi4py', so one failing "
    "rank aborts the whole job instead of hanging."
)
_EPILOG = """examples:
  fogrun -np 4 python consensus.py --iters 100
  fogrun --sim -np 1000 python consensus.py --iters 100
  fogrun --sim -np 1000000 --shards 4 python consensus.py --iters 100
  fogrun -np 8 --local-size 4 --timeline-filename trace/t python -m mypkg.train
  fogrun -np 2 --extra-mpi-flags "-genv FOO 1" --dry-run python script.py
  fogrun --check-modes -np 4 python dgd.py --iters 20
  fogrun --bluefog -np 4 python bluefog_script.py

Everything from the first word that is not a fogrun option on is the command.

output and exit status (MPI jobs):
  Each distinct error of the ranks is printed once, with the ranks that raised it; so is
  each warning ("job.py:4: UserWarning (ranks 0-3): ..."), while the job runs, once every
  rank has raised it (else 2 s after the last did). Ctrl-C prints one line and exits
  with 130, leaving no rank running; a second Ctrl-C kills the job at once. SIGTERM or
  SIGHUP to fogrun end the job likewise (exit status 143, 129). The exit status is that
  of the rank that failed first: n for sys.exit(n), 1 for an uncaught exception, 128+s for
  a rank killed by signal s; 124 after --timeout. A rank that stalls (FOGSIM_STALL_TIMEOUT)
  is named with the ranks it waited for. --verbose shows every rank's tracebacks and
  warnings and the MPI launcher's own messages."""
_WITH_VALUE = frozenset(
    {
        "-np",
        "-n",
        "--hosts",
        "--local-size",
        "--timeline-filename",
        "--extra-mpi-flags",
        "--timeout",
        "--shards",
    }
)


@dataclass(frozen=True, kw_only=True)
class Options:
    """What to launch and how (see ``fogrun --help``)."""

    np: int
    command: tuple[str, ...]
    hosts: str | None = None
    local_size: int | None = None
    timeline_filename: str | None = None
    extra_mpi_flags: str = ""
    sim: bool = False
    shards: int = 1
    spmd: bool = False
    check_modes: bool = False
    bluefog: bool = False
    timeout: float | None = None
    dry_run: bool = False
    verbose: bool = False

    @property
    def sharded(self) -> bool:
        """Whether the job is one simulation split over several MPI processes."""
        return self.sim and self.shards > 1

    @property
    def one_process(self) -> bool:
        """Whether the job runs in one process, without ``mpiexec``."""
        return (self.sim and self.shards == 1) or self.spmd or self.check_modes


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return value


def make_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``fogrun``."""
    parser = argparse.ArgumentParser(
        prog="fogrun",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    add = parser.add_argument
    add(
        "-np",
        "-n",
        dest="np",
        type=_positive_int,
        metavar="N",
        help="number of processes (agents); with --sim, the number of simulated agents",
    )
    add("--hosts", metavar="HOSTS", help="comma-separated hosts (MPICH: -hosts, Open MPI: --host)")
    add(
        "--local-size",
        type=_positive_int,
        metavar="K",
        help="emulate machines of K processes on one host (sets FOGSIM_LOCAL_SIZE)",
    )
    add(
        "--timeline-filename",
        metavar="PREFIX",
        help="write a per-rank timeline PREFIX<rank>.json (sets FOGSIM_TIMELINE)",
    )
    add(
        "--extra-mpi-flags",
        default="",
        metavar="FLAGS",
        help="more mpiexec flags, split like a shell would (never run by a shell)",
    )
    add(
        "--sim",
        action="store_true",
        help="run the script once, simulating N agents "
        "(FOGSIM_BACKEND=sim FOGSIM_SIZE=N; no mpiexec)",
    )
    add(
        "--shards",
        type=_positive_int,
        metavar="P",
        help="with --sim: split the N simulated agents into P contiguous blocks, one per "
        "MPI process (mpiexec -n P; sets FOGSIM_SHARDS=P); 1: plain --sim",
    )
    add(
        "--spmd",
        action="store_true",
        help="run a per-agent Python script as N agent "
        "threads of one process (python -m fogsim.spmd; no mpiexec)",
    )
    add(
        "--check-modes",
        action="store_true",
        help="run the script simulated and as N "
        "SPMD agents; name the first op that differs (exit 0: all agree)",
    )
    add(
        "--bluefog",
        action="store_true",
        help="run BlueFog code unchanged: 'import "
        "bluefog.torch as bf' gets fogsim.compat.bluefog (sets FOGSIM_BLUEFOG=1)",
    )
    add(
        "--timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="kill the whole job after SECONDS (exit code 124); default: no timeout",
    )
    add(
        "--verbose",
        action="store_true",
        help="show every rank's tracebacks and warnings and the MPI launcher's own "
        "messages (default: each distinct error and warning once, one line for Ctrl-C)",
    )
    add(
        "--dry-run",
        action="store_true",
        help="print the environment changes and the command, run nothing",
    )
    add(
        "command",
        nargs=argparse.REMAINDER,
        metavar="command ...",
        help="the program and its arguments, e.g. python script.py --lr 0.1",
    )
    return parser


def _attach_values(argv: Sequence[str]) -> list[str]:
    # argparse takes "-v" in "--extra-mpi-flags -v" for an option of its own and refuses
    # it; "--extra-mpi-flags=-v" is unambiguous. Stop at the command: its words are its own.
    words = list(argv)
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "--":
        if words[i] in _WITH_VALUE and i + 1 < len(words):
            words[i : i + 2] = [f"{words[i]}={words[i + 1]}"]
        i += 1
    return words


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Parse the command line; exit with status 2 and a usage message when it is wrong."""
    parser = make_parser()
    ns = parser.parse_args(_attach_values(sys.argv[1:] if argv is None else argv))
    command = list(ns.command)
    if command and command[0] == "--":
        command = command[1:]
    if ns.np is None:
        parser.error("the number of processes is required: -np N")
    if not command:
        parser.error("no command given, e.g.: fogrun -np 4 python script.py")
    if ns.check_modes and (ns.sim or ns.spmd):
        parser.error(
            "--check-modes runs the script both simulated and as SPMD agents itself; "
            "leave out --sim and --spmd"
        )
    if ns.sim and ns.spmd:
        parser.error(
            "--sim and --spmd exclude each other: --sim runs the script once for "
            "all agents, --spmd once per agent in threads"
        )
    if ns.shards is not None and not ns.sim:
        parser.error(
            "--shards needs --sim: it splits one simulation over P processes, "
            "e.g. fogrun --sim -np 1000 --shards 4 python script.py"
        )
    if ns.shards is not None and ns.shards > ns.np:
        parser.error(
            f"--shards {ns.shards} is more processes than the {ns.np} simulated agents "
            f"of -np {ns.np}: each process holds at least one agent"
        )
    return Options(
        np=ns.np,
        command=tuple(command),
        hosts=ns.hosts,
        local_size=ns.local_size,
        timeline_filename=ns.timeline_filename,
        extra_mpi_flags=ns.extra_mpi_flags,
        sim=ns.sim,
        shards=1 if ns.shards is None else ns.shards,
        spmd=ns.spmd,
        check_modes=ns.check_modes,
        bluefog=ns.bluefog,
        timeout=ns.timeout,
        dry_run=ns.dry_run,
        verbose=ns.verbose,
    )
