"""The mode checker: run one script in two modes and compare every communication op.

``fogrun --check-modes -np N script.py [args]`` or :func:`fogsim.check_modes` runs the script
(or a Jupyter notebook's code cells, top to bottom: call sites then read
``notebook.ipynb[cell K]:line``) twice, each in a child process of its own: once on the
simulator with N stacked agents (``FOGSIM_BACKEND=sim``, ``FOGSIM_SIZE=N``) and once as N
SPMD agent threads (:func:`fogsim.spmd.run_path`). Both modes execute every communication op
on the simulator's kernels (an SPMD op stacks the agents' values and runs once), so the checker
records, at that one place, each op's name, the line of the script that called it, its stacked
input and its stacked output. The two sequences must then agree op by op: same op, same
per-agent shape, values equal to round-off (relative 1e-12 in float64, 1e-5 in float32,
1e-2 in half precision; integers exactly). The first op where they do not is reported with its
call site, the agent, the shapes and the largest difference. An input counts only where the
op's result depends on it: a broadcast's non-root values are not compared (replicas built
apart and then broadcast from the root, as ``fogsim.optim.broadcast_parameters`` does, agree).

Code written for one agent at a time (BlueFog's, which reads a scalar rank) cannot run
stacked: ``fogrun --bluefog --check-modes`` (``modes=("spmd", "mpi")``) compares the SPMD
agents with an MPI run instead, one process per agent under the venv's ``mpiexec``, each
rank recording its own values, stacked op by op afterwards. In every recorded run a
``*_nonblocking`` op completes where it is called, as an SPMD agent's does, so that it is
recorded with its result, and the optimizer wrappers of :mod:`fogsim.optim` communicate as
in one process (whole steps in ``step()``, one fused message per dtype; the numbers are the
same either way): runs in different modes then make the same ops.

Per-agent code that is not batch-friendly (``A.T @ (A @ w - b)`` with stacked ``A`` and
``w`` broadcasts instead of multiplying each agent's own matrix) shows up as an input whose
per-agent shape differs between the modes. What it cannot see: computation that never reaches
an op (a final print of a wrongly shaped value), window ops (``win_*``; not recorded), and a
script whose two runs take different paths for reasons of their own (wall-clock time, its own
unseeded global randomness). Recording copies every op's input and output: a checked run is
slower and holds every op's values in memory, so check a short run (few iterations).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import _settings
from ._compare import MODE_NAMES, compare
from ._record import Record, stack_ranks

__all__ = ["ModeReport", "check_modes"]

_DEFAULT_MODES = ("sim", "spmd")


@dataclass
class ModeReport:
    """What :func:`check_modes` found: ``ok`` when every recorded op agreed."""

    size: int
    ops: int = 0
    difference: str | None = None  # the first disagreement, in words
    errors: dict[str, str] = field(default_factory=dict)  # mode -> the script's failure
    modes: tuple[str, str] = _DEFAULT_MODES  # the two runs compared

    @property
    def ok(self) -> bool:
        return self.difference is None and not self.errors

    def _name(self, mode: str) -> str:
        return MODE_NAMES[mode].format(n=self.size)

    def __str__(self) -> str:
        if self.ok:
            a, b = (self._name(m) for m in self.modes)
            return f"fogsim check-modes: {self.ops} ops agree, {a} and {b}"
        lines = ["fogsim check-modes: the modes differ"]
        for mode, error in self.errors.items():
            lines.append(f"the script failed {self._name(mode)}:\n{error.rstrip()}")
        if self.difference:
            lines.append(self.difference)
        return "\n".join(lines)


def _child_env(size: int, bluefog: bool) -> dict[str, str]:
    env = {k: v for k, v in _settings.environ().items() if not k.startswith("FOGSIM_")}
    env.update(FOGSIM_SIZE=str(size), FOGSIM_CHECK_MODES="1")
    if bluefog:
        env["FOGSIM_BLUEFOG"] = _settings.environ().get("FOGSIM_BLUEFOG", "") or "1"
    env.setdefault("MPLBACKEND", "Agg")  # a checked script's plt.show() opens nothing
    return env


def _command(mode: str, size: int, out: str, script: str, argv: Sequence[str]) -> list[str]:
    child = [sys.executable, "-m", "fogsim._checkmodes", "--child", mode, str(size), out]
    return [*child, script, *map(str, argv)]


def _launch(
    mode: str, size: int, out: str, script: str, argv: Sequence[str], env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The child's command line and environment: one process, or ``mpiexec -n size``."""
    command = _command(mode, size, out, script, argv)
    if mode != "mpi":
        env = {**env, "FOGSIM_BACKEND": "sim"}
        return command, env
    from ..run import Options, build_command, find_mpi
    from ..run._command import NO_MPI_MESSAGE

    mpi = find_mpi(env)
    if mpi is None:
        raise ValueError(f"checking against MPI needs mpiexec: {NO_MPI_MESSAGE}")
    options = Options(np=size, command=tuple(command), bluefog="FOGSIM_BLUEFOG" in env)
    return build_command(options, {**env, "FOGSIM_BACKEND": "mpi"}, mpi)


def _run_child(
    command: list[str], env: Mapping[str, str], timeout: float | None
) -> tuple[int | None, str]:
    """Run one child (its own process group, killed whole on time-out): (exit code, stderr)."""
    proc = subprocess.Popen(
        command,
        env=dict(env),
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, ""
    return proc.returncode, err


def _records(mode: str, out: str, size: int) -> tuple[list[Record] | None, str | None]:
    """(the run's records, stacked; the script's error) from the child's pickles."""
    if mode != "mpi":
        if not os.path.exists(out):
            return None, None
        with open(out, "rb") as f:
            run = pickle.load(f)
        return run["records"], run["error"]
    runs = []
    for rank in range(size):
        if os.path.exists(f"{out}.{rank}"):
            with open(f"{out}.{rank}", "rb") as f:
                runs.append(pickle.load(f))
    errors = [f"rank {r['rank']}: {r['error']}" for r in runs if r["error"]]
    error = "\n".join(errors) or None
    if len(runs) < size:  # a rank failed and the job was aborted: its error says why
        return None, error
    return stack_ranks([r["records"] for r in runs]), error


def check_modes(
    script: str | os.PathLike[str],
    size: int,
    argv: list[str] | tuple[str, ...] = (),
    timeout: float | None = 600,
    *,
    modes: tuple[str, str] = _DEFAULT_MODES,
    bluefog: bool = False,
) -> ModeReport:
    """Run ``script`` in two ``modes`` with ``size`` agents; return where the ops differ.

    ``script`` is a Python file or a Jupyter notebook (``.ipynb``, its code cells in order).
    ``modes`` names the two runs, any two of ``"sim"`` (``size`` stacked agents in one
    process), ``"spmd"`` (``size`` agent threads of one process) and ``"mpi"`` (``size``
    processes under the venv's ``mpiexec``; a notebook cannot run so). ``bluefog=True``
    runs BlueFog code unchanged (``import bluefog.torch as bf`` gets
    :mod:`fogsim.compat.bluefog`, as under ``fogrun --bluefog``); such code reads a scalar
    rank, so compare ``("spmd", "mpi")``.

    Each run is a child process of this Python (or an MPI job; ``timeout`` seconds each),
    with the script's ``argv``; see the module ``fogsim._checkmodes`` for what is compared.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")
    script = os.fspath(script)
    if not os.path.isfile(script):
        raise ValueError(f"script {script!r} is not a file")
    given = tuple(modes)
    if len(given) != 2 or len(set(given)) != 2 or not set(given) <= set(MODE_NAMES):
        raise ValueError(
            f"modes must be two different modes of {sorted(MODE_NAMES)}, got {modes!r}"
        )
    modes = (given[0], given[1])
    if "mpi" in modes and script.endswith(".ipynb"):
        raise ValueError("a notebook cannot run under MPI: check it with modes=('sim', 'spmd')")
    if not isinstance(bluefog, bool):
        raise TypeError(f"bluefog must be a bool, got {type(bluefog).__name__}")
    report = ModeReport(size, modes=modes)
    runs: dict[str, list[Record]] = {}
    with tempfile.TemporaryDirectory(prefix="fogsim-check-") as tmp:
        for mode in modes:
            out = os.path.join(tmp, f"{mode}.pickle")
            command, env = _launch(mode, size, out, script, argv, _child_env(size, bluefog))
            code, stderr = _run_child(command, env, timeout)
            if code is None:
                report.errors[mode] = f"did not finish in {timeout} s"
                continue
            records, error = _records(mode, out, size)
            if error:
                report.errors[mode] = error
            elif records is None:
                report.errors[mode] = stderr[-3000:] or f"exit code {code}"
            if records is not None:
                runs[mode] = records
    if len(runs) == 2:  # also after a failure: the first difference often explains it
        report.ops, report.difference = compare(runs[modes[0]], runs[modes[1]], modes, size)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m fogsim._checkmodes -np N script.py [args]`` (what fogrun --check-modes runs).

    Under ``fogrun --bluefog`` (``FOGSIM_BLUEFOG`` set) the script is BlueFog code, compared
    as SPMD agents and under MPI. Print the report; return 0 when the modes agree, 1 when
    they differ, 2 on a usage error.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="fogrun --check-modes",
        description="Run a script simulated and as N SPMD agents (BlueFog code: as N SPMD "
        "agents and under MPI); name the first op that differs.",
    )
    parser.add_argument("-np", "-n", dest="np", type=int, required=True, metavar="N")
    parser.add_argument("--local-size", type=int, metavar="K", help="ignored (machines)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if ns.script == "--" and args:
        ns.script, args = args[0], args[1:]
    bluefog = bool(_settings.environ().get("FOGSIM_BLUEFOG", "").strip())
    modes = ("spmd", "mpi") if bluefog else _DEFAULT_MODES
    try:
        report = check_modes(ns.script, ns.np, args, modes=modes, bluefog=bluefog)
    except ValueError as exc:
        print(f"fogrun --check-modes: {exc}", file=sys.stderr)
        return 2
    print(report, file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else 1
