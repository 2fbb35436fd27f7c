"""Record every communication op of one run: the child process of the mode checker.

``python -m fogsim._checkmodes --child MODE N OUT script.py [args]`` runs the script in
``MODE`` and pickles what it recorded to ``OUT`` (under MPI, to ``OUT.<rank>``, one file per
rank):

* ``sim``: the stacked simulator with N agents; each op is recorded once, stacked;
* ``spmd``: N agent threads (:func:`fogsim.spmd.run_path`); each op runs once, stacked, on
  the simulator's kernels, and is recorded there, as in ``sim``;
* ``mpi``: one process per agent (launched by the checker under ``mpiexec``); each rank
  records its own values, and :func:`stack_ranks` stacks the ranks' records op by op.

A record is ``(op, site, x, out, reads)``: the op's name, the script's line that called it,
its input and output (numpy copies; a list where agents' values differ in shape) and the
agents whose input the op reads (``None``: all; a broadcast reads its root's only).
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import pickle
import runpy
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import _arrays, _context, _notebook
from .._callsite import call_site
from ..backends._stacking import Stacking, stacking_of
from ..backends.sim._collectives import SimCollectives
from ..backends.sim._machines import SimMachines
from ..backends.sim._neighbors import SimNeighbors

__all__ = ["RECORDED", "Record", "child", "stack_ranks"]

#: The ops the checker records: every op of the simulator's parts that takes the agents'
#: values (as its parameters declare, :mod:`fogsim.backends._stacking`), so a new op is
#: recorded as it is written. SPMD runs each of them once for all agents.
RECORDED = tuple(
    name
    for part in (SimCollectives, SimNeighbors, SimMachines)
    for name, method in vars(part).items()
    if not name.startswith("_")
    and callable(method)
    and any(p.stacking in (Stacking.VALUE, Stacking.VALUES) for p in stacking_of(method))
)

#: ``(op, site, x, out, reads)``: plain tuples, which unpickle in any process.
Record = tuple[str, str, Any, Any, "tuple[int, ...] | None"]


def as_numpy(value: Any) -> Any:
    """A numpy copy of an op's value (a list of copies for a list of values)."""
    if isinstance(value, list | tuple) and not _arrays.is_literal(value):
        return [as_numpy(v) for v in value]
    if hasattr(value, "detach"):  # a torch tensor (bfloat16, which numpy lacks, as float32)
        value = value.detach().cpu()
        return (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy().copy()
    return np.array(value, copy=True)


def _reads(op: str, bound: inspect.BoundArguments) -> tuple[int, ...] | None:
    """The agents whose input the op's result depends on (None: every agent's)."""
    if op == "broadcast":
        return (int(bound.arguments["root_rank"]),)
    return None


def _one_value(bound: inspect.BoundArguments) -> bool:
    """Whether the op's input is one value for every agent (a number, a list of numbers)."""
    x = bound.arguments["x"]
    return isinstance(x, numbers.Number | np.generic) or _arrays.is_literal(x)


class Recorder:
    """Record the outermost call of each op in :data:`RECORDED` on a world's parts.

    ``world_cls`` is the world's class and ``part_classes`` the classes of the parts that
    run its ops. Every public method of them is wrapped to count how deep this thread is in
    the backend, so an op that another op calls inside (``global_view`` gathers with
    ``allgather`` when distributed) is not recorded as one the script made. A
    ``*_nonblocking`` op the script calls runs as its blocking op and returns a completed
    handle, as an SPMD agent's does, so that it is recorded once, with its result, in every
    mode.
    """

    def __init__(self, world_cls: type, part_classes: Sequence[type]) -> None:
        self.records: list[Record] = []
        self._classes = (world_cls, *part_classes)
        self._depth = threading.local()

    def install(self) -> None:
        for cls in self._classes:
            methods = dict(inspect.getmembers(cls, inspect.isfunction))
            wrapped = {
                name: self._wrap(name, method)
                for name, method in methods.items()
                if not name.startswith("_")
            }
            for name, method in wrapped.items():
                blocking = wrapped.get(name.removesuffix("_nonblocking"))
                if name.endswith("_nonblocking") and blocking is not None:
                    method = self._eager(name, methods[name], blocking)
                setattr(cls, name, method)

    def _eager(self, name: str, method: Any, blocking: Callable[..., Any]) -> Any:
        recorder = self
        op = name.removesuffix("_nonblocking")
        signature = inspect.signature(method)
        if op not in RECORDED:
            return self._wrap(name, method)

        @functools.wraps(method)
        def started(part: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(recorder._depth, "value", 0):
                return method(part, *args, **kwargs)
            from .._handles import Handle

            result = blocking(part, *args, **kwargs)
            bound = signature.bind(part, *args, **kwargs)
            return Handle.completed(op, result, bound.arguments.get("name"))

        return started

    def _wrap(self, name: str, method: Any) -> Any:
        recorder = self
        records = name in RECORDED
        signature = inspect.signature(method)

        @functools.wraps(method)
        def wrapped(part: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(recorder._depth, "value", 0)
            recorder._depth.value = depth + 1
            try:
                out = method(part, *args, **kwargs)
            finally:
                recorder._depth.value = depth
            if records and depth == 0:  # an op the script called, not one inside another op
                bound = signature.bind(part, *args, **kwargs)
                bound.apply_defaults()
                x = as_numpy(bound.arguments["x"])
                world = _context.current().backend
                if world.capabilities.stacked and isinstance(x, np.ndarray) and _one_value(bound):
                    x = np.broadcast_to(x, (world.size_int, *x.shape))  # what every agent holds
                recorder.records.append((name, call_site(), x, as_numpy(out), _reads(name, bound)))
            return out

        return wrapped


def stack_ranks(per_rank: list[list[Record]]) -> list[Record]:
    """One stacked record per op from each rank's own records (the shortest run's length).

    Rank r's value becomes row r, as the simulator stacks agent r's; values whose shapes
    differ between ranks stay a list of the ranks' values. A position where the ranks
    called different ops ends the sequence: the op and line of rank 0 are kept, the rest
    is reported by the comparison.
    """
    stacked: list[Record] = []
    for ops in zip(*per_rank, strict=False):
        op, site, _, _, reads = ops[0]
        if any(r[0] != op for r in ops):
            break
        stacked.append((op, site, _stack([r[2] for r in ops]), _stack([r[3] for r in ops]), reads))
    return stacked


def _stack(values: list[Any]) -> Any:
    if all(isinstance(v, np.ndarray) for v in values):
        first = values[0]
        if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
            return np.stack(values)
    return list(values)


def child(mode: str, size: int, out_path: str, script: str, argv: list[str]) -> None:
    """Run ``script`` in ``mode`` and pickle what was recorded (see the module docstring)."""
    rank = None
    if mode == "mpi":
        from mpi4py import MPI

        from ..backends._runtime.machines import MachineOps
        from ..backends._runtime.neighbor import NeighborOps
        from ..backends.mpi._backend import MPIBackend
        from ..backends.mpi._collectives import MpiCollectives

        rank = MPI.COMM_WORLD.Get_rank()
        out_path = f"{out_path}.{rank}"
        recorder = Recorder(MPIBackend, [MpiCollectives, NeighborOps, MachineOps])
    else:
        from ..backends.sim import SimBackend
        from ..backends.sim._collectives import SimCollectives
        from ..backends.sim._machines import SimMachines
        from ..backends.sim._neighbors import SimNeighbors

        recorder = Recorder(SimBackend, [SimCollectives, SimNeighbors, SimMachines])
    recorder.install()
    from ..run import _bluefog

    _bluefog.install_from_environ()  # fogrun --check-modes --bluefog
    error = None
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        if mode != "spmd" and _notebook.is_notebook(script):
            namespace = {"__name__": "__main__", "__file__": script, "__builtins__": __builtins__}
            for cell in _notebook.notebook_code(script):
                exec(cell, namespace)
        elif mode != "spmd":
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
        pickle.dump({"records": recorder.records, "error": error, "rank": rank}, f)
    if error is not None and mode == "mpi":  # the other ranks may wait in an op for this one
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
