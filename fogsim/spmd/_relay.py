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
from ..backends._stacking import Stacking, parameters
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
    steps = tuple((_STEPS[p.stacking], p.name) for p in params)
    values = [i for i, p in enumerate(params) if p.stacking in _VALUES]
    execute = functools.partial(_execute, route, op, steps, values[0] if values else None)
    at = [i for i, p in enumerate(params) if p.stacking is Stacking.NAME]
    where = at[0] if at else None  # the call's name, part of the op's label

    def call(*args: Any) -> Any:
        if where is None or where >= len(args) or args[where] is None:
            return world.meet(rank, op, args, execute)
        name = args[where]
        _arrays.check_name(name)  # this agent's own mistake, before it waits
        return world.meet(rank, label(op, name), args, execute)

    return call


#: How one parameter's column (every agent's argument) becomes the simulator's argument.
Step = Callable[["World", str, str, Sequence[Any]], Any]


def _execute(
    route: Route,
    op: str,
    steps: tuple[tuple[Step, str], ...],
    value_at: int | None,
    world: World,
    calls: Sequence[Sequence[Any]],
) -> list[Any]:
    """Run the op once for every agent (``calls``: each agent's arguments, by rank; ``op``:
    the simulator method's name; ``steps``: how each parameter stacks, with its name;
    ``value_at``: the agents' values, whose types the rows go back as)."""
    method = _method(world, route)
    columns = zip(*calls, strict=True)
    pairs = zip(steps, columns, strict=True)
    args = [step(world, op, name, column) for (step, name), column in pairs]
    if value_at is None:
        return [method(*args)] * world.size
    args[value_at], kinds = args[value_at]
    return rows(method(*args), kinds)


def _same(world: World, op: str, name: str, column: Sequence[Any]) -> Any:
    agree(op, [key(v) for v in column], name)  # every agent passes it alike
    return column[0]


_STEPS: dict[Stacking, Step] = {
    Stacking.VALUE: lambda world, op, name, column: stack(op, column),
    Stacking.VALUES: lambda world, op, name, column: _ragged(op, column),
    Stacking.SELF_WEIGHT: lambda world, op, name, column: self_weights(op, column, name),
    Stacking.WEIGHTS: lambda world, op, name, column: per_agent_weights(
        op, column, name, world.size
    ),
    Stacking.MACHINE_WEIGHTS: lambda world, op, name, column: per_agent_weights(
        op, column, name, world.sim.machine_size()
    ),
    Stacking.RANKS: lambda world, op, name, column: per_agent_weights(
        op, column, name, world.size, allow_matrix=False
    ),
    Stacking.NAME: lambda world, op, name, column: None,  # agreed on: it is in the label
    Stacking.SAME: _same,
}
_VALUES = (Stacking.VALUE, Stacking.VALUES)


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
