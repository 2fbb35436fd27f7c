"""Public communication ops, each declared once and routed by a typed reference to its part.

A public op is declared once, as a function whose first parameter is its *runner* and whose
other parameters, annotations and docstring are the public ones. Its body checks what does not
depend on the backend and ends by handing the op's positional parameters, in their declared
order, to the runner::

    @public_op(
        "ALLGATHER",
        route=lambda world: world.collectives.allgather,
        twin=lambda world: world.collectives.allgather_nonblocking,
    )
    def allgather(run: Runner, x: ArrayLike, name: str | None = None) -> Value:
        \"\"\"Return every agent's ``x`` concatenated ...\"\"\"
        return run(x, name)

    allgather_nonblocking = allgather.nonblocking

A route is a function of the world (:class:`~fogsim.backends.Backend`) returning the bound
method of one of its parts (:mod:`fogsim.backends`), so mypy checks that the part has
it; nothing is looked up by name and no source is compiled. :func:`public_op` makes two public
functions of the declaration, each the declared function with its runner bound first
(``functools.partial``, so arguments bind at C speed and a call that does not fit is Python's
own ``TypeError`` naming the op): the blocking op, and its ``*_nonblocking`` twin
(``op.nonblocking``, the declared function under the twin's name).

The blocking op's runner follows the route in the current world (``world.follow(route)``,
once per world: the part method itself, or what an SPMD agent or the sharded simulator puts
in its place) and calls it, under a timeline span labelled ``label`` on the track of the
call's ``name`` (else the op's own name) when a :mod:`~fogsim.timeline` runs. The twin's
runner calls ``twin``, which returns a :class:`~fogsim.Handle`, under the span
``ENQUEUE_<label>``, where the world's nonblocking ops overlap
(``capabilities.overlaps``); elsewhere, and always with ``twin=EAGER``, it runs the
blocking route at once and returns a completed handle; ``twin=None`` makes no twin. A body
that chooses another call (a variant of the op, such as ``allreduce(is_hierarchical_local=
True)``) returns ``run.variant(route, args, label)`` (run now, also from the twin, which then
returns a completed handle), or ``run.plain(function, args, label)`` for a function written
against the public API (compressed gossip).

Adding an op is one declaration here and one method on the part that implements it. The
functions that only read or set the world's state (``size()``, ``set_topology()``,
``win_names()``, ...) call the world directly and open no span; ``wait()`` and ``poll()`` act
on a handle.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from types import FrameType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Final,
    Generic,
    NamedTuple,
    ParamSpec,
    Protocol,
    TypeVar,
)

from . import _context, _stall
from . import timeline as _timeline
from ._handles import Handle

if TYPE_CHECKING:
    from .backends import Backend

__all__ = [
    "DECLARED_OPS",
    "EAGER",
    "Declared",
    "PublicOp",
    "Route",
    "Runner",
    "public_op",
    "routed_call",
]

P = ParamSpec("P")
R = TypeVar("R", covariant=True)
T = TypeVar("T")

#: A typed reference from the world to the part method that runs an op.
Route = Callable[["Backend"], Callable[..., Any]]


class _Eager:
    """The ``twin=`` of an op whose nonblocking form runs at once (see :data:`EAGER`)."""

    def __repr__(self) -> str:
        return "EAGER"


#: ``twin=EAGER``: the twin runs the blocking op and returns a completed handle.
EAGER: Final = _Eager()


class Runner(Protocol[R]):
    """What a declared op hands its arguments to (see the module docstring).

    Typed by what the blocking op returns; the twin's runner returns its handle instead.
    """

    #: The public function's name (``allreduce`` or ``allreduce_nonblocking``).
    op: str

    def __call__(self) -> Callable[..., R]:
        """Return what runs the op on the current world, to be called with the op's
        positional parameters in their declared order: the part method itself, or, while a
        timeline runs (or for an eager twin), a function that calls it under the span."""
        ...

    def variant(self, route: Route, args: tuple[Any, ...], label: str) -> R:
        """Run ``route`` with ``args`` now, under the span ``label``; from the twin, return
        a completed handle."""
        ...

    def plain(self, function: Callable[..., Any], args: tuple[Any, ...], label: str) -> R:
        """Run ``function(*args)`` now, under the span ``label``; from the twin, return a
        completed handle."""
        ...


class Declared(NamedTuple):
    """One declared op: its name, span label, routes, and public signature."""

    name: str
    label: str
    route: Route
    twin: Route | _Eager | None
    signature: inspect.Signature


#: Every op declared with :func:`public_op`, in declaration order.
DECLARED_OPS: list[Declared] = []


class PublicOp(Protocol, Generic[P, R]):
    """A public op as callers see it: the declared signature, and its twin if it has one."""

    nonblocking: Callable[P, Handle]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...


def public_op(
    label: str,
    *,
    route: Route,
    twin: Route | _Eager | None = EAGER,
    twin_doc: str | None = None,
    twin_track: str | None = None,
) -> Callable[[Callable[Concatenate[Runner[T], P], T]], PublicOp[P, T]]:
    """Return the decorator that makes a declared op public (see the module docstring).

    ``route``: the part method of the blocking op; ``twin``: that of the nonblocking op
    (:data:`EAGER`: the blocking op, run at once; None: no twin). ``twin_doc`` replaces the
    twin's generated docstring; ``twin_track`` names the twin's span when the call gives no
    ``name`` (default ``enqueue_<op>``).
    """

    def decorate(declared: Callable[Concatenate[Runner[T], P], T]) -> PublicOp[P, T]:
        name = declared.__name__
        signature = inspect.signature(declared)
        params = list(signature.parameters.values())[1:]  # after the runner
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        where = positional.index("name") if "name" in positional else None
        DECLARED_OPS.append(
            Declared(name, label, route, twin, signature.replace(parameters=params))
        )
        if twin is not None:
            twin_name = name + "_nonblocking"
            track = twin_track or "enqueue_" + name
            doc = twin_doc or (
                f"Start :func:`{name}`; return a :class:`~fogsim.Handle` for "
                ":func:`wait` / :func:`poll`. Same arguments."
            )
            started = renamed(declared, twin_name, doc, "Handle")
            run = _runner(twin_name, name, label, route, twin, track, where)
            declared.nonblocking = _bound(started, run)  # type: ignore[attr-defined]
        op: PublicOp[P, T] = _bound(declared, _runner(name, name, label, route, None, name, where))
        return op

    return decorate


def _bound(declared: Callable[..., Any], run: Runner[Any]) -> Any:
    """The public function: ``declared`` with its runner bound first."""
    _DECLARED.add(declared.__code__)
    return bind_first(declared, run)


def bind_first(declared: Callable[..., Any], first: Any) -> Any:
    """``declared`` with ``first`` bound as its first argument: a bound method, which Python
    calls at the cost of a function call, shows ``declared``'s name, docstring and
    signature without its first parameter, and reads other attributes (``nonblocking``)
    from ``declared``."""
    return types.MethodType(declared, first)


def renamed(
    declared: Callable[..., Any], name: str, doc: str, returns: str | None = None
) -> Callable[..., Any]:
    """``declared`` under another name (a twin's), so that Python's errors name it, with
    the docstring ``doc`` and, if given, the return annotation ``returns``."""
    assert isinstance(declared, types.FunctionType)
    code = declared.__code__.replace(co_name=name, co_qualname=name)
    twin = types.FunctionType(
        code, declared.__globals__, name, declared.__defaults__, declared.__closure__
    )
    twin.__kwdefaults__ = declared.__kwdefaults__
    twin.__annotations__ = dict(declared.__annotations__)
    if returns is not None:
        twin.__annotations__["return"] = returns
    twin.__module__ = declared.__module__
    twin.__qualname__ = name
    twin.__doc__ = doc
    return twin


def _runner(
    public: str,
    op: str,
    label: str,
    route: Route,
    twin: Route | _Eager | None,
    track: str,
    where: int | None,
) -> Runner[Any]:
    """The runner of the public function ``public`` (the op ``op``, or its twin)."""
    method_of = _context.method_of
    threads = _context._thread  # read inline below: the one lookup every op makes
    started = twin is not None
    eager = isinstance(twin, _Eager)
    target: Route = twin if twin is not None and not isinstance(twin, _Eager) else route
    span = "ENQUEUE_" + label if started else label
    first: Callable[[Route], Callable[..., Any]] = method_of

    if target is not route:

        def twin_of(target: Route) -> Callable[..., Any]:
            """The twin's method in the current world: the part's twin where the world's
            nonblocking ops overlap, else the blocking op, returning a completed handle."""
            ctx = _context.current()
            if ctx.backend.capabilities.overlaps:
                return method_of(target)
            blocking = method_of(route)

            def completed(*args: Any) -> Handle:
                name = args[where] if where is not None and where < len(args) else None
                clock = ctx.clock  # fogsim.clock: its virtual time overlaps the op
                if clock is not None:
                    handle: Handle = clock.started(lambda: blocking(*args), op, name)
                    return handle
                return Handle.completed(op, blocking(*args), name)

            ctx.methods[target] = completed
            return completed

        first = twin_of

    def run() -> Callable[..., Any]:
        # _context.method_of(target), without its two calls on the path every op takes
        # (a closed context has forgotten its methods: method_of then raises)
        if _context._entered:  # a ``with ctx:`` block is open somewhere: ask the thread
            stack = threads.stack
            ctx = stack[-1] if stack else _context._current
        else:
            ctx = _context._current
        fn = None if ctx is None else ctx.methods.get(target)
        if fn is None:
            fn = first(target)  # the first call in this world, or the error of none
        if _timeline.active is None and not eager:
            return fn  # the part method itself: no frame of ours under it
        return functools.partial(_traced, fn)

    def _traced(fn: Callable[..., Any], *args: Any) -> Any:
        name = args[where] if where is not None else None
        if eager:  # the blocking route, under the twin's span: a completed handle
            return Handle.completed(op, _spanned(fn, args, span, name or track), name)
        return _spanned(fn, args, span, name or track)

    def variant(route: Route, args: tuple[Any, ...], label: str) -> Any:
        return plain(method_of(route), args, label)

    def plain(function: Callable[..., Any], args: tuple[Any, ...], label: str) -> Any:
        name = args[where] if where is not None and where < len(args) else None
        result = _spanned(function, args, label, name or op)
        return Handle.completed(op, result, name) if started else result

    runner: Any = run
    runner.op, runner.variant, runner.plain = public, variant, plain
    return runner  # type: ignore[no-any-return]


def _spanned(fn: Callable[..., Any], args: tuple[Any, ...], label: str, track: Any) -> Any:
    """Call ``fn(*args)`` under the timeline span ``label`` on ``track``, if a timeline runs."""
    tl = _timeline.active
    if tl is None:
        return fn(*args)
    tid = tl.op_begin(label, track)  # no ``with`` object: ~0.2 us less
    try:
        return fn(*args)
    finally:
        tl.op_end(tid)


def routed_call(frame: FrameType) -> tuple[str, str | None] | None:
    """Return the public op and ``name=`` of a routed call's frame, or None for another frame.

    For reports that read the stack (a stalled wait names the op it waits in): every public
    op made here runs in its declared function, whose locals hold its runner and ``name``.
    """
    if frame.f_code not in _DECLARED:
        return None
    local = frame.f_locals
    run: Runner[Any] | None = local.get("run")
    name = local.get("name")
    op = frame.f_code.co_name if run is None else run.op
    return op, name if isinstance(name, str) else None


_DECLARED: set[Any] = set()  # the code of the declared functions (and of their twins)
_stall.set_op_reader(routed_call)  # a stalled wait names the routed op it waits in
