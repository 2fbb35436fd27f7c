"""An SPMD agent's ops: each the simulator's, met by every agent and run once.

An agent follows a public op's route (see ``fogsim._routing``) to :func:`relay`, which meets
the other agents under the op's label (its name and the call's ``name``); the last to arrive
follows the same route on the run's simulator and stacks every agent's arguments as the
simulator's method declares them (:mod:`fogsim.backends._stacking`): values along the agent
axis, per-agent weights as n of them, and what every agent must pass alike checked and given
once. Agent ``i`` gets row ``i`` of the result back as the type it passed in. No op has code
of its own here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _arrays
from .._arrays import Kind
from ..backends._stacking import Parameter, Stacking, parameters
from ._collect import (
    agree,
    arrays,
    check_alike,
    label,
    per_agent_weights,
    rows,
    self_weights,
    stack,
)

if TYPE_CHECKING:
    from ..backends import Backend
    from ._world import World

__all__ = ["key", "relay"]

Route = Callable[["Backend"], Callable[..., Any]]


def key(value: Any) -> Any:
    """A hashable stand-in of an argument, for comparing agents' arguments."""
    if isinstance(value, list | tuple):
        return tuple(key(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _method(world: World, route: Route) -> Callable[..., Any]:
    """The simulator's method that ``route`` reaches (the run's simulator, read now)."""
    return route(world.sim)


def relay(world: World, rank: int, route: Route) -> Callable[..., Any]:
    """Return agent ``rank``'s form of the op that ``route`` reaches on the simulator."""
    method = _method(world, route)
    op, params = method.__name__, parameters(method)
    execute = functools.partial(_execute, route, op, params)
    at = [i for i, p in enumerate(params) if p.stacking is Stacking.NAME]
    where = at[0] if at else None  # the call's name, part of the op's label

    def call(*args: Any) -> Any:
        if where is None or where >= len(args) or args[where] is None:
            return world.meet(rank, op, args, execute)
        name = args[where]
        _arrays.check_name(name)  # this agent's own mistake, before it waits
        return world.meet(rank, label(op, name), args, execute)

    return call


def _execute(
    route: Route,
    op: str,
    params: tuple[Parameter, ...],
    world: World,
    calls: Sequence[Sequence[Any]],
) -> list[Any]:
    """Run the op once for every agent (``calls``: each agent's arguments, by rank; ``op``
    and ``params``: the simulator method's name and parameters)."""
    method = _method(world, route)
    columns = list(zip(*calls, strict=True)) if params else []
    stacked: list[Any] = []
    kinds: list[Kind] | None = None
    for p, column in zip(params, columns, strict=True):
        value, value_kinds = _stacked(world, op, p, column)
        if value_kinds is not None:
            kinds = value_kinds
        stacked.append(value)
    out = method(*stacked)
    return [out] * world.size if kinds is None else rows(out, kinds)


def _stacked(
    world: World, op: str, p: Parameter, column: Sequence[Any]
) -> tuple[Any, list[Kind] | None]:
    """Every agent's argument for ``p`` as the simulator takes it (and, for the agents'
    values, the type each passed in)."""
    s = p.stacking
    if s is Stacking.VALUE:
        return stack(op, column)
    if s is Stacking.VALUES:
        return _ragged(op, column)
    if s is Stacking.SELF_WEIGHT:
        return self_weights(op, column, p.name), None
    if s is Stacking.WEIGHTS:
        return per_agent_weights(op, column, p.name, world.size), None
    if s is Stacking.MACHINE_WEIGHTS:
        return per_agent_weights(op, column, p.name, world.sim.machine_size()), None
    if s is Stacking.RANKS:
        return per_agent_weights(op, column, p.name, world.size, allow_matrix=False), None
    if s is Stacking.NAME:
        return None, None  # the agents agreed on it (the label)
    agree(op, [key(v) for v in column], p.name)
    return column[0], None


def _ragged(op: str, column: Sequence[Any]) -> tuple[Any, list[Kind]]:
    """The agents' values, stacked when their first dimensions agree, else as a list."""
    arrs, kinds = arrays(op, column)
    arrs = [a.reshape(1) if a.ndim == 0 else a for a in arrs]
    check_alike(
        op, arrs, shape_of=lambda a: a.shape[1:], what="dtype and shape beyond the first dimension"
    )
    if len({a.shape for a in arrs}) == 1:
        return np.stack(arrs), kinds
    return arrs, kinds
