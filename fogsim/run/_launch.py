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
from . import _banner, _errors, _liveness, _mpi, _status, _warnings
from ._cli import Options, parse_args
from ._command import NO_MPI_MESSAGE, LaunchError, build_command, env_changes

__all__ = ["TIMEOUT_EXIT_CODE", "main", "run"]

#: Exit code of a job killed by ``--timeout`` (the one of coreutils' ``timeout``).
TIMEOUT_EXIT_CODE = 124
_USAGE_EXIT_CODE = 2
_NOT_FOUND_EXIT_CODE = 127
# Seconds between SIGTERM (mpiexec cleans up its ranks) and SIGKILL to the process group.
_KILL_GRACE = 3.0
# Seconds ranks may outlive their launcher (Hydra's proxies end them) before fogrun does.
_STRAY_GRACE = 2.0
# Signals that end fogrun: each ends the job (SIGINT as Ctrl-C; the others as SIGTERM).
_FORWARDED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
# Seconds the job may run on after a rank raised an uncaught exception before fogrun ends it.
_FAILED_GRACE = 3.0


class _Job:
    """The running job: its process, the ranks' sockets, the Ctrl-C presses so far, and
    the signal that told fogrun to end (SIGTERM, SIGHUP)."""

    def __init__(
        self, proc: subprocess.Popen[bytes], watch: _liveness.Watch, rank_dir: str
    ) -> None:
        self.proc = proc
        self.watch = watch
        self.rank_dir = rank_dir
        self.interrupts = 0
        self.terminated: int | None = None  # the signal number
        self.terminated_at = 0.0  # time.monotonic() when it came
        self.killed = False  # the job did not end on SIGTERM: fogrun killed it

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the launcher's process group (never waits: a signal handler
        calls this); SIGKILL also goes to every rank still alive, since Hydra starts each
        rank in a session of its own, out of reach of the group."""
        if not hasattr(os, "killpg"):  # pragma: no cover - Windows
            with contextlib.suppress(OSError):
                self.proc.send_signal(sig)
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            for _, pid in self.watch.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def kill(self) -> None:
        """End the job: SIGTERM (the launcher cleans up its ranks), SIGKILL after a grace."""
        for sig, grace in ((signal.SIGTERM, _KILL_GRACE), (signal.SIGKILL, None)):
            self.signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)

    def end_strays(self) -> None:
        """After the launcher has ended: SIGKILL ranks still alive a moment later."""
        deadline = time.monotonic() + _STRAY_GRACE
        while self.watch.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.watch.alive():
            self.signal(signal.SIGKILL)
            deadline = time.monotonic() + _STRAY_GRACE
            while self.watch.alive() and time.monotonic() < deadline:
                time.sleep(0.05)


@contextlib.contextmanager
def _forwarding_signals(job: _Job) -> Iterator[None]:
    # The child is in its own session, so a terminal's Ctrl-C reaches only fogrun: pass
    # SIGINT/SIGTERM on to mpiexec, which relays them to every rank. A second Ctrl-C kills
    # the job at once.
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: object) -> None:
        if signum != signal.SIGINT:  # fogrun is told to end: so is the job, by SIGTERM
            if job.terminated is not None:  # told twice: at once
                job.killed = True
                job.signal(signal.SIGKILL)
                return
            job.terminated, job.terminated_at = signum, time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                job.proc.send_signal(signal.SIGTERM)
            return
        job.interrupts += 1
        if job.interrupts > 1:
            job.signal(signal.SIGKILL)
            return
        # the KeyboardInterrupt that follows is told in fogrun's one line (_errors)
        with contextlib.suppress(OSError):
            open(os.path.join(job.rank_dir, _errors.INTERRUPTED_NAME), "w").close()
        with contextlib.suppress(ProcessLookupError):
            job.proc.send_signal(signum)

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
    ranks: int | None = None,
) -> int:
    """Run ``argv`` with environment ``env``; return its exit code.

    After ``timeout`` seconds the child's whole process group is killed and
    `TIMEOUT_EXIT_CODE` returned. Ranks that raise report the exception in
    ``FOGSIM_RANK_DIR`` instead of printing it (`fogsim.run._errors`): each distinct error is
    printed once, with the ranks that raised it and the traceback of the first; so is each
    warning that ``ranks`` (the job's number of processes, when known) print alike
    (`fogsim.run._warnings`), while the job runs. The MPI launchers' abort banners are left
    out of the job's output. The exit code is that of the rank that failed first
    (`fogsim.run._status`), named with its rank; a child killed by signal ``s`` gives
    ``128 + s``, as in a shell. Ctrl-C (SIGINT) is passed on to the job and reported in one
    line, with exit code 130; a second Ctrl-C kills the job at once. SIGTERM or SIGHUP to
    fogrun end the job (SIGTERM to the launcher, SIGKILL to what is left after 3 s, or at
    once on a second signal), told in one line that blames no rank, with exit code
    ``128 + s``. A rank that ended the job with a stall report (`fogsim.StallError`) is named
    as stalled, with the ranks it waited for. ``verbose`` keeps every rank's traceback and
    warnings, and the launchers' messages.
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
        job = _Job(proc, watch, rank_dir)
        dead: list[str] = []  # MPICH's launcher reports dead processes on either stream
        codes = [_status.ExitCodes(), _status.ExitCodes()]
        relays = [
            threading.Thread(
                target=_relay,
                daemon=True,
                args=(stream, to, dead, None if verbose else _banner.Filter(), report),
            )
            for stream, to, report in zip(
                (proc.stdout, proc.stderr), (sys.stdout, sys.stderr), codes, strict=True
            )
        ]
        for relay in relays:
            relay.start()
        collector = None if verbose else _warnings.Collector(rank_dir, ranks, _print_err)
        try:
            with _forwarding_signals(job):
                code = _wait(job, timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            _finish(job, relays, collector)
            _report_errors(rank_dir, verbose)
            print(f"fogrun: timed out after {timeout:g} s; killed the job", file=sys.stderr)
            return TIMEOUT_EXIT_CODE
        finally:
            if proc.poll() is None:  # fogrun itself is failing: take the job down with it
                job.kill()
        _finish(job, relays, collector)
        code = code if code >= 0 else 128 - code
        if job.terminated is not None:  # no rank ended the job: fogrun did, as told
            _report_errors(rank_dir, verbose)
            name = signal.Signals(job.terminated).name
            count = "" if ranks is None else f" ({ranks} rank{'s' if ranks != 1 else ''})"
            how = "killed" if job.killed else "ended"
            print(f"fogrun: terminated ({name}): {how} the job{count}", file=sys.stderr)
            return 128 + job.terminated
        if job.interrupts:
            _report_errors(rank_dir, verbose, interrupted=True)
            twice = job.interrupts > 1
            how = "(Ctrl-C twice): killed" if twice else "(Ctrl-C): ended"
            count = "" if ranks is None else f" ({ranks} rank{'s' if ranks != 1 else ''})"
            print(f"fogrun: interrupted {how} the job{count}", file=sys.stderr)
            return _status.INTERRUPTED if code != 0 else 0
        _report_errors(rank_dir, verbose)
        if code == 0:
            return 0
        first = watch.first_dead()
        if len(first) > 1:  # gone in the same instant: the launcher's report may tell
            first = [f for f in first if str(f[1]) in dead] or first
        ending = _status.first_ending(
            _status.read(rank_dir), first, watch.first_dead_at(), _by_rank(codes)
        )
        if ending is not None and ending.stalled:
            [(rank, pid)] = zip(ending.ranks, ending.pids, strict=True)
            print(
                f"fogrun: rank {rank} (process {pid}) stalled: it {ending.how}; its stall "
                "report ended the job",
                file=sys.stderr,
            )
            return ending.code or code
        if ending is not None:
            first = [(r, p, ending.how) for r, p in zip(ending.ranks, ending.pids, strict=True)]
        _name_dead_ranks(dead, rank_dir, first)
        return ending.code if ending is not None and ending.code else code


def _by_rank(codes: Sequence[_status.ExitCodes]) -> dict[int, int]:
    for report in codes:
        found = report.by_rank()
        if found:
            return found
    return {}


def _finish(
    job: _Job, relays: Sequence[threading.Thread], collector: _warnings.Collector | None
) -> None:
    """After the launcher has ended: no rank left running, all output and reports read."""
    job.end_strays()
    for relay in relays:
        relay.join(5)
    job.watch.close()
    if collector is not None:
        collector.close()


def _wait(job: _Job, timeout: float | None) -> int:
    """Wait for the job; end it ``_FAILED_GRACE`` seconds after a rank raised an uncaught
    exception if it is still running (MPI aborts by itself; ranks of the torch backend that
    are not in a collective with the failed one would run on)."""
    proc, watch = job.proc, job.watch
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired(proc.args, timeout or 0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(0.2 if left is None else min(0.2, left))
        if job.terminated is not None:
            if not job.killed and time.monotonic() - job.terminated_at > _KILL_GRACE:
                job.killed = True  # SIGTERM did not end it
                job.signal(signal.SIGKILL)
            continue
        failed = watch.failed_at
        if failed is not None and time.monotonic() - failed > _FAILED_GRACE:
            if not job.interrupts:  # after Ctrl-C, every rank fails: nothing to tell
                ranks = [f[0] for f in watch.first_dead()]
                said = _status.stalled_line(_status.read(job.rank_dir), ranks)
                who = said or f"rank {', '.join(map(str, ranks))} failed"
                print(f"fogrun: {who}; ending the ranks still running", file=sys.stderr)
            job.kill()
            code = proc.wait()
            return code if code != 0 else 1


def _report_errors(rank_dir: str, verbose: bool, interrupted: bool = False) -> None:
    """Print each distinct error the ranks reported once (with ``verbose`` the ranks
    printed their tracebacks themselves: only which ranks raised what). After Ctrl-C the
    ranks' ``KeyboardInterrupt`` is fogrun's one line, unless ``verbose``."""
    reports = _errors.read(rank_dir)
    if interrupted and not verbose:
        reports = [r for r in reports if r.get("error") != "KeyboardInterrupt"]
    if reports:
        print(_errors.summary(reports, tracebacks=not verbose), file=sys.stderr)


def _print_err(text: str) -> None:
    _write(sys.stderr, text.encode())


_DEAD_PID = re.compile(r"\bPID[ :]+(\d+)")


def _relay(
    stream: Any,
    to: Any,
    dead: list[str],
    banners: _banner.Filter | None = None,
    codes: _status.ExitCodes | None = None,
) -> None:
    """Copy the job's output to ours as it comes (progress bars too), without what
    ``banners`` filters out; note the process ids the launcher reports dead, and its
    report of every process's exit status in ``codes``."""
    tail = b""
    for chunk in iter(lambda: stream.read1(1 << 16), b""):
        _write(to, chunk if banners is None else banners.feed(chunk))
        *lines, tail = (tail + chunk).split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            dead += _DEAD_PID.findall(text)
            if codes is not None:
                codes.feed(text.rstrip("\r"))
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
    ranks = None if options.one_process else options.shards if options.sharded else options.np
    return run(command, env, options.timeout, verbose=options.verbose, ranks=ranks)
