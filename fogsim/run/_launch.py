"""Start the job, forward signals to it, enforce the timeout, return its exit code."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .. import _settings
from . import _banner, _errors, _liveness, _mpi
from ._cli import Options, parse_args
from ._command import NO_MPI_MESSAGE, LaunchError, build_command, env_changes

__all__ = ["TIMEOUT_EXIT_CODE", "main", "run"]

#: Exit code of a job killed by ``--timeout`` (the one of coreutils' ``timeout``).
TIMEOUT_EXIT_CODE = 124
_USAGE_EXIT_CODE = 2
_NOT_FOUND_EXIT_CODE = 127
# Seconds between SIGTERM (mpiexec cleans up its ranks) and SIGKILL to the process group.
_KILL_GRACE = 3.0
_FORWARDED = (signal.SIGINT, signal.SIGTERM)
# Seconds the job may run on after a rank raised an uncaught exception before fogrun ends it.
_FAILED_GRACE = 3.0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The child leads its own process group (start_new_session), so this reaches mpiexec,
    # its proxies and the ranks, and nothing of the caller's.
    if not hasattr(os, "killpg"):  # pragma: no cover - Windows
        proc.kill()
        proc.wait()
        return
    for sig, grace in ((signal.SIGTERM, _KILL_GRACE), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)


@contextlib.contextmanager
def _forwarding_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    # The child is in its own session, so a terminal's Ctrl-C reaches only fogrun: pass
    # SIGINT/SIGTERM on to mpiexec, which relays them to every rank.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(
    argv: Sequence[str],
    env: Mapping[str, str],
    timeout: float | None = None,
    *,
    verbose: bool = False,
) -> int:
    """Run ``argv`` with environment ``env``; return its exit code.

    A child killed by signal ``s`` gives ``128 + s``, as in a shell. After ``timeout``
    seconds the child's whole process group is killed and `TIMEOUT_EXIT_CODE` returned.
    When the job fails, the rank that died first is named: the ranks keep a socket to
    fogrun open while they live (`fogsim.run._liveness`); failing that, the rank of a
    process id the MPI launcher reports dead (the ranks record their ids in
    ``FOGSIM_RANK_DIR``).

    Ranks that raise report the exception there instead of printing it
    (`fogsim.run._errors`): each distinct error is printed once, with the ranks that raised
    it and the traceback of the first, and the MPI launchers' abort banners are left out of
    the job's output. ``verbose`` keeps every rank's traceback and the banners.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryDirectory(prefix="fogrun-ranks-") as rank_dir:
        env = {**env, "FOGSIM_RANK_DIR": rank_dir}
        watch = _liveness.Watch(rank_dir)
        if verbose:
            with open(os.path.join(rank_dir, _errors.VERBOSE_NAME), "w"):
                pass
        try:
            proc = subprocess.Popen(
                list(argv),
                env=env,
                shell=False,
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except FileNotFoundError:
            watch.close()
            print(f"fogrun: command not found: {argv[0]}", file=sys.stderr)
            return _NOT_FOUND_EXIT_CODE
        dead: list[str] = []  # MPICH's launcher reports dead processes on either stream
        relays = [
            threading.Thread(
                target=_relay,
                daemon=True,
                args=(stream, to, dead, None if verbose else _banner.Filter()),
            )
            for stream, to in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))
        ]
        for relay in relays:
            relay.start()
        try:
            with _forwarding_signals(proc):
                code = _wait(proc, timeout, watch)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            for relay in relays:
                relay.join(5)
            watch.close()
            _report_errors(rank_dir, verbose)
            print(f"fogrun: timed out after {timeout:g} s; killed the job", file=sys.stderr)
            return TIMEOUT_EXIT_CODE
        finally:
            if proc.poll() is None:  # fogrun itself is failing: take the job down with it
                _kill_group(proc)
        for relay in relays:
            relay.join(5)
        watch.close()
        _report_errors(rank_dir, verbose)
        if code != 0:
            _name_dead_ranks(dead, rank_dir, watch.first_dead())
    return code if code >= 0 else 128 - code


def _wait(proc: subprocess.Popen[bytes], timeout: float | None, watch: _liveness.Watch) -> int:
    """Wait for the job; end it ``_FAILED_GRACE`` seconds after a rank raised an uncaught
    exception if it is still running (MPI aborts by itself; ranks of the torch backend that
    are not in a collective with the failed one would run on)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(0.2 if left is None else min(0.2, left))
        failed = watch.failed_at
        if failed is not None and time.monotonic() - failed > _FAILED_GRACE:
            who = ", ".join(str(f[0]) for f in watch.first_dead())
            print(f"fogrun: rank {who} failed; ending the ranks still running", file=sys.stderr)
            _kill_group(proc)
            code = proc.wait()
            return code if code != 0 else 1


def _report_errors(rank_dir: str, verbose: bool) -> None:
    """Print each distinct error the ranks reported once (with ``verbose`` the ranks
    printed their tracebacks themselves: only which ranks raised what)."""
    reports = _errors.read(rank_dir)
    if reports:
        print(_errors.summary(reports, tracebacks=not verbose), file=sys.stderr)


_DEAD_PID = re.compile(r"\bPID[ :]+(\d+)")


def _relay(stream: Any, to: Any, dead: list[str], banners: _banner.Filter | None = None) -> None:
    """Copy the job's output to ours as it comes (progress bars too), without what
    ``banners`` filters out; note the process ids the launcher reports dead."""
    tail = b""
    for chunk in iter(lambda: stream.read1(1 << 16), b""):
        _write(to, chunk if banners is None else banners.feed(chunk))
        *lines, tail = (tail + chunk).split(b"\n")
        for line in lines:
            dead += _DEAD_PID.findall(line.decode(errors="replace"))
    if banners is not None:
        _write(to, banners.close())
    dead += _DEAD_PID.findall(tail.decode(errors="replace"))


def _write(to: Any, data: bytes) -> None:
    if not data:
        return
    out = getattr(to, "buffer", None)
    if out is not None:
        out.write(data)
        out.flush()
    else:  # a text-only stream (e.g. replaced by a test)
        to.write(data.decode(errors="replace"))
        to.flush()


def _name_dead_ranks(
    pids: list[str], rank_dir: str, first: Sequence[tuple[int, int, str]] = ()
) -> None:
    """Name the rank that ended the job: ``first`` (from the sockets) if it is one rank,
    or the one of them the launcher's ``pids`` name too; else the launcher's ``pids``."""
    reported = list(dict.fromkeys(pids))
    if len(first) > 1:
        first = [f for f in first if str(f[1]) in reported] or first
    if len(first) == 1:
        [(first_rank, first_pid, how)] = first
        print(
            f"fogrun: rank {first_rank} (process {first_pid}) {how} and ended the job",
            file=sys.stderr,
        )
        return
    if first:
        ranks = ", ".join(str(f[0]) for f in first)
        print(
            f"fogrun: ranks {ranks} ended at the same moment, and with them the job",
            file=sys.stderr,
        )
        return
    for pid in reported:
        try:
            with open(os.path.join(rank_dir, pid)) as f:
                rank = f.read().strip()
        except OSError:
            continue
        print(f"fogrun: rank {rank} (process {pid}) died and ended the job", file=sys.stderr)


def _check_mpi4py(options: Options, mpi: _mpi.MPIInfo | None) -> None:
    # Only this interpreter can be asked cheaply; another one named on the command line
    # reports a missing mpi4py itself.
    if options.one_process or options.command[0] not in ("python", "python3", sys.executable):
        return
    if importlib.util.find_spec("mpi4py") is None:
        # The mpich wheel would put a second mpiexec over an installed Open MPI's.
        how = (
            "pip install mpi4py"
            if mpi is not None and mpi.implementation == _mpi.OPENMPI
            else "pip install 'fogsim[mpi]' (mpi4py and the mpich wheel)"
        )
        raise LaunchError(f"mpi4py is not importable by {sys.executable}; install it with: {how}")


def _describe(argv: Sequence[str], changes: Mapping[str, str]) -> str:
    lines = [f"{name}={shlex.quote(value)}" for name, value in sorted(changes.items())]
    return "\n".join([*lines, shlex.join(argv)])


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fogrun`` with the command line ``argv`` (default: ``sys.argv[1:]``).

    Return the job's exit code; 2 for a usage error or a missing MPI, with one line on stderr.
    """
    try:
        options = parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the error
        return exc.code if isinstance(exc.code, int) else _USAGE_EXIT_CODE
    environ = _settings.environ()
    try:
        mpi = None
        if not options.one_process:
            mpi = _mpi.find_mpi(environ)
            if mpi is None:
                raise LaunchError(NO_MPI_MESSAGE)
        command, env = build_command(options, environ, mpi)
        _check_mpi4py(options, mpi)
    except LaunchError as exc:
        print(f"fogrun: {exc}", file=sys.stderr)
        return _USAGE_EXIT_CODE
    if options.dry_run:
        print(_describe(command, env_changes(options, environ, mpi)))
        return 0
    return run(command, env, options.timeout, verbose=options.verbose)
