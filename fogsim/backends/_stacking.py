"""How the arguments of a simulator op stack over the agents, declared on its parameters.

A simulator op takes every agent's arguments at once: the agents' values stacked along a
leading agent axis, per-agent weights as a sequence of n (or one matrix for the step), and
what every agent must pass alike once. Each parameter of the simulator's part methods says
which by its annotation, one of the ``Annotated`` types below (plain ``Any`` to a type
checker)::

    def neighbor_weighted_sum(                   # a made-up op, for the shape
        self,
        x: AgentValue,                           # stacked along the agent axis
        src_weights: AgentWeights = None,        # n dicts, or one matrix
        scale: float = 1.0,                      # no kind: what every agent passes alike
        name: CallName = None,
    ) -> Any: ...

so that a world whose agents come to an op one by one (an SPMD agent, :mod:`fogsim.spmd`) or
one block of agents per process (the sharded simulator) can put the agents' arguments
together for *any* simulator op, read from :func:`stacking_of`, without code of its own for
each op.
"""

from __future__ import annotations

import enum
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

__all__ = [
    "AgentRanks",
    "AgentSelfWeight",
    "AgentValue",
    "AgentValues",
    "AgentWeights",
    "CallName",
    "MachineWeights",
    "Parameter",
    "Stacking",
    "parameters",
    "stacking_of",
]


class Stacking(enum.Enum):
    """How one parameter of a simulator op holds every agent's argument."""

    #: The agents' values, stacked along a leading agent axis (all alike in dtype and shape).
    VALUE = "value"
    #: The agents' values, whose first dimensions may differ (``allgather``).
    VALUES = "values"
    #: Each agent's own weight: an array of n numbers (None when no agent gives one).
    SELF_WEIGHT = "self_weight"
    #: Each agent's ``{rank: weight}`` or list of ranks, n of them, or one n x n matrix.
    WEIGHTS = "weights"
    #: As :attr:`WEIGHTS`, over the machines (one per machine's agents).
    MACHINE_WEIGHTS = "machine_weights"
    #: Each agent's list of ranks, n of them.
    RANKS = "ranks"
    #: The call's ``name``: part of what the agents agree on; the op is given None.
    NAME = "name"
    #: What every agent passes alike (flags, a root rank, factors): given once.
    SAME = "same"


AgentValue = Annotated[Any, Stacking.VALUE]
AgentValues = Annotated[Any, Stacking.VALUES]
AgentSelfWeight = Annotated[Any, Stacking.SELF_WEIGHT]
AgentWeights = Annotated[Any, Stacking.WEIGHTS]
MachineWeights = Annotated[Any, Stacking.MACHINE_WEIGHTS]
AgentRanks = Annotated[Any, Stacking.RANKS]
CallName = Annotated["str | None", Stacking.NAME]


class Parameter(NamedTuple):
    """One positional parameter of a simulator op: its name and how it stacks."""

    name: str
    stacking: Stacking


@functools.cache
def stacking_of(function: Callable[..., Any]) -> tuple[Parameter, ...]:
    """Return the positional parameters of the part method ``function`` (after ``self``)
    and how each stacks, from their annotations (:attr:`Stacking.SAME` when none says)."""
    hints = typing.get_type_hints(function, include_extras=True)
    params = list(inspect.signature(function).parameters.values())[1:]
    out = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise TypeError(f"{function.__qualname__}: parameter {p.name} is not positional")
        stacking = Stacking.SAME
        for meta in getattr(hints.get(p.name), "__metadata__", ()):
            if isinstance(meta, Stacking):
                stacking = meta
        out.append(Parameter(p.name, stacking))
    return tuple(out)


def parameters(method: Callable[..., Any]) -> tuple[Parameter, ...]:
    """:func:`stacking_of` the function of the bound part method ``method``."""
    return stacking_of(getattr(method, "__func__", method))
