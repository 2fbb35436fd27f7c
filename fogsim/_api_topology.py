"""The public functions that set and read the world's topologies (among agents, and among
machines); each calls the backend of the current context.

Split from :mod:`fogsim._api` (same conventions: in simulation, per-agent answers are one
list per agent).
"""

from __future__ import annotations

from . import _weightcheck
from ._api import _backend
from ._types import PerAgent, TopologyLike
from .topology import Topology

__all__ = [
    "set_topology",
    "load_topology",
    "is_topology_weighted",
    "in_neighbor_ranks",
    "out_neighbor_ranks",
    "machine_size",
    "machine_rank",
    "set_machine_topology",
    "load_machine_topology",
    "is_machine_topology_weighted",
    "in_neighbor_machine_ranks",
    "out_neighbor_machine_ranks",
]


# -- topology -----------------------------------------------------------------------------
def set_topology(
    topology: TopologyLike, is_weighted: bool = False, *, check_weights: bool = True
) -> None:
    """Use ``topology`` for the neighbor ops from now on.

    ``topology`` is a :class:`fogsim.topology.Topology`, a networkx graph (edge j -> i
    carrying ``weight`` W[i, j]), a dense or scipy.sparse ``n x n`` matrix (``W[i, j]`` is
    the weight agent i applies to agent j's value), or a builder called with the size.
    With ``is_weighted=False`` only its edges count and every agent averages uniformly,
    ``1/(in-degree + 1)``; with ``True`` its weights are used as given.

    Weights used as given that are neither row-stochastic (every row sums to 1: averaging)
    nor column-stochastic (every column sums to 1: push-sum) get a one-time
    :class:`fogsim.WeightWarning` naming the first bad row and column and their sums
    (``FOGSIM_CHECK_WEIGHTS=error``: a ValueError, and the old topology stays);
    ``check_weights=False`` says they are meant.
    """
    with _weightcheck.checks(check_weights):
        _backend().set_topology(topology, is_weighted)


def load_topology() -> Topology:
    """Return the topology in use."""
    return _backend().load_topology()


def is_topology_weighted() -> bool:
    """Return whether the neighbor ops use the topology's own weights."""
    return _backend().is_topology_weighted()


def in_neighbor_ranks() -> PerAgent:
    """Return the ranks this agent receives from (a list per agent in simulation)."""
    return _backend().in_neighbor_ranks()


def out_neighbor_ranks() -> PerAgent:
    """Return the ranks this agent sends to (a list per agent in simulation)."""
    return _backend().out_neighbor_ranks()


# -- machines -----------------------------------------------------------------------------
# Machine m holds the ranks m * local_size() .. (m + 1) * local_size() - 1. Distributed,
# the machines are the hosts (or blocks of FOGSIM_LOCAL_SIZE processes); they must all
# hold the same number of processes, else the machine-level functions raise.
def machine_size() -> int:
    """Return the number of machines, ``size() // local_size()``."""
    return _backend().machine_size()


def machine_rank() -> PerAgent:
    """Return this agent's machine, ``rank() // local_size()`` (stacked in simulation)."""
    return _backend().machine_rank()


def set_machine_topology(
    topology: TopologyLike, is_weighted: bool = False, *, check_weights: bool = True
) -> None:
    """Use ``topology`` among the machines for :func:`hierarchical_neighbor_allreduce`.

    Anything :func:`set_topology` takes, over ``machine_size()`` nodes (a builder is called
    with the number of machines). Default: the exponential-2 graph over the machines.
    """
    with _weightcheck.checks(check_weights):  # weights as in set_topology
        _backend().set_machine_topology(topology, is_weighted)


def load_machine_topology() -> Topology:
    """Return the topology among machines."""
    return _backend().load_machine_topology()


def is_machine_topology_weighted() -> bool:
    """Return whether the hierarchical ops use the machine topology's own weights."""
    return _backend().is_machine_topology_weighted()


def in_neighbor_machine_ranks() -> PerAgent:
    """Return the machines this agent's machine receives from (a list per agent in sim)."""
    return _backend().in_neighbor_machine_ranks()


def out_neighbor_machine_ranks() -> PerAgent:
    """Return the machines this agent's machine sends to (a list per agent in sim)."""
    return _backend().out_neighbor_machine_ranks()
