"""Start the agent threads of an SPMD run and collect what they return or raise."""

from __future__ import annotations

import builtins
import io
import numbers
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _context, _notebook, _settings
from .._context import Context
from . import _random
from ._errors import SpmdAborted
from ._world import World

if TYPE_CHECKING:
    from .._types import TopologyLike

__all__ = ["Agent", "run", "run_path"]


class Agent:
    """One agent thread of a run: its rank, the shared :class:`World`, its context.

    ``fogsim.init()`` and ``fogsim.shutdown()`` called in the thread come here (see
    :func:`fogsim._context.spmd_agent`).
    """

    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank = world, rank
        self.context: Context | None = None

    def init(
        self,
        backend: str | None = None,
        size: int | None = None,
        topology: TopologyLike | None = None,
        seed: int | None = None,
        local_size: int | None = None,
    ) -> Context:
        """Start this agent's view of a fresh simulated world (a rendezvous of all agents).

        ``size`` must be the run's; the other arguments are :func:`fogsim.init`'s, with the
        run's ``topology`` and ``seed`` as defaults.
        """
        if backend is not None and (not isinstance(backend, str) or backend.lower() != "spmd"):
            raise ValueError(
                f"init(backend={backend!r}) inside fogsim.spmd.run: the agents of an SPMD "
                "run share one in-process world; leave backend out (or pass 'spmd')"
            )
        ctx = Context(
            backend="spmd",
            size=size,
            topology=self.world.topology if topology is None else topology,
            seed=self.world.seed if seed is None else seed,
            local_size=local_size,
        )
        old, self.context = self.context, ctx
        if self.world.settings.timeline:  # FOGSIM_TIMELINE: PREFIX<rank>.json per agent
            from .. import timeline

            timeline.start_agent(self.world.settings.timeline, self.rank)
        stack = _context._thread.stack  # this thread's current contexts (`with ctx:` blocks)
        if old is not None and old in stack:
            stack[stack.index(old)] = ctx
        else:
            _context.push(ctx)
        if old is not None:
            old.close()
        return ctx

    def shutdown(self) -> None:
        """Close this agent's context and timeline (no rendezvous; the others close theirs)."""
        if self.context is not None:
            self.context.close()
        if self.world.settings.timeline:
            from .. import timeline

            timeline.stop_agent(self.rank)

    def main(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        results: list[Any],
        errors: dict[int, BaseException],
    ) -> None:
        """The thread's body: ``results[rank] = fn(*args)`` with this agent's context."""
        _context.set_spmd_agent(self)
        _random.enter_agent()
        depth = len(_context._thread.stack)
        try:
            self.init()
            results[self.rank] = fn(*args)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                errors[self.rank] = exc
                self.world.fail(self.rank, exc)
            else:
                self.world.finish(self.rank)
        except BaseException as exc:
            errors[self.rank] = exc
            self.world.fail(self.rank, exc)
        else:
            self.world.finish(self.rank)
        finally:
            _context.pop_to(depth)
            if self.context is not None:
                self.context.close()
            if self.world.settings.timeline:
                from .. import timeline

                timeline.stop_agent(self.rank)
            _random.leave_agent()
            _context.set_spmd_agent(None)


def _size(size: Any, settings: _settings.Settings) -> int:
    if size is None:
        size = settings.size or _settings.DEFAULT_SIM_SIZE
    if isinstance(size, bool) or not isinstance(size, numbers.Integral):
        raise TypeError(f"size must be an integer, got {type(size).__name__}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    return int(size)


def run(
    main: Callable[..., Any],
    *args: Any,
    size: int | None = None,
    topology: TopologyLike | None = None,
    seed: int | None = None,
    local_size: int | None = None,
    timeout: float | None = None,
) -> list[Any]:
    """Run ``main(*args)`` as ``size`` agents, one thread each; return their results in rank order.

    Each thread sees its own agent, as an MPI process does: ``fogsim.rank()`` is its int
    rank, ops take and return its own arrays or tensors, and ``fogsim.init()`` in it starts
    its view of the run (the run has started one already). Every op is a rendezvous run once
    for all agents by the simulator, so the numbers equal the MPI runtime's for the same
    script. As in separate processes, each agent has random state of its own: numpy's
    legacy ``np.random.*`` functions and torch's default CPU generator (``torch.manual_seed``,
    ``torch.rand``, ``nn.Linear``'s initialization, ...) act per agent during the run (see
    ``fogsim.spmd._random``). ``size`` defaults to ``FOGSIM_SIZE`` (else 16);
    ``topology`` (default exponential-2) and ``seed`` are those of :func:`fogsim.init`
    inside the run; ``local_size`` groups the agents into machines. ``timeout`` (seconds)
    ends a wait at a rendezvous that lasts longer with :class:`SpmdTimeout`; the default is
    ``FOGSIM_STALL_TIMEOUT`` (60 s unless set, as for a stalled MPI collective), and ``0``
    waits forever.

    If an agent raises, the others stop at their next op (or at once if they are waiting in
    one) with :class:`SpmdAborted`, and ``run`` re-raises the agent's exception with a note
    naming it. Agents that call different ops get a ``ValueError`` naming them; an agent
    that returns while others wait in an op ends the run with :class:`SpmdError`.
    """
    if not callable(main):
        raise TypeError(
            f"run(): main must be a function to run on every agent, got {type(main).__name__}"
        )
    settings = _settings.load()
    n = _size(size, settings)
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0
    ):
        raise ValueError(
            f"timeout must be a number of seconds >= 0 (0: never) or None, got {timeout!r}"
        )
    timeout = settings.stall_timeout if timeout is None else (timeout or None)
    world = World(
        n, local_size=local_size, topology=topology, seed=seed, timeout=timeout, settings=settings
    )
    results: list[Any] = [None] * n
    errors: dict[int, BaseException] = {}
    threads = [
        threading.Thread(
            target=Agent(world, r).main,
            args=(main, args, results, errors),
            name=f"fogsim-spmd-agent-{r}",
            daemon=True,
        )
        for r in range(n)
    ]
    _random.start()  # np.random.* and torch's generator: per agent thread (see _random)
    world.warnings.install()  # a warning all agents raise: printed once, with their ranks
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException as exc:  # KeyboardInterrupt: stop the agents at their next op
        world.interrupt(exc)
        raise
    finally:
        world.warnings.uninstall()
        _random.stop()
    if errors:
        rank = min(errors, key=lambda r: (isinstance(errors[r], SpmdAborted), r))
        error = errors[rank]
        note = f"fogsim.spmd: raised by agent {rank} of {n}"
        if sys.version_info >= (3, 11):
            error.add_note(note)
        else:  # Python 3.10 has no add_note; the notes list is where 3.11 keeps them
            error.__notes__ = [*getattr(error, "__notes__", []), note]
        raise error
    return results


def run_path(
    path: str | os.PathLike[str],
    *,
    size: int | None = None,
    argv: Sequence[str] = (),
    topology: TopologyLike | None = None,
    seed: int | None = None,
    local_size: int | None = None,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    """Run the script at ``path`` as ``size`` agents, each as ``__main__``; return their globals.

    ``path`` may also be a Jupyter notebook (``.ipynb``): its code cells run top to bottom
    (IPython magics left out; see ``fogsim._notebook``).

    ``sys.argv`` is ``[path, *argv]`` and the script's folder leads ``sys.path`` during the
    run (both are process-wide, so they are set once for all agents and restored after).
    Each agent executes the script's code in a module namespace of its own (what
    :func:`runpy.run_path` does, without its process-wide ``sys.modules['__main__']``
    swap, which threads cannot share); the script's ``print`` writes each call in one
    piece, so lines of different agents do not mix; ``sys.exit(0)`` ends an agent
    normally. The other
    arguments and the errors are those of :func:`run`.
    """
    path = os.fspath(path)
    if _notebook.is_notebook(path):
        code: Any = _notebook.notebook_code(path)
    else:
        with io.open_code(path) as f:
            code = compile(f.read(), path, "exec")
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        return run(
            _exec_script,
            code,
            path,
            size=size,
            topology=topology,
            seed=seed,
            local_size=local_size,
            timeout=timeout,
        )
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path


_print_lock = threading.Lock()


def _print_lines(
    *values: Any,
    sep: str | None = " ",
    end: str | None = "\n",
    file: Any = None,
    flush: bool = False,
) -> None:
    """``print`` that writes its whole text in one call, so agents' lines do not mix."""
    out = sys.stdout if file is None else file
    if out is None:
        return
    text = (" " if sep is None else sep).join(map(str, values)) + ("\n" if end is None else end)
    with _print_lock:
        out.write(text)
        if flush:
            out.flush()


# The agents' scripts see builtins with a line-atomic print (their own module's code only).
_SCRIPT_BUILTINS = {**vars(builtins), "print": _print_lines}


def _exec_script(code: Any, path: str) -> dict[str, Any]:
    """Run one code object (or, for a notebook, a list of them, one per cell) as ``__main__``."""
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__file__": path,
        "__builtins__": _SCRIPT_BUILTINS,
        "__doc__": None,
        "__package__": None,
        "__spec__": None,
        "__loader__": None,
        "__cached__": None,
    }
    try:
        for part in code if isinstance(code, list) else [code]:
            exec(part, namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    return namespace
