"""Public communication ops, each declared once and routed by a typed reference to its part.

A public op is declared once, as a function whose signature and docstring are the public
ones and whose body checks what does not depend on the backend (or is empty), with the route
to the part method that implements it::

    @public_op(
        "ALLGATHER",
        route=lambda world: world.collectives.allgather,
        twin=lambda world: world.collectives.allgather_nonblocking,
    )
    def allgather(x: ArrayLike, name: str | None = None) -> Value:
        \"\"\"Return every agent's ``x`` concatenated ...\"\"\"

    allgather_nonblocking = allgather.nonblocking

A route is a function of the world (:class:`~fogsim.backends.Backend`) returning the bound
method of one of its parts (:mod:`fogsim.backends._parts`), so mypy checks that the part has
it and that it takes the declared parameters; nothing is looked up by name. :func:`public_op`
turns the declaration into the public function: the declared function runs first (so a call
that does not fit the public signature is a ``TypeError`` naming the public op, and the body's
checks apply); then, on a running :mod:`~fogsim.timeline`, a span labelled ``label`` (named
by the call's ``name``, else the op's own name) opens around the call of the route on the
current world. What the body returns says which call:

* ``None``: the route, with the declared positional parameters (defaults filled in);
* a tuple: the route, with the tuple as its positional arguments (an op whose public
  arguments the part does not take, e.g. ``check_weights=``);
* a :class:`Call`: another route or function, span label or context (a variant of the op,
  such as ``allreduce(is_hierarchical_local=True)``; the weight checks' context).

The ``*_nonblocking`` twin (``op.nonblocking``) has the same checks, the span
``ENQUEUE_<label>``, and calls ``twin``, which returns a :class:`~fogsim.Handle`; without a
``twin`` route (``twin=EAGER``) it runs the blocking route and returns a completed handle, as
does a :class:`Call` with ``eager=True``. ``twin=None`` makes no twin. Adding an op is one
declaration here and one method on the part that implements it. The functions that only read
or set the world's state (``size()``, ``set_topology()``, ``win_names()``, ...) call the world
directly and open no span; ``wait()`` and ``poll()`` act on a handle.

Ops called in tight loops (``neighbor_allreduce``, ``allreduce`` and their twins) are
declared ``hot=True``: their body returns the positional parameters as given whenever every
keyword-only parameter is left at its default (a test checks this of each hot op), so a call
that passes no keyword-only argument skips the body and calls the route with the arguments
as given: what a hand-written wrapper costs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, Generic, NamedTuple, ParamSpec, Protocol, TypeVar

from . import _context
from . import timeline as _timeline
from ._handles import Handle

if TYPE_CHECKING:
    from .backends import Backend

__all__ = ["EAGER", "Call", "PublicOp", "Route", "public_op", "routed_call"]

P = ParamSpec("P")
R = TypeVar("R", covariant=True)

#: A typed reference from the world to the part method that runs an op.
Route = Callable[["Backend"], Callable[..., Any]]


class _Eager:
    """The ``twin=`` of an op whose nonblocking form runs at once (see :data:`EAGER`)."""

    def __repr__(self) -> str:
        return "EAGER"


#: ``twin=EAGER``: the twin runs the blocking op and returns a completed handle.
EAGER: Final = _Eager()


class Call(NamedTuple):
    """The call a declared op's body chose for one call."""

    # a route (a function of the world) or, with ``plain``, a function written against the
    # public API (e.g. compressed gossip); None: the op's own route (its twin's when started)
    route: Route | Callable[..., Any] | None
    args: tuple[Any, ...]  # its positional arguments
    label: str | None = None  # the span's label, when not the op's
    context: contextlib.AbstractContextManager[Any] | None = None  # held around the call
    eager: bool = False  # the twin runs the blocking call now and returns a completed handle
    plain: bool = False  # ``route`` is a plain function, called with ``args`` as they are


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
    hot: bool = False,
) -> Callable[[Callable[P, R]], PublicOp[P, R]]:
    """Return the decorator that makes a declared op public (see the module docstring).

    ``route``: the part method of the blocking op; ``twin``: that of the nonblocking op
    (:data:`EAGER`: the blocking op, run at once; None: no twin). ``twin_doc`` replaces the
    twin's generated docstring; ``twin_track`` names the twin's span when the call gives no
    ``name`` (default ``enqueue_<op>``). ``hot``: see the module docstring.
    """

    def decorate(spec: Callable[P, R]) -> PublicOp[P, R]:
        signature = inspect.signature(spec)
        shape = _Shape(spec, signature, hot)
        op: Any = _routed(shape, label, spec.__name__, route, None)
        if twin is not None:
            nonblocking = _routed(
                shape, label, twin_track or "enqueue_" + spec.__name__, route, twin
            )
            nonblocking.__name__ = nonblocking.__qualname__ = spec.__name__ + "_nonblocking"
            nonblocking.__doc__ = twin_doc or (
                f"Start :func:`{spec.__name__}`; return a :class:`~fogsim.Handle` for "
                ":func:`wait` / :func:`poll`. Same arguments."
            )
            nonblocking.__signature__ = signature.replace(  # type: ignore[attr-defined]
                return_annotation="Handle"
            )
            op.nonblocking = nonblocking
        return op  # type: ignore[no-any-return]

    return decorate


class _Shape:
    """What routing needs of a declaration: its body, and its positional parameters."""

    __slots__ = ("spec", "op", "names", "defaults", "index", "where", "hot")

    def __init__(self, spec: Callable[..., Any], signature: inspect.Signature, hot: bool):
        kinds = {p.kind for p in signature.parameters.values()}
        if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
            raise TypeError(f"{spec.__name__}: a public op takes named parameters only")
        positional = [
            p
            for p in signature.parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        self.spec = spec
        self.op = spec.__name__
        self.names = frozenset(p.name for p in positional)
        self.defaults = tuple(p.default for p in positional)
        self.index = {p.name: i for i, p in enumerate(positional)}
        self.where = self.index.get("name")  # where ``name`` stands among them
        self.hot = hot

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Return the positional parameters of a call that fits the declaration."""
        if not kwargs:
            return args + self.defaults[len(args) :]
        values = list(args) + list(self.defaults[len(args) :])
        index = self.index
        for key, value in kwargs.items():
            if key in index:
                values[index[key]] = value
        return tuple(values)

    def name_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Return the call's ``name`` argument (None when it has none)."""
        where = self.where
        return args[where] if where is not None and len(args) > where else kwargs.get("name")


def _routed(
    shape: _Shape, label: str, default: str, route: Route, twin: Route | _Eager | None
) -> Callable[..., Any]:
    """The public function of one op (``twin`` None) or of its twin."""
    spec, op = shape.spec, shape.op
    eager = twin is EAGER
    target: Route = route if twin is None or isinstance(twin, _Eager) else twin
    span = label if twin is None else "ENQUEUE_" + label
    hot, names, count = shape.hot, shape.names, len(shape.defaults)
    current = _context.current

    def routed(*args: Any, **kwargs: Any) -> Any:
        # A hot op's call with no keyword-only argument: its body would return the
        # positional arguments as given, so the route gets them without it.
        if hot and len(args) <= count and (not kwargs or kwargs.keys() <= names):
            fn = target(current().backend)
            tl = _timeline.active
            if tl is None and not eager:
                return fn(*args, **kwargs)
            call_args: tuple[Any, ...] = args
            call_kwargs = kwargs
        else:
            call = spec(*args, **kwargs)  # the public signature, and the op's own checks
            if call is None:
                call_args, call_kwargs = shape.bind(args, kwargs), {}
            elif type(call) is tuple:
                call_args, call_kwargs = call, {}
            else:
                return _special(call, args, kwargs)
            fn = target(current().backend)
            tl = _timeline.active
            if tl is None and not eager:
                return fn(*call_args)
        name = shape.name_of(args, kwargs)
        if eager:
            result = _spanned(fn, call_args, call_kwargs, label, name or op)
            return Handle.completed(op, result, name)
        return _spanned(fn, call_args, call_kwargs, span, name or default)

    def _special(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = shape.name_of(args, kwargs)
        world = current().backend
        if call.plain:
            fn = call.route
        elif call.route is None:  # the op's own route, with other arguments or context
            fn = target(world)
        else:
            fn = call.route(world)  # type: ignore[call-arg]
        assert fn is not None
        with call.context or contextlib.nullcontext():
            if twin is None:
                return _spanned(fn, call.args, {}, call.label or label, name or default)
            if eager or call.eager:  # runs now, as the blocking op: a completed handle
                blocking = fn if call.plain or call.route is not None else route(world)
                result = _spanned(blocking, call.args, {}, call.label or label, name or op)
                return Handle.completed(op, result, name)
            return _spanned(fn, call.args, {}, "ENQUEUE_" + (call.label or label), name or default)

    functools.update_wrapper(routed, spec)
    _ROUTED[routed.__code__] = None
    return routed


def _spanned(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], label: str, track: Any
) -> Any:
    """Call ``fn`` under the timeline span ``label`` on the track ``track``, if one runs."""
    tl = _timeline.active
    if tl is None:
        return fn(*args, **kwargs)
    tid = tl.op_begin(label, track)  # no ``with`` object: ~0.2 us less
    try:
        return fn(*args, **kwargs)
    finally:
        tl.op_end(tid)


def routed_call(frame: FrameType) -> tuple[str, str | None] | None:
    """Return the public op and ``name=`` of a routed call's frame, or None for another frame.

    For reports that read the stack (a stalled wait names the op it waits in): every routed
    op runs in the one function ``routed`` of :func:`_routed`, whose locals say which op.
    """
    if frame.f_code not in _ROUTED:
        return None
    local = frame.f_locals
    shape: _Shape = local["shape"]
    name = shape.name_of(local["args"], local["kwargs"])
    op = shape.op if local["twin"] is None else shape.op + "_nonblocking"
    return op, name if isinstance(name, str) else None


_ROUTED: dict[Any, None] = {}  # the code of the public functions made here
