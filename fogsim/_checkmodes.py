"""The mode checker: run one script simulated and as N SPMD agents, and compare every op.

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
call site, the agent, the shapes and the largest difference.

Per-agent code that is not batch-friendly (``A.T @ (A @ w - b)`` with stacked ``A`` and
``w`` broadcasts instead of multiplying each agent's own matrix) shows up as an input whose
per-agent shape differs between the modes. What it cannot see: computation that never reaches
an op (a final print of a wrongly shaped value), window ops (``win_*``; not recorded), and a
script whose two runs take different paths for reasons of their own (wall-clock time, its own
unseeded global randomness). Recording copies every op's input and output: a checked run is
slower and holds every op's values in memory, so check a short run (few iterations).
"""

from __future__ import annotations

import functools
import os
import pickle
import runpy
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _notebook, _settings
from ._callsite import call_site

__all__ = ["ModeReport", "check_modes"]

#: The simulator's ops the checker records (SPMD runs each of them once for all agents).
RECORDED = (
    "allreduce",
    "local_allreduce",
    "decomposed_allreduce",
    "allgather",
    "broadcast",
    "neighbor_allreduce",
    "neighbor_allgather",
    "hierarchical_neighbor_allreduce",
)
#: "Equal to round-off": relative and absolute tolerances by the values' precision. Batched and
#: per-agent kernels (a stacked bmm, one agent's mm) may round differently.
_TOLERANCES = {8: (1e-12, 1e-14), 4: (1e-5, 1e-7), 2: (1e-2, 1e-4)}


def _tolerances(dtype: np.dtype) -> tuple[float, float]:
    if dtype.kind not in "fc":
        return 0.0, 0.0  # integers and booleans: equal
    return _TOLERANCES.get(
        np.dtype(dtype).itemsize // (2 if dtype.kind == "c" else 1), _TOLERANCES[8]
    )


@dataclass
class _Record:
    op: str
    site: str
    x: Any  # the stacked input (an array, or a list of arrays when ragged)
    out: Any


def _as_numpy(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_as_numpy(v) for v in value]
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy().copy()
    return np.array(value, copy=True)


class _Recorder:
    """Wraps the simulator's ops for one run; records the outermost call of each."""

    def __init__(self) -> None:
        self.records: list[_Record] = []
        self._depth = threading.local()

    def install(self) -> None:
        from .backends.sim import SimBackend

        for op in RECORDED:
            setattr(SimBackend, op, self._wrap(op, getattr(SimBackend, op)))

    def _wrap(self, op: str, method: Any) -> Any:
        recorder = self

        @functools.wraps(method)
        def recorded(backend: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(recorder._depth, "value", 0)
            recorder._depth.value = depth + 1
            try:
                out = method(backend, x, *args, **kwargs)
            finally:
                recorder._depth.value = depth
            if depth == 0:  # an op the user called, not one inside another op
                recorder.records.append(_Record(op, call_site(), _as_numpy(x), _as_numpy(out)))
            return out

        return recorded


def _child(mode: str, size: int, out_path: str, script: str, argv: list[str]) -> None:
    """Run ``script`` in ``mode`` (``sim`` or ``spmd``) and pickle what was recorded."""
    recorder = _Recorder()
    recorder.install()
    from .compat.bluefog import _alias

    _alias.install_from_environ()  # fogrun --check-modes --bluefog
    error = None
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        if mode == "sim" and _notebook.is_notebook(script):
            namespace = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
            for cell in _notebook.notebook_code(script):
                exec(cell, namespace)
        elif mode == "sim":
            runpy.run_path(script, run_name="__main__")
        else:
            import fogsim.spmd

            fogsim.spmd.run_path(script, size=size, argv=argv)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            error = f"SystemExit({exc.code!r})"
    except BaseException:  # noqa: BLE001 - reported by the parent
        error = traceback.format_exc(limit=8)
    with open(out_path, "wb") as f:
        # plain tuples: this module runs as __main__ here, its classes would not unpickle
        records = [(r.op, r.site, r.x, r.out) for r in recorder.records]
        pickle.dump({"records": records, "error": error}, f)


@dataclass
class ModeReport:
    """What :func:`check_modes` found: ``ok`` when every recorded op agreed."""

    size: int
    ops: int = 0
    difference: str | None = None  # the first disagreement, in words
    errors: dict[str, str] = field(default_factory=dict)  # mode -> the script's failure

    @property
    def ok(self) -> bool:
        return self.difference is None and not self.errors

    def __str__(self) -> str:
        if self.ok:
            return (
                f"fogsim check-modes: {self.ops} ops agree, simulated and as {self.size} "
                "SPMD agents"
            )
        lines = ["fogsim check-modes: the modes differ"]
        for mode, error in self.errors.items():
            lines.append(f"the script failed {_MODE_NAMES[mode]}:\n{error.rstrip()}")
        if self.difference:
            lines.append(self.difference)
        return "\n".join(lines)


_MODE_NAMES = {"sim": "simulated", "spmd": "as SPMD agents"}


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)} (ragged)"
    return str(tuple(value.shape))


def _differ(i: int, sim: _Record, spmd: _Record, size: int) -> str | None:
    """Describe how op ``i`` differs between the two runs, or None when it agrees."""
    where = f"op {i + 1} ({sim.op}) at {sim.site}"
    if sim.op != spmd.op:
        return (
            f"op {i + 1} differs: simulated it is {sim.op} at {sim.site}, as SPMD agents "
            f"{spmd.op} at {spmd.site}"
        )
    if sim.site != spmd.site:  # the same op from another line (e.g. a hook): compare the values
        where = f"op {i + 1} ({sim.op}) at {sim.site} simulated, {spmd.site} as SPMD agents"
    for what, a, b in (("input", sim.x, spmd.x), ("output", sim.out, spmd.out)):
        if isinstance(a, list) or isinstance(b, list):
            if _shape(a) != _shape(b):
                return f"{where}: {what} is {_shape(a)} simulated, {_shape(b)} as SPMD agents"
            continue
        if a.shape != b.shape:
            text = (
                f"{where}: its {what} is {tuple(a.shape)} simulated but {tuple(b.shape)} as "
                f"{size} SPMD agents"
            )
            if a.ndim and b.ndim and a.shape[0] == b.shape[0] == size:
                text += (
                    f": each agent's value is {tuple(a.shape[1:])} simulated, "
                    f"{tuple(b.shape[1:])} per agent. Per-agent code that is not "
                    "batch-friendly (e.g. A.T @ (A @ w - b) on stacked A and w) broadcasts "
                    "over the agent axis in the simulator: write it with batched "
                    "operations (np.einsum, A @ w[..., None]) or wrap it in "
                    "fs.vmap"
                )
            return text
        if a.dtype != b.dtype:
            return f"{where}: {what} dtype {a.dtype} simulated, {b.dtype} as SPMD agents"
        rtol, atol = _tolerances(a.dtype)
        if a.size and not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
            agent = int(np.argmax(gap.reshape(gap.shape[0], -1).max(axis=1))) if a.ndim else 0
            return (
                f"{where}: {what} of agent {agent} differs by up to {np.nanmax(gap):.3g} "
                f"(shape {tuple(a.shape)})"
            )
    return None


def compare(sim: list[_Record], spmd: list[_Record], size: int) -> tuple[int, str | None]:
    """(ops compared, the first difference or None)."""
    for i, (a, b) in enumerate(zip(sim, spmd, strict=False)):
        found = _differ(i, a, b, size)
        if found:
            return i + 1, found
    if len(sim) != len(spmd):
        shorter, longer = (
            ("simulated", "as SPMD agents")
            if len(sim) < len(spmd)
            else ("as SPMD agents", "simulated")
        )
        extra = (spmd if len(sim) < len(spmd) else sim)[min(len(sim), len(spmd))]
        return min(len(sim), len(spmd)), (
            f"the script made {len(sim)} ops simulated and {len(spmd)} as SPMD agents: "
            f"{shorter} it stopped before op {min(len(sim), len(spmd)) + 1} "
            f"({extra.op} at {extra.site}), which ran {longer}"
        )
    return len(sim), None


def check_modes(
    script: str | os.PathLike[str],
    size: int,
    argv: list[str] | tuple[str, ...] = (),
    timeout: float | None = 600,
) -> ModeReport:
    """Run ``script`` simulated and as ``size`` SPMD agents; return where the ops differ.

    ``script`` is a Python file or a Jupyter notebook (``.ipynb``, its code cells in order).

    Each run is a child process of this Python (``timeout`` seconds each), with the
    script's ``argv``; see the module ``fogsim._checkmodes`` for what is compared.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")
    script = os.fspath(script)
    if not os.path.isfile(script):
        raise ValueError(f"script {script!r} is not a file")
    import tempfile

    report = ModeReport(size)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="fogsim-check-") as tmp:
        for mode in ("sim", "spmd"):
            out = os.path.join(tmp, f"{mode}.pickle")
            env = {
                k: v
                for k, v in _settings.environ().items()
                if not k.startswith("FOGSIM_") or k == "FOGSIM_BLUEFOG"
            }
            env.update(FOGSIM_BACKEND="sim", FOGSIM_SIZE=str(size))
            env.setdefault("MPLBACKEND", "Agg")  # a checked script's plt.show() opens nothing
            cmd = [
                sys.executable,
                "-m",
                "fogsim._checkmodes",
                "--child",
                mode,
                str(size),
                out,
                script,
                *map(str, argv),
            ]
            try:
                done = subprocess.run(
                    cmd,
                    env=env,
                    timeout=timeout,
                    text=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            except subprocess.TimeoutExpired:
                report.errors[mode] = f"did not finish in {timeout} s"
                continue
            if not os.path.exists(out):
                report.errors[mode] = done.stderr[-3000:] or f"exit code {done.returncode}"
                continue
            with open(out, "rb") as f:
                runs[mode] = pickle.load(f)
            if runs[mode]["error"]:
                report.errors[mode] = runs[mode]["error"]
    if len(runs) == 2:  # also after a failure: the first difference often explains it
        sim, spmd = ([_Record(*r) for r in runs[m]["records"]] for m in ("sim", "spmd"))
        report.ops, report.difference = compare(sim, spmd, size)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m fogsim._checkmodes -np N script.py [args]`` (what fogrun --check-modes runs).

    Print the report; return 0 when the modes agree, 1 when they differ, 2 on a usage error.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="fogrun --check-modes",
        description="Run a script simulated and as N SPMD agents; name the first op that differs.",
    )
    parser.add_argument("-np", "-n", dest="np", type=int, required=True, metavar="N")
    parser.add_argument("--local-size", type=int, metavar="K", help="ignored (machines)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    if ns.script == "--" and args:
        ns.script, args = args[0], args[1:]
    try:
        report = check_modes(ns.script, ns.np, args)
    except ValueError as exc:
        print(f"fogrun --check-modes: {exc}", file=sys.stderr)
        return 2
    print(report, file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:])
    else:
        sys.exit(main())
