"""Turn every agent's own arguments into the stacked arguments of the simulator.

An agent passes what an MPI rank passes: its own array or tensor, a number for
``self_weight``, a dict ``{rank: weight}`` or a list of ranks for ``src_weights`` and
``dst_weights``, or one ``n x n`` matrix that every agent passes for the step. The
simulator takes the same arguments stacked: one array with a leading agent axis, an array
of n self weights, a list of n dicts, or the one matrix. Whatever must be the same on every
agent (dtypes, shapes, flags, matrices) is checked here, and a difference is reported
naming the agents on each side.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._arrays import Kind, is_tensor, to_numpy, wrap_like
from ..backends._weights import is_matrix
from ..topology import Topology, as_topology
from ._errors import disagreement

__all__ = [
    "agree",
    "arrays",
    "check_alike",
    "label",
    "per_agent_weights",
    "rows",
    "same_topology",
    "self_weights",
    "stack",
]


def label(op: str, name: Any = None) -> str:
    """Return how an op is named in messages (and what agents must agree on)."""
    return op if name is None else f"{op}(name={name!r})"


def agree(op: str, values: Sequence[Any], argname: str) -> Any:
    """Return the value every agent passed for ``argname``, or raise naming the agents."""
    message = disagreement(values, "passed", lambda v: f"{argname}={v!r}")
    if message is not None:
        raise ValueError(f"{op}: {argname} must be the same on every agent, but {message}")
    return values[0]


def arrays(op: str, values: Sequence[Any]) -> tuple[list[np.ndarray], list[Kind]]:
    """Return every agent's value as a numpy array (zero-copy) and how it came in."""
    out, kinds = [], []
    for rank, x in enumerate(values):
        try:
            arr, kind = to_numpy(x)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{op}: agent {rank}: {exc}") from None
        out.append(arr)
        kinds.append(kind)
    return out, kinds


def check_alike(
    op: str,
    arrs: Sequence[np.ndarray],
    shape_of: Callable[[np.ndarray], Sequence[int]] = lambda a: a.shape,
    what: str = "dtype and shape",
) -> None:
    """Raise ValueError naming the agents when dtypes or shapes (``shape_of``) differ."""
    keys = [(a.dtype.str, tuple(shape_of(a))) for a in arrs]
    message = disagreement(keys, "passed", lambda k: f"{np.dtype(k[0])} {k[1]}")
    if message is not None:
        raise ValueError(f"{op}: the agents' values must have one {what}, but {message}")


def stack(op: str, values: Sequence[Any]) -> tuple[np.ndarray, list[Kind]]:
    """Return the agents' values stacked along a new leading axis, and their kinds."""
    arrs, kinds = arrays(op, values)
    check_alike(op, arrs)
    return np.stack(arrs), kinds


def rows(out: Any, kinds: Sequence[Kind]) -> list[Any]:
    """Return agent i's row of a stacked result as the type agent i passed in.

    A list (the simulator's ragged results) is already one entry per agent. Rows are views
    of the stacked result, so each agent owns its own row.
    """
    if isinstance(out, list):
        return [wrap_like(to_numpy(v)[0], k) for v, k in zip(out, kinds, strict=True)]
    arr, _ = to_numpy(out)
    return [wrap_like(arr[i, ...], k) for i, k in enumerate(kinds)]


# -- weights ---------------------------------------------------------------------------------
def _number(value: Any, rank: int, argname: str) -> float:
    if is_tensor(value) and value.numel() == 1:
        value = value.item()
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(())[()]
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{argname} must be a number on each agent, but agent {rank} passed "
            f"{type(value).__name__}"
        )
    return float(value)


def self_weights(
    op: str, values: Sequence[Any], argname: str = "self_weight", default: float | None = None
) -> np.ndarray | None:
    """Return the agents' ``self_weight`` numbers as an array of n (None if none gave one).

    With ``default`` an agent's None stands for that number; without, agents that give
    one and agents that do not are refused.
    """
    if all(v is None for v in values):
        return None
    if default is None:
        given = ["a number" if v is not None else "None" for v in values]
        message = disagreement(given, "passed", lambda g: f"{argname}={g}")
        if message is not None:
            raise ValueError(f"{op}: {message}; give {argname} on every agent or on none")
    return np.array(
        [default if v is None else _number(v, r, argname) for r, v in enumerate(values)],
        dtype=np.float64,
    )


def _form(value: Any) -> str:
    if value is None:
        return "None"
    if is_matrix(value):
        return "a matrix"
    return "a dict" if isinstance(value, dict) else "a list of ranks"


def _row(value: Any, rank: int, argname: str) -> Any:
    """One agent's dict or rank list in the form ``_core.assemble_csr`` takes."""
    if isinstance(value, dict):
        return {k: (v.item() if is_tensor(v) and v.numel() == 1 else v) for k, v in value.items()}
    if is_tensor(value):
        return value.tolist()
    if isinstance(value, list | tuple | np.ndarray):
        return value
    raise TypeError(
        f"{argname} must be a dict {{rank: weight}} or a list of ranks on each agent (or one "
        f"n x n matrix on all), but agent {rank} passed {type(value).__name__}"
    )


def per_agent_weights(
    op: str, values: Sequence[Any], argname: str, n: int, allow_matrix: bool = True
) -> Any:
    """Return the agents' weight arguments as the simulator takes them.

    None on every agent: None; a dict or rank list on each agent: the list of n; the same
    matrix on every agent: that matrix. Mixed forms and different matrices are refused.
    """
    forms = [_form(v) for v in values]
    if {"None", "a matrix"} & set(forms) and len(set(forms)) > 1:
        message = disagreement(forms, "passed", lambda f: f)
        raise ValueError(f"{op}: {message} for {argname}; every agent must pass the same form")
    if forms[0] == "None":
        return None
    if forms[0] == "a matrix":
        if not allow_matrix:
            raise TypeError(
                f"{op}: {argname} must be a dict {{rank: weight}} or a list of ranks on each "
                "agent, not a matrix"
            )
        return same_topology(op, values, argname, n, original=True)
    return [_row(v, r, argname) for r, v in enumerate(values)]


def same_topology(
    op: str,
    values: Sequence[Any],
    argname: str,
    n: int,
    original: bool = False,
    check_size: bool = True,
) -> Any:
    """Return the one topology (or matrix) every agent passed, or raise naming the agents.

    Each value is a matrix, a graph, a :class:`Topology` or a builder called with ``n``
    (``check_size``: the topology must have ``n`` nodes). With ``original`` agent 0's
    value is returned as passed (the simulator checks it), else as a :class:`Topology`.
    """
    first = values[0]
    if all(v is first for v in values):  # the common case: one shared object
        return first if original else _as_topology(first, n, argname, check_size)
    topos: list[Topology] = []
    cache: dict[int, Topology] = {}
    for rank, value in enumerate(values):
        topo = cache.get(id(value))
        if topo is None:
            topo = cache[id(value)] = _as_topology(value, n, argname, check_size, rank)
        topos.append(topo)
    distinct: list[Topology] = []
    for t in topos:
        if t not in distinct:
            distinct.append(t)
    if len(distinct) > 1:
        message = disagreement(
            [distinct.index(t) for t in topos],
            "passed",
            lambda k: f"{argname} {chr(ord('A') + k) if k < 26 else k}",
        )
        where = _first_difference(distinct[0], distinct[1])
        raise ValueError(f"{op}: every agent must pass the same {argname}, but {message} ({where})")
    return topos[0]


def _as_topology(
    value: Any, n: int, argname: str, check_size: bool, rank: int | None = None
) -> Topology:
    """``value`` as a Topology; errors name ``rank`` (None: every agent passed it)."""
    if callable(value) and not isinstance(value, Topology):
        value = value(n)
    try:
        return as_topology(value, size=n if check_size else None, argname=argname)
    except (TypeError, ValueError) as exc:
        if rank is None:
            raise
        raise type(exc)(f"agent {rank}: {exc}") from None


def _first_difference(a: Topology, b: Topology) -> str:
    if a.size != b.size:
        return f"A has {a.size} nodes, B {b.size}"
    for i in range(a.size):
        if a.in_neighbors(i) != b.in_neighbors(i):
            return (
                f"agent {i}'s in-neighbors are {a.in_neighbors(i)} in A and "
                f"{b.in_neighbors(i)} in B"
            )
    return "their weights differ"
