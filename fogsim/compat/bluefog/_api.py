"""BlueFog's functions (``bluefog.torch``'s names and semantics) over fogsim's public API.

Each function is a thin wrapper: BlueFog's argument names and order, BlueFog's defaults
and return types (``load_topology`` a ``networkx.DiGraph``, ``set_topology`` a bool), and
integer weights turned into floats. The ops are fogsim's, so numpy arrays work as well as
torch tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import networkx as nx
import numpy as np

import fogsim

from ..._types import ArrayLike, PerAgent, Ranks, SelfWeight, TopologyLike, Value, Weights
from . import _errors
from ._args import (
    _check_bool,
    _check_in_place,
    _copy_into,
    _float_scalar,
    _float_weights,
    _in_place,
    _is_integer,
    _legacy_weights,
)
from ._order import src_order, src_order_stacked
from ._pairs import Call, bluefog_op
from ._types import Tensor
from .topology_util import ExponentialTwoGraph

__all__ = [
    "init",
    "shutdown",
    "size",
    "rank",
    "local_size",
    "local_rank",
    "set_topology",
    "load_topology",
    "is_topo_weighted",
    "in_neighbor_ranks",
    "out_neighbor_ranks",
    "machine_size",
    "machine_rank",
    "set_machine_topology",
    "load_machine_topology",
    "is_machine_topo_weighted",
    "in_neighbor_machine_ranks",
    "out_neighbor_machine_ranks",
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
    "allreduce",
    "allreduce_nonblocking",
    "allreduce_",
    "allreduce_nonblocking_",
    "allgather",
    "allgather_nonblocking",
    "broadcast",
    "broadcast_nonblocking",
    "broadcast_",
    "broadcast_nonblocking_",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "barrier",
    "synchronize",
    "wait",
    "poll",
]


# -- world --------------------------------------------------------------------------------
def init(topology_fn: Callable[[int], nx.DiGraph] | None = None, is_weighted: bool = False) -> None:
    """Start fogsim (:func:`fogsim.init`) and set the topology ``topology_fn(size())``.

    Without ``topology_fn`` the topology is the exponential-2 graph. ``is_weighted`` is that
    of :func:`set_topology`. The backend and size come from fogsim's defaults and the
    ``FOGSIM_BACKEND`` / ``FOGSIM_SIZE`` variables. As in BlueFog,
    ``BLUEFOG_NODES_PER_MACHINE=K`` makes machines of K ranks (``local_size``,
    ``machine_size`` and the hierarchical ops follow it); ``FOGSIM_LOCAL_SIZE`` wins when both
    are set. ``BLUEFOG_TIMELINE`` and ``BLUEFOG_FUSION_THRESHOLD`` are honoured too, and
    BlueFog's other variables get a notice (``fogsim.compat.bluefog._environ``).
    """
    from . import _environ

    _errors.forget_names()
    with _environ.init_environment():
        ctx = fogsim.init(local_size=_nodes_per_machine())
    _environ.start_timeline(ctx)
    _environ.notice_no_effect(rank=fogsim.rank())
    set_topology(None if topology_fn is None else topology_fn(fogsim.size()), is_weighted)


def _nodes_per_machine() -> int | None:
    """``BLUEFOG_NODES_PER_MACHINE`` as a local size (None: unset, or FOGSIM_LOCAL_SIZE set)."""
    from ... import _settings

    env = _settings.environ()
    text = env.get("BLUEFOG_NODES_PER_MACHINE", "").strip()
    if not text or env.get("FOGSIM_LOCAL_SIZE", "").strip():
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"BLUEFOG_NODES_PER_MACHINE must be a positive integer (ranks per "
            f"machine), got {text!r}"
        )
    return value


def shutdown() -> None:
    """Shut fogsim down; :func:`init` may be called again."""
    _errors.forget_names()
    fogsim.shutdown()


def size() -> int:
    """Return the number of agents."""
    return fogsim.size()


def rank() -> PerAgent:
    """Return this agent's rank (all ranks, stacked, under the simulator)."""
    return fogsim.rank()


def local_size() -> int:
    """Return the number of agents on this machine."""
    return fogsim.local_size()


def local_rank() -> PerAgent:
    """Return this agent's rank within its machine (stacked under the simulator)."""
    return fogsim.local_rank()


# -- topology -----------------------------------------------------------------------------
def set_topology(topology: TopologyLike | None = None, is_weighted: bool = False) -> bool:
    """Use ``topology`` (a ``networkx.DiGraph``) for the neighbor ops; return True.

    ``None`` means the exponential-2 graph. With ``is_weighted`` the neighbor ops use the
    graph's weights (edge ``j -> i``: the weight i applies to j), else uniform weights
    ``1/(in-degree + 1)``. Anything :func:`fogsim.set_topology` takes is accepted too. As in
    BlueFog, while windows exist the topology stays and the result is False (with a
    ``RuntimeWarning``). A bad topology raises (``TypeError``/``ValueError``) instead of
    BlueFog's False.
    """
    if topology is None:
        topology = ExponentialTwoGraph(fogsim.size())  # BlueFog's weights, 1/(K+1)
    if fogsim.win_names():
        warnings.warn(
            "set_topology: the topology cannot change while windows exist "
            f"({', '.join(fogsim.win_names())}); free them with win_free first. "
            "The topology stays as it was.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    fogsim.set_topology(topology, is_weighted=is_weighted, check_weights=False)  # as BlueFog
    return True


def load_topology() -> nx.DiGraph:
    """Return the topology in use as a ``networkx.DiGraph`` (edge ``j -> i``: weight i gives j)."""
    return fogsim.load_topology().to_networkx()


def is_topo_weighted() -> bool:
    """Return whether the neighbor ops use the topology's own weights."""
    return fogsim.is_topology_weighted()


def in_neighbor_ranks() -> PerAgent:
    """Return the ranks this agent receives from, self excluded (one list per agent, stacked)."""
    return fogsim.in_neighbor_ranks()


def out_neighbor_ranks() -> PerAgent:
    """Return the ranks this agent sends to, self excluded (one list per agent, stacked)."""
    return fogsim.out_neighbor_ranks()


# -- machines -----------------------------------------------------------------------------
def machine_size() -> int:
    """Return the number of machines (``size() // local_size()``)."""
    return fogsim.machine_size()


def machine_rank() -> PerAgent:
    """Return this agent's machine, ``rank() // local_size()`` (stacked under the simulator)."""
    return fogsim.machine_rank()


def set_machine_topology(topology: TopologyLike, is_weighted: bool = False) -> bool:
    """Use ``topology`` (a ``networkx.DiGraph`` over the machines) for the hierarchical ops."""
    fogsim.set_machine_topology(topology, is_weighted=is_weighted, check_weights=False)
    return True


def load_machine_topology() -> nx.DiGraph:
    """Return the machine topology as a ``networkx.DiGraph``."""
    return fogsim.load_machine_topology().to_networkx()


def is_machine_topo_weighted() -> bool:
    """Return whether the hierarchical ops use the machine topology's own weights."""
    return fogsim.is_machine_topology_weighted()


def in_neighbor_machine_ranks() -> PerAgent:
    """Return the machines this agent's machine receives from."""
    return fogsim.in_neighbor_machine_ranks()


def out_neighbor_machine_ranks() -> PerAgent:
    """Return the machines this agent's machine sends to."""
    return fogsim.out_neighbor_machine_ranks()


@bluefog_op(lambda: fogsim.hierarchical_neighbor_allreduce)
def hierarchical_neighbor_allreduce(
    call: Call[Value],
    tensor: ArrayLike,
    self_weight: SelfWeight = None,
    src_machine_weights: Weights = None,
    dst_machine_weights: Weights = None,
    enable_topo_check: bool = True,
    name: str | None = None,
) -> Value:
    """Average within each machine, then neighbor-average among machines (machine weights).

    See :func:`fogsim.hierarchical_neighbor_allreduce`.
    """
    return call(
        tensor,
        name,
        tensor,
        _float_scalar(self_weight),
        _float_weights(src_machine_weights),
        _float_weights(dst_machine_weights),
        enable_topo_check,
        name,
    )


hierarchical_neighbor_allreduce_nonblocking = hierarchical_neighbor_allreduce.nonblocking


# -- collective ops -----------------------------------------------------------------------
@bluefog_op(lambda: fogsim.allreduce)
def allreduce(
    call: Call[Value],
    tensor: ArrayLike,
    average: bool = True,
    is_hierarchical_local: bool = False,
    name: str | None = None,
) -> Value:
    """Return the average (``average=False``: the sum) of ``tensor`` over all agents.

    ``is_hierarchical_local=True``: over the agents of the same machine only. Averaging an
    integer tensor raises ``AverageOfIntegers`` (BlueFog asserts floats).
    """
    _errors.check_tensor(call.op, tensor)  # BlueFog's tensor types first, then averaging
    _errors.check_average(call.op, tensor, average)
    return call(None, name, tensor, average, name, is_hierarchical_local=is_hierarchical_local)


allreduce_nonblocking = allreduce.nonblocking


def allreduce_(
    tensor: Tensor,
    average: bool = True,
    is_hierarchical_local: bool = False,
    name: str | None = None,
) -> Value:
    """Average (or sum) ``tensor`` over all agents in place; return ``tensor``."""
    _check_in_place(tensor)
    return _copy_into(tensor, allreduce(tensor, average, is_hierarchical_local, name))


def allreduce_nonblocking_(
    tensor: Tensor,
    average: bool = True,
    is_hierarchical_local: bool = False,
    name: str | None = None,
) -> fogsim.Handle:
    """Start :func:`allreduce_`; :func:`synchronize` writes the result into ``tensor``."""
    return _in_place(
        tensor, lambda: allreduce_nonblocking(tensor, average, is_hierarchical_local, name), name
    )


@bluefog_op(lambda: fogsim.allgather)
def allgather(call: Call[Value], tensor: ArrayLike, name: str | None = None) -> Value:
    """Return every agent's ``tensor`` concatenated along the first dimension, by rank."""
    return call(tensor, name, tensor, name)


allgather_nonblocking = allgather.nonblocking


@bluefog_op(lambda: fogsim.broadcast)
def broadcast(
    call: Call[Value], tensor: ArrayLike, root_rank: int, name: str | None = None
) -> Value:
    """Return agent ``root_rank``'s ``tensor`` on every agent (``tensor`` is not modified)."""
    return call(tensor, name, tensor, root_rank, name)


broadcast_nonblocking = broadcast.nonblocking


def broadcast_(tensor: Tensor, root_rank: int, name: str | None = None) -> Value:
    """Overwrite ``tensor`` with agent ``root_rank``'s, in place; return ``tensor``."""
    _check_in_place(tensor)
    return _copy_into(tensor, broadcast(tensor, root_rank, name))


def broadcast_nonblocking_(
    tensor: Tensor, root_rank: int, name: str | None = None
) -> fogsim.Handle:
    """Start :func:`broadcast_`; :func:`synchronize` writes the result into ``tensor``."""
    return _in_place(tensor, lambda: broadcast_nonblocking(tensor, root_rank, name), name)


# -- neighbor ops -------------------------------------------------------------------------
@bluefog_op(
    lambda: fogsim.neighbor_allreduce,
    twin_doc="""Start :func:`neighbor_allreduce`; return a handle for :func:`synchronize`.

    Takes the same arguments, the deprecated ``neighbor_weights``/``send_neighbors`` too.
    """,
)
def neighbor_allreduce(
    call: Call[Value],
    tensor: ArrayLike,
    self_weight: SelfWeight = None,
    src_weights: Weights = None,
    dst_weights: Weights = None,
    enable_topo_check: bool = True,
    name: str | None = None,
    *,
    neighbor_weights: Weights = None,
    send_neighbors: Ranks = None,
) -> Value:
    """Return the weighted average of own and in-neighbors' values.

    ``x_i <- self_weight x_i + sum_j src_weights[j] dst_weights_j[i] x_j``

    No weights: the topology's (``is_weighted``) or uniform. ``self_weight`` and
    ``src_weights`` (``{rank: weight}``) together: a static-topology step with these
    weights. ``dst_weights`` too (``{rank: weight}``, or a list of ranks meaning 1.0 each):
    a dynamic step, senders and receivers checked to match. Integer weights in the dicts
    are accepted; as in BlueFog, a per-agent ``self_weight`` must be a float and
    ``src_weights`` a dict (ValueError), and a ``name`` still in flight raises ValueError.
    BlueFog's earlier keywords still work, with a ``DeprecationWarning``:
    ``neighbor_weights`` for ``src_weights`` and ``send_neighbors`` (a list of ranks) for
    ``dst_weights``. See :func:`fogsim.neighbor_allreduce` for the stacked arguments of
    the simulator.
    """
    src_weights, dst_weights = _legacy_weights(
        call.op, src_weights, dst_weights, neighbor_weights, send_neighbors
    )
    _errors.check_weights(call.op, self_weight, src_weights, "src_weights")
    return call(
        tensor,
        name,
        tensor,
        _float_scalar(self_weight),
        _float_weights(src_weights),
        _float_weights(dst_weights),
        enable_topo_check,
        name,
        check_weights=False,  # BlueFog uses weights as given, without a word
    )


neighbor_allreduce_nonblocking = neighbor_allreduce.nonblocking


def neighbor_allgather(
    tensor: ArrayLike,
    src_ranks: Ranks = None,
    dst_ranks: Ranks = None,
    name: str | None = None,
    *,
    enable_topo_check: bool = True,
) -> Value:
    """Return the in-neighbors' ``tensor`` concatenated along the first dimension.

    With the topology's neighbors the blocks come by rank. ``src_ranks`` and ``dst_ranks``
    (both) replace the topology's neighbors for this call, and then, as in BlueFog, the
    blocks come in the order of ``src_ranks`` (fogsim's own op gives them by rank). Blocks
    may differ in length. ``enable_topo_check`` is accepted for BlueFog scripts; fogsim
    always checks the match.
    """
    return synchronize(
        neighbor_allgather_nonblocking(
            tensor, src_ranks, dst_ranks, name, enable_topo_check=enable_topo_check
        )
    )


def neighbor_allgather_nonblocking(
    tensor: ArrayLike,
    src_ranks: Ranks = None,
    dst_ranks: Ranks = None,
    name: str | None = None,
    *,
    enable_topo_check: bool = True,
) -> fogsim.Handle:
    """Start :func:`neighbor_allgather`; return a handle for :func:`synchronize`.

    With ``src_ranks`` on one process per agent, each agent also sends its first-dimension
    length to its destinations (a small extra exchange), so that the blocks, which may
    differ in length, can be put in the order of ``src_ranks``.
    """
    op = "neighbor_allgather_nonblocking"
    _check_bool(enable_topo_check, "enable_topo_check")
    _errors.check_tensor(op, tensor)
    return _errors.started(
        op, name, lambda: _start_neighbor_allgather(tensor, src_ranks, dst_ranks, name)
    )


def _start_neighbor_allgather(
    tensor: ArrayLike, src_ranks: Ranks, dst_ranks: Ranks, name: str | None
) -> fogsim.Handle:
    handle = fogsim.neighbor_allgather_nonblocking(tensor, src_ranks, dst_ranks, name)
    if src_ranks is None:
        return handle
    if not _is_integer(fogsim.rank()):  # simulation: every block has the same length
        return fogsim.Handle(
            handle.op,
            finish=lambda: src_order_stacked(fogsim.wait(handle), tensor, src_ranks),
            test=lambda: fogsim.poll(handle),
            name=handle.name,
        )
    shape: tuple[int, ...] = getattr(tensor, "shape", ())
    rows = np.array([shape[0] if len(shape) else 1], dtype=np.int64)
    counts = fogsim.neighbor_allgather_nonblocking(rows, src_ranks, dst_ranks)
    return fogsim.Handle(
        handle.op,
        finish=lambda: src_order(fogsim.wait(handle), fogsim.wait(counts), src_ranks),
        test=lambda: fogsim.poll(handle) and fogsim.poll(counts),
        name=handle.name,
    )


# -- synchronization ----------------------------------------------------------------------
def barrier() -> None:
    """Block until every agent has reached the barrier."""
    fogsim.barrier()


def synchronize(handle: fogsim.Handle) -> Value:
    """Block until the operation behind ``handle`` finishes; return its result.

    Its ``name``, if it had one, may then be given to another op.
    """
    try:
        return fogsim.wait(handle)
    finally:
        _errors.finished(handle)


def wait(handle: fogsim.Handle) -> Value:
    """Block until the operation behind ``handle`` finishes; return its result (= synchronize)."""
    return synchronize(handle)


def poll(handle: fogsim.Handle) -> bool:
    """Return whether :func:`synchronize` on ``handle`` would return without blocking."""
    return fogsim.poll(handle)
