"""Public communication ops, routed in one place.

A public op is declared once, as a function whose signature and docstring are the public
ones and whose body checks what does not depend on the backend (or is empty)::

    @public_op("ALLGATHER")
    def allgather(x: Any, name: str | None = None) -> Any:
        \"\"\"Return every agent's ``x`` concatenated ...\"\"\"

    allgather_nonblocking = allgather.nonblocking

:func:`public_op` turns it into the public function: the declared function runs first (so
a call that does not fit the public signature is a ``TypeError`` naming the public op, and
the body's checks apply); then, on a running :mod:`~fogsim.timeline`, a span labelled
``label`` (named by the call's ``name``, else the op's own name) opens around the call of the
current world's backend. What the body returns says which backend call:

* ``None``: the backend method of the op's name, with the arguments as given;
* a tuple: that method, with the tuple as its positional arguments (an op whose public
  arguments the backend does not take, e.g. ``check_weights=``);
* a :class:`Call`: another method, span label or context (a variant of the op, such as
  ``allreduce(is_hierarchical_local=True)``; the weight checks' context).

With ``twin=True`` (the default) it also builds the ``*_nonblocking`` twin: the same checks,
the span ``ENQUEUE_<label>``, and the backend's ``<method>_nonblocking``, which returns a
:class:`~fogsim.Handle` (a :class:`Call` with ``eager=True`` instead runs the blocking
method under its own label and returns a completed handle). Adding an op is one declaration
here and one method per backend. The functions that only read or set the world's state
(``size()``, ``set_topology()``, ``win_names()``, ...) call the backend directly and open
no span; ``wait()`` and ``poll()`` act on a handle, not on the backend.

Ops called in tight loops (``neighbor_allreduce``, ``allreduce`` and their twins) are
declared ``hot=``: their public functions are compiled with the declared parameters and
skip the body where a declared condition says it returns its arguments as given, so that
routing costs what a hand-written wrapper did (see :func:`public_op`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Generic, NamedTuple, ParamSpec, Protocol, TypeVar, cast

from . import _context, _stall
from . import timeline as _timeline
from ._handles import Handle

__all__ = ["Call", "PublicOp", "public_op"]

P = ParamSpec("P")
R = TypeVar("R", covariant=True)


class Call(NamedTuple):
    """The backend call a declared op's body chose for one call."""

    # the backend method of the blocking op (the twin adds ``_nonblocking``), or a function
    # written against the public API (e.g. compressed gossip), run with ``args`` (eager)
    method: str | Callable[..., Any]
    args: tuple[Any, ...]  # its positional arguments
    label: str | None = None  # the span's label, when not the op's
    context: contextlib.AbstractContextManager[Any] | None = None  # held around the call
    eager: bool = False  # the twin runs ``method`` now and returns a completed handle


class PublicOp(Protocol, Generic[P, R]):
    """A public op as callers see it: the declared signature, and its twin if it has one."""

    nonblocking: Callable[P, Handle]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...


def public_op(
    label: str,
    *,
    twin: bool = True,
    twin_doc: str | None = None,
    twin_track: str | None = None,
    hot: str | None = None,
) -> Callable[[Callable[P, R]], PublicOp[P, R]]:
    """Return the decorator that makes a declared op public (see the module docstring).

    ``twin_doc`` replaces the twin's generated docstring; ``twin_track`` names the twin's
    span when the call gives no ``name`` (default ``enqueue_<op>``).

    ``hot``, for ops called in tight loops (``neighbor_allreduce``, ``allreduce``): a
    condition on the parameters, e.g. ``"check_weights is True"``, under which the body
    would return the positional parameters as they are (a test checks this of each hot
    op). The public function is then compiled with the declared parameters (see
    :func:`_compile`) and, when the condition holds, calls the backend without running the
    body: the hand-written wrapper's cost, about 0.2 us less per call than the general
    route. Otherwise the body runs as for any op; it must return a tuple or a :class:`Call`.
    """

    def decorate(spec: Callable[P, R]) -> PublicOp[P, R]:
        signature = inspect.signature(spec)
        params = list(signature.parameters)
        where = params.index("name") if "name" in params else None
        route = _route if hot is None else functools.partial(_compile, hot=hot)
        op: Any = route(spec, label, where, spec.__name__, nonblocking=False)
        if twin:
            nonblocking: Any = route(
                spec, label, where, twin_track or "enqueue_" + spec.__name__, nonblocking=True
            )
            nonblocking.__name__ = nonblocking.__qualname__ = spec.__name__ + "_nonblocking"
            nonblocking.__doc__ = twin_doc or (
                f"Start :func:`{spec.__name__}`; return a :class:`~fogsim.Handle` for "
                ":func:`wait` / :func:`poll`. Same arguments."
            )
            nonblocking.__signature__ = signature.replace(return_annotation="Handle")
            op.nonblocking = nonblocking
        return cast(PublicOp[P, R], op)

    return decorate


def routed_call(frame: FrameType) -> tuple[str, str | None] | None:
    """Return the public op and ``name=`` of a routed call's frame, or None for another frame.

    For reports that read the stack (a stalled wait names the op it waits in): every routed
    op runs in the one function ``routed`` below, whose locals say which op it is.
    """
    compiled = _COMPILED.get(frame.f_code)
    if compiled is not None:
        name = frame.f_locals.get("name")
        return compiled, name if isinstance(name, str) else None
    if frame.f_code is not _ROUTED_CODE:
        return None
    local = frame.f_locals
    args, kwargs, where = local["args"], local["kwargs"], local["where"]
    name = args[where] if where is not None and len(args) > where else kwargs.get("name")
    return local["method"], name if isinstance(name, str) else None


def _route(
    spec: Callable[..., Any], label: str, where: int | None, default: str, *, nonblocking: bool
) -> Callable[..., Any]:
    """The public function of one op (or of its twin): checks, span, and the backend call."""
    op = spec.__name__
    suffix = "_nonblocking" if nonblocking else ""
    method = op + suffix
    span = "ENQUEUE_" + label if nonblocking else label

    def routed(*args: Any, **kwargs: Any) -> Any:
        call = spec(*args, **kwargs)  # the public signature, and the op's own checks
        if type(call) is tuple:  # the hot path of ops like neighbor_allreduce
            fn = getattr(_context.current().backend, method)
            tl = _timeline.active
            if tl is None:
                return fn(*call)
            call_args: tuple[Any, ...] = call
            call_kwargs: dict[str, Any] = {}
        elif call is None:
            fn = getattr(_context.current().backend, method)
            tl = _timeline.active
            if tl is None:
                return fn(*args, **kwargs)
            call_args, call_kwargs = args, kwargs
        else:
            return _call(call, _context.current().backend, args, kwargs)
        name = args[where] if where is not None and len(args) > where else kwargs.get("name")
        tid = tl.op_begin(span, name or default)  # no ``with`` object: ~0.2 us less
        try:
            return fn(*call_args, **call_kwargs)
        finally:
            tl.op_end(tid)

    def _call(call: Call, backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        name = args[where] if where is not None and len(args) > where else kwargs.get("name")
        if call.eager and nonblocking:  # runs now, as the blocking op: a completed handle
            result = _run(call, backend, call.method, call.label or label, op, name)
            return Handle.completed(op, result, name)
        span_now = call.label or label
        return _run(
            call,
            backend,
            call.method if callable(call.method) else call.method + suffix,
            "ENQUEUE_" + span_now if nonblocking else span_now,
            default,
            name,
        )

    functools.update_wrapper(routed, spec)
    return routed


_TEMPLATE = """
def {op}({params}):
    if {hot}:  # the body would return the positional parameters as they are
        tl = timeline.active
        if tl is None:
            return current().backend.{op}({positional})
        tid = tl.op_begin(span, {name} or default)
        try:
            return current().backend.{op}({positional})
        finally:
            tl.op_end(tid)
    call = spec({arguments})
    if type(call) is tuple:
        fn = getattr(current().backend, method)
        tl = timeline.active
        if tl is None:
            return fn(*call)
        tid = tl.op_begin(span, {name} or default)
        try:
            return fn(*call)
        finally:
            tl.op_end(tid)
    return slow(call, ({positional},), {{{keywords}}})
"""


def _compile(
    spec: Callable[..., Any],
    label: str,
    where: int | None,
    default: str,
    *,
    nonblocking: bool,
    hot: str,
) -> Callable[..., Any]:
    """:func:`_route`'s public function, compiled with the declared parameters.

    The same steps, without packing the arguments into ``*args, **kwargs`` and out again,
    and without the body where ``hot`` holds; a :class:`Call` goes through :func:`_route`'s
    own function with the arguments as the declaration bound them.
    """
    parameters = list(inspect.signature(spec).parameters.values())
    kinds = {p.kind for p in parameters}
    if kinds - {inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY}:
        raise TypeError(f"{spec.__name__}: hot ops take named parameters only")
    positional = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    op = spec.__name__ + ("_nonblocking" if nonblocking else "")
    generic = _route(spec, label, where, default, nonblocking=nonblocking)

    def slow(call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if call is None:
            raise TypeError(f"{spec.__name__}: a hot op's body returns a tuple or a Call")
        return generic(*args, **kwargs)  # runs the body again: a Call is the rare path

    source = _TEMPLATE.format(
        op=op,
        params=", ".join(positional + (["*"] + keywords if keywords else [])),
        arguments=", ".join(positional + [f"{k}={k}" for k in keywords]),
        name="name" if "name" in positional + keywords else "None",
        positional=", ".join(positional),
        hot=hot,
        keywords=", ".join(f"{k!r}: {k}" for k in keywords),
    )
    scope: dict[str, Any] = {
        "spec": spec,
        "current": _context.current,
        "timeline": _timeline,
        "method": op,
        "span": "ENQUEUE_" + label if nonblocking else label,
        "default": default,
        "slow": slow,
    }
    # Named as a file inside the package, so that what reads the stack for the caller's
    # line (weight warnings, stall reports) passes over this frame as fogsim's own.
    where_from = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"<routed {op}>")
    exec(compile(source, where_from, "exec"), scope)  # noqa: S102 - our own template
    routed: Any = scope[op]
    routed.__defaults__ = spec.__defaults__
    routed.__kwdefaults__ = spec.__kwdefaults__
    functools.update_wrapper(routed, spec)
    _COMPILED[routed.__code__] = op
    return cast(Callable[..., Any], routed)


def _run(
    call: Call,
    backend: Any,
    method: str | Callable[..., Any],
    label: str,
    default: str,
    name: Any,
) -> Any:
    """Call ``backend.method(*call.args)`` (or ``method(*call.args)`` for a function) in
    ``call.context`` and under the span ``label``."""
    fn = method if callable(method) else getattr(backend, method)
    with call.context or contextlib.nullcontext():
        tl = _timeline.active
        if tl is None:
            return fn(*call.args)
        tid = tl.op_begin(label, name or default)
        try:
            return fn(*call.args)
        finally:
            tl.op_end(tid)


_ROUTED_CODE = _route(lambda: None, "", None, "", nonblocking=False).__code__
_COMPILED: dict[CodeType, str] = {}  # compiled public functions' code -> their op
_stall.set_op_reader(routed_call)  # a stalled wait names the routed op it waits in
