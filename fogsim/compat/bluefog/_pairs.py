"""BlueFog's ops and their ``*_nonblocking`` twins, each written once over fogsim's op.

A BlueFog op is declared once, with BlueFog's parameter names, order and defaults (its
signature differs from fogsim's: ``tensor`` for ``x``, ``allreduce``'s
``is_hierarchical_local`` among the positional parameters, the deprecated keywords), as a
function whose first parameter is its *call*. Its body turns BlueFog's arguments into
fogsim's and hands them to the call, with the tensor and the name the call checks::

    @bluefog_op(lambda: fogsim.allgather)
    def allgather(call: Call[Value], tensor: ArrayLike, name: str | None = None) -> Value:
        \"\"\"Return every agent's ``tensor`` concatenated ...\"\"\"
        return call(tensor, name, tensor, name)

    allgather_nonblocking = allgather.nonblocking

The blocking op's call checks BlueFog's tensor types and that ``name`` is not in flight, then
calls fogsim's op; the twin's call checks the tensor, then starts fogsim's twin and keeps
``name`` in flight until :func:`~._api.synchronize` (BlueFog's rule: one op per name at a
time). Window ops (``names=False``) use their names for windows, so no name is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from ... import _routing
from ..._handles import Handle
from . import _errors

__all__ = ["Call", "bluefog_op"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Call(Protocol[R_co]):
    """What a BlueFog op hands fogsim's arguments to (see the module docstring).

    Typed by what the blocking op returns; the twin's call returns its handle instead.
    """

    #: BlueFog's name of the function called (``allreduce`` or ``allreduce_nonblocking``).
    op: str

    def __call__(self, tensor: Any, name: str | None, *args: Any, **kwargs: Any) -> R_co:
        """Check ``tensor`` (None: checked already, or no tensor) and ``name`` for this op,
        then call fogsim's op (or start its twin) with ``args`` and ``kwargs``."""
        ...


class BlueFogOp(Protocol, Generic[P, R_co]):
    """A BlueFog op as callers see it: its signature, and its twin."""

    nonblocking: Callable[P, Handle]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


def bluefog_op(
    fogsim_op: Callable[[], _routing.PublicOp[..., Any]],
    *,
    names: bool = True,
    twin_doc: str | None = None,
) -> Callable[[Callable[Concatenate[Call[R], P], R]], BlueFogOp[P, R]]:
    """Return the decorator that makes a BlueFog op and its twin over fogsim's op
    ``fogsim_op()`` (read at each call, as a BlueFog program reads ``bf.<op>``).

    ``names``: the op's ``name`` is an op name that BlueFog keeps in flight (window ops:
    False). ``twin_doc`` replaces the twin's generated docstring.
    """

    def decorate(declared: Callable[Concatenate[Call[R], P], R]) -> BlueFogOp[P, R]:
        name = declared.__name__
        twin_name = name + "_nonblocking"
        doc = twin_doc or f"Start :func:`{name}`; return a handle for :func:`synchronize`."
        # "fogsim.Handle": read in the declaring module, which imports fogsim
        twin = _routing.renamed(declared, twin_name, doc, "fogsim.Handle")
        started = _started(twin_name, fogsim_op, names)
        declared.nonblocking = _routing.bind_first(twin, started)  # type: ignore[attr-defined]
        return _routing.bind_first(declared, _blocking(name, fogsim_op, names))  # type: ignore[no-any-return]

    return decorate


def _blocking(op: str, fogsim_op: Callable[[], Callable[..., Any]], names: bool) -> Call[Any]:
    def call(tensor: Any, name: str | None, *args: Any, **kwargs: Any) -> Any:
        if tensor is not None:
            _errors.check_tensor(op, tensor)
        if names:
            _errors.check_name_free(op, name)
        return fogsim_op()(*args, **kwargs)

    call.op = op  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]


def _started(
    op: str, fogsim_op: Callable[[], _routing.PublicOp[..., Any]], names: bool
) -> Call[Any]:
    def call(tensor: Any, name: str | None, *args: Any, **kwargs: Any) -> Any:
        start = fogsim_op().nonblocking
        if tensor is not None:
            _errors.check_tensor(op, tensor)
        if not names:
            return start(*args, **kwargs)
        return _errors.started(op, name, lambda: start(*args, **kwargs))

    call.op = op  # type: ignore[attr-defined]
    return call  # type: ignore[return-value]
