"""The types the public API takes and returns, named once.

They are aliases, so a value of any of the listed types passes; the API reference shows the
alias's name with its meaning here. In simulation an agent-local value is stacked along a
leading agent axis (one array or tensor for all agents); distributed it is this agent's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, Union

import numpy as np
import numpy.typing as npt

from .topology import Topology, _topology

if TYPE_CHECKING:
    import torch


__all__ = [
    "ArrayLike",
    "CompressorLike",
    "GradientProblem",
    "PerAgent",
    "Problem",
    "Value",
    "SelfWeight",
    "Weights",
    "Ranks",
    "TopologyData",
    "TopologyLike",
    "WeightMatrix",
]

#: A value an op takes: a numpy array, a torch tensor, a Python number, or a plain list or
#: tuple of numbers (``np.asarray(x)``, the same on every agent).
ArrayLike = Union[npt.ArrayLike, "torch.Tensor"]

#: A value an op returns: a numpy array or a torch tensor (the type it was given), or, where
#: agents' results differ in length in simulation, a list of them. Typed as ``Any`` for
#: type checkers, so that a caller's code written for its own type (``y.mean(axis=0)`` on an
#: array, ``y.mean(dim=0)`` on a tensor) needs no narrowing.
Value: TypeAlias = Any

#: What a query returns: this agent's own (an int, a list of ranks, a dict, a float) where
#: each process or thread is one agent, and every agent's in simulation (an array of n, or n
#: lists or dicts). Typed as ``Any``, as :data:`Value` is, so that code written for one mode
#: needs no narrowing.
PerAgent: TypeAlias = Any

#: An n x n weight matrix for one step (``W[i, j]``: what agent i applies to agent j's value).
WeightMatrix = _topology.WeightMatrix

#: The weight an agent gives its own value: a number, or one per agent (an array of n) in
#: simulation.
SelfWeight = Union[float, np.ndarray, Sequence[float], "torch.Tensor", None]

#: Per-agent neighbor weights: ``{rank: weight}`` (a sequence of n dicts in simulation), a
#: list of ranks meaning weight 1.0 each, or one weight matrix for the whole step.
Weights = (
    Mapping[int, float]
    | Sequence[int]
    | Sequence[Mapping[int, float]]
    | Sequence[Sequence[int]]
    | WeightMatrix
    | None
)

#: Ranks: one list per agent distributed, a sequence of n lists in simulation.
Ranks = Sequence[int] | Sequence[Sequence[int]] | None

#: What ``set_topology`` takes: a fogsim Topology, a networkx DiGraph, a dense or sparse n x n
#: matrix, or a builder called with the number of agents (e.g.
#: ``fogsim.topology.ring_graph``).
TopologyLike = _topology.TopologyData | Callable[[int], Topology]

#: What the topology functions (weight rules, checks, ``as_topology``) take: a weight matrix,
#: a networkx graph, or nested lists of numbers.
TopologyData = _topology.TopologyData


class CompressorLike(Protocol):
    """What ``neighbor_allreduce(compressor=...)`` takes: a :mod:`fogsim.compress` compressor
    (its base class, :class:`fogsim.compress.Compressor`, has this and the rest)."""

    def payload_bytes(self, shape: Any, dtype: Any = ...) -> int:
        """The bytes one compressed value of ``shape`` and ``dtype`` sends."""
        ...


class GradientProblem(Protocol):
    """A problem the optimization methods of :mod:`fogsim.algorithms` take, such as
    :class:`fogsim.algorithms.LeastSquares`: ``grad(x)`` returns the agents' local gradients
    at their iterates ``x`` (stacked in simulation, batch-friendly). A ``dim`` attribute
    lets ``x0`` default to zeros, ``batch_shape`` solves several problems at once, and a
    ``solution()`` method gives the optimum for the ``"distance"`` metric."""

    def grad(self, x: Any) -> Any:
        """The local gradients at ``x``, shaped as ``x``."""
        ...


#: What the optimization methods take: a :class:`GradientProblem`, or the local gradient
#: function ``x -> grad f(x)`` itself.
Problem = GradientProblem | Callable[[Any], Any]
