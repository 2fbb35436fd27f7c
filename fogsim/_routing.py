"""Public communication ops, routed in one place.

A public op is declared once, as a function whose signature and docstring are the public
ones and whose body checks what does not depend on the backend (or is empty)::

    @public_op("ALLGATHER")
    def allgather(x: Any, name: str | None = None) -> Any:
        \"\"\"Return every agent's ``x`` concatenated ...\"\"\"

    allgather_nonblocking = allgather.nonblocking

:func:`public_op` turns it into the public function: the declared function runs first (so
a call that does not fit the public signature is a ``TypeError`` naming the public op, and
the body's checks apply); then,
on a running :mod:`~fogsim.timeline`, a span labelled ``label`` (named by the call's
``name``, else the op's own name) opens around the call of the current world's backend
method of the same name, with the arguments as given. With ``twin=True`` (the default) it
also builds the ``*_nonblocking`` twin: the same checks and arguments, the span
``ENQUEUE_<label>``, and the backend's ``<op>_nonblocking``, which returns a
:class:`~fogsim.Handle`. Adding an op is one declaration here and one method per backend.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from . import _context
from . import timeline as _timeline

__all__ = ["public_op"]


def public_op(label: str, *, twin: bool = True) -> Callable[[Callable[..., Any]], Any]:
    """Return the decorator that makes a declared op public (see the module docstring)."""

    def decorate(spec: Callable[..., Any]) -> Any:
        signature = inspect.signature(spec)
        params = list(signature.parameters)
        where = params.index("name") if "name" in params else None
        op: Any = _route(spec, spec.__name__, label, where, spec.__name__)
        if twin:
            nonblocking: Any = _route(
                spec,
                spec.__name__ + "_nonblocking",
                "ENQUEUE_" + label,
                where,
                "enqueue_" + spec.__name__,
            )
            nonblocking.__name__ = nonblocking.__qualname__ = spec.__name__ + "_nonblocking"
            nonblocking.__doc__ = (
                f"Start :func:`{spec.__name__}`; return a :class:`~fogsim.Handle` for "
                ":func:`wait` / :func:`poll`. Same arguments."
            )
            nonblocking.__signature__ = signature.replace(return_annotation="Handle")
            op.nonblocking = nonblocking
        return op

    return decorate


def _route(
    spec: Callable[..., Any], method: str, label: str, where: int | None, default: str
) -> Callable[..., Any]:
    """The public function of one op: checks, span, and the backend's ``method``."""

    def routed(*args: Any, **kwargs: Any) -> Any:
        spec(*args, **kwargs)  # the public signature, and the op's own checks
        backend = _context.current().backend
        tl = _timeline.active
        if tl is None:
            return getattr(backend, method)(*args, **kwargs)
        name = args[where] if where is not None and len(args) > where else kwargs.get("name")
        with tl.op(label, name or default):
            return getattr(backend, method)(*args, **kwargs)

    functools.update_wrapper(routed, spec)
    return routed
