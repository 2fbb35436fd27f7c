"""BlueFog's ``topology_util``: static graphs and one-peer dynamic schedules, as data.

Every graph is a ``networkx.DiGraph`` on nodes ``0..size-1``. The edge ``j -> i`` carries
``weight``, the weight agent i applies to agent j's value, and a self loop carries the self
weight: ``nx.to_numpy_array(G)[j, i]`` is fogsim's ``W[i, j]``, so ``fogsim.set_topology(G,
is_weighted=True)`` uses exactly these weights. The weights are BlueFog's own values (for
example ``1/(K+1)`` rounded once, as BlueFog computes them, so that ``IsTopologyEquivalent``
against a BlueFog-built graph holds); :mod:`fogsim.topology`'s builders instead give
weights whose rows sum to exactly 1.0. The mesh grid comes from :mod:`fogsim.topology`.

The dynamic helpers yield ``(send_ranks, recv_ranks)`` for one agent per step, as BlueFog's
do. Where BlueFog would fail obscurely (an assertion, a division by zero) these raise a
``ValueError`` naming the argument; see each function for the few deviations.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ... import topology as _T
from ..._types import TopologyData

__all__ = [
    "ExponentialGraph",
    "ExponentialTwoGraph",
    "FullyConnectedGraph",
    "GetDynamicOnePeerSendRecvRanks",
    "GetDynamicSendRecvRanks",
    "GetExp2DynamicSendRecvMachineRanks",
    "GetInnerOuterExpo2DynamicSendRecvRanks",
    "GetInnerOuterRingDynamicSendRecvRanks",
    "GetRecvWeights",
    "GetSendWeights",
    "InferDestinationFromSourceRanks",
    "InferSourceFromDestinationRanks",
    "IsRegularGraph",
    "IsTopologyEquivalent",
    "MeshGrid2DGraph",
    "RingGraph",
    "StarGraph",
    "SymmetricExponentialGraph",
]

SendRecv = tuple[list[int], list[int]]


# -- static graphs ------------------------------------------------------------------------
def ExponentialTwoGraph(size: int) -> nx.DiGraph:
    """Return the exponential-2 graph: agent i sends to ``i + 2**k`` for every ``2**k < size``.

    Uniform weights ``1 / (K + 1)`` on self and the K in-neighbors ``i - 2**k``.
    """
    return ExponentialGraph(size, 2)


def ExponentialGraph(size: int, base: int = 2) -> nx.DiGraph:
    """Return the exponential graph: agent i sends to ``i + base**k`` for every ``base**k < size``.

    Uniform weights ``1 / (K + 1)``. Powers are exact integers: BlueFog's floating-point
    ``isPowerOf`` misses some (``3**5 = 243``, ``10**3``), so for such sizes the graphs differ.
    """
    size = _positive_int(size, "size")
    base = _positive_int(base, "base")
    if base < 2:
        raise ValueError(f"base must be >= 2, got {base}")
    powers = []
    p = 1
    while p < size:
        powers.append(p)
        p *= base
    return _uniform_circulant(size, [size - p for p in powers])


def SymmetricExponentialGraph(size: int, base: int = 4) -> nx.DiGraph:
    """Return BlueFog's symmetric exponential graph: i exchanges with ``i +- base**k``.

    The offsets are ``p`` and ``size - p`` for the powers ``p = base**k <= size // 2``, so
    the graph is undirected; uniform weights ``1 / (K + 1)``, K distinct neighbors. This is
    not :func:`fogsim.topology.symmetric_exponential_graph`, which also uses powers above
    ``size // 2`` (and defaults to base 2).
    """
    size = _positive_int(size, "size")
    base = _positive_int(base, "base")
    if base < 2:
        raise ValueError(f"base must be >= 2, got {base}")
    offsets: set[int] = set()
    p = 1
    while p <= size // 2:
        offsets.update((p, size - p))
        p *= base
    return _uniform_circulant(size, sorted(offsets))


def RingGraph(size: int, connect_style: int = 0) -> nx.DiGraph:
    """Return the ring: ``connect_style`` 0 bidirectional, 1 left-connected, 2 right-connected.

    0: i exchanges with ``i - 1`` and ``i + 1``, weights 1/3; 1: i sends to its left
    neighbor ``i - 1``, weights 1/2; 2: i sends to its right neighbor ``i + 1``, weights 1/2.
    Two agents average with weights 1/2 in every style; one agent keeps weight 1.
    """
    style = operator.index(connect_style) if not isinstance(connect_style, bool) else -1
    if style not in (0, 1, 2):
        raise ValueError(f"connect_style must be 0, 1 or 2, got {connect_style!r}")
    size = _positive_int(size, "size")
    if size <= 2:
        return _uniform_circulant(size, [1] if size == 2 else [])
    # the offsets agent i receives from: both sides, i + 1 (it sends left), i - 1
    return _uniform_circulant(size, ([1, size - 1], [1], [size - 1])[style])


def StarGraph(size: int, center_rank: int = 0) -> nx.DiGraph:
    """Return the star around ``center_rank`` with BlueFog's weights.

    Center: ``1/size`` on itself and on every leaf; leaf: ``1/size`` on the center and
    ``1 - 1/size`` on itself. Doubly stochastic.
    """
    size = _positive_int(size, "size")
    center = _rank(center_rank, size, "center_rank")
    leaves = np.delete(np.arange(size), center)
    hub = np.full(size - 1, center)
    w = 1.0 / size
    rows = np.concatenate([leaves, hub, leaves, [center]])
    cols = np.concatenate([leaves, leaves, hub, [center]])
    vals = np.concatenate([np.full(size - 1, 1 - w), np.full(2 * (size - 1), w), [w]])
    return _T.Topology(sp.coo_array((vals, (rows, cols)), shape=(size, size))).to_networkx()


def MeshGrid2DGraph(size: int, shape: tuple[int, int] | None = None) -> nx.DiGraph:
    """Return the 2-D grid (4-neighbor links) with Metropolis-Hastings weights.

    Agent ``r * ncol + c`` sits at row r, column c of ``shape = (nrow, ncol)``; by default
    the two closest factors of ``size`` with ``nrow <= ncol`` (a path when size is prime).
    ``w_ij = 1 / (1 + max(d_i, d_j))`` for neighbors, ``w_ii = 1 - sum_j w_ij`` (summed in
    another order than BlueFog's, so a self weight may differ from BlueFog's in the last bit).
    """
    return _T.mesh_grid_2d_graph(size, shape).to_networkx()


def FullyConnectedGraph(size: int) -> nx.DiGraph:
    """Return the complete graph with every weight ``1/size``."""
    size = _positive_int(size, "size")
    return _uniform_circulant(size, list(range(1, size)))


# -- graph utilities ----------------------------------------------------------------------
def IsTopologyEquivalent(topo1: TopologyData | None, topo2: TopologyData | None) -> bool:
    """Return whether two graphs have the same nodes and the same weighted adjacency matrix.

    Not an isomorphism test: node ``k`` must match node ``k``; weights must be equal exactly.
    ``None`` is equivalent to nothing.
    """
    if topo1 is None or topo2 is None:
        return False
    g1, g2 = _as_graph(topo1), _as_graph(topo2)
    if g1.number_of_nodes() != g2.number_of_nodes():
        return False
    if g1.number_of_edges() != g2.number_of_edges() or set(g1) != set(g2):
        return False
    nodes = list(g1)
    a1 = nx.to_scipy_sparse_array(g1, nodelist=nodes)
    a2 = nx.to_scipy_sparse_array(g2, nodelist=nodes)
    return bool((a1 != a2).nnz == 0)


def IsRegularGraph(topo: TopologyData) -> bool:
    """Return whether every node has the same degree (in + out edges, self loop counted twice)."""
    degrees = {d for _, d in _as_graph(topo).degree()}
    return len(degrees) <= 1


def GetRecvWeights(topo: TopologyData, rank: int) -> tuple[float, dict[int, float]]:
    """Return agent ``rank``'s ``(self_weight, {src_rank: weight})`` for receiving.

    ``weight`` is what ``rank`` applies to ``src_rank``'s value (edge ``src_rank -> rank``);
    the self weight is 0.0 without a self loop.
    """
    graph = _as_graph(topo)
    self_weight, weights = 0.0, {}
    for src in graph.predecessors(rank):
        w = float(graph[src][rank].get("weight", 1.0))
        if src == rank:
            self_weight = w
        else:
            weights[src] = w
    return self_weight, weights


def GetSendWeights(topo: TopologyData, rank: int) -> tuple[float, dict[int, float]]:
    """Return agent ``rank``'s ``(self_weight, {dst_rank: weight})`` for sending.

    ``weight`` is what ``dst_rank`` applies to ``rank``'s value (edge ``rank -> dst_rank``).
    """
    graph = _as_graph(topo)
    self_weight, weights = 0.0, {}
    for dst in graph.successors(rank):
        w = float(graph[rank][dst].get("weight", 1.0))
        if dst == rank:
            self_weight = w
        else:
            weights[dst] = w
    return self_weight, weights


# -- dynamic schedules --------------------------------------------------------------------
def GetDynamicOnePeerSendRecvRanks(topo: TopologyData, self_rank: int) -> Iterator[SendRecv]:
    """Yield ``([send_rank], recv_ranks)`` of BlueFog's one-peer variant of ``topo``, per step.

    Every agent orders its out-neighbors by the distance ``(j - rank) % size``; at step t it
    sends to number ``t % out_degree`` of them and receives from everyone sending to it
    that step (ascending). On the exponential-2 graph, step t sends to ``rank + 2**(t % K)``.
    An agent without out-neighbors sends to nobody (``[]``; BlueFog divides by zero).
    """
    graph = _as_graph(topo)
    size = graph.number_of_nodes()
    if set(graph) != set(range(size)):
        raise ValueError(f"topo must have nodes 0..{size - 1}")
    me = _rank(self_rank, size, "self_rank")

    def ordered_out(r: int) -> list[int]:
        return sorted((j for j in graph.successors(r) if j != r), key=lambda j: (j - r) % size)

    mine = ordered_out(me)
    senders = {j: ordered_out(j) for j in sorted(graph.predecessors(me)) if j != me}

    def steps() -> Iterator[SendRecv]:
        t = 0
        while True:
            send = [mine[t % len(mine)]] if mine else []
            recv = [j for j, out in senders.items() if out[t % len(out)] == me]
            yield send, recv
            t += 1

    return steps()


#: BlueFog's older name of :func:`GetDynamicOnePeerSendRecvRanks`.
GetDynamicSendRecvRanks = GetDynamicOnePeerSendRecvRanks


def GetExp2DynamicSendRecvMachineRanks(
    world_size: int, local_size: int, self_rank: int, local_rank: int
) -> Iterator[SendRecv]:
    """Yield ``([send_machine], [recv_machine])``: one-peer exponential-2 among machines.

    Machine ``m = self_rank // local_size`` of ``M = world_size // local_size`` sends at step
    t to machine ``(m + 2**(t % K)) % M`` and receives from ``(m - 2**(t % K)) % M``, K the
    number of powers ``2**k < M``. Needs equal machines and at least two of them.
    """
    world_size = _positive_int(world_size, "world_size")
    local_size = _positive_int(local_size, "local_size")
    self_rank = _rank(self_rank, world_size, "self_rank")
    machines = _machines(world_size, local_size, need_two=True)
    if self_rank % local_size != local_rank:
        raise ValueError(
            f"local_rank={local_rank} is not self_rank % local_size = {self_rank % local_size}"
        )
    machine = self_rank // local_size
    period = (machines - 1).bit_length()

    def steps() -> Iterator[SendRecv]:
        t = 0
        while True:
            dist = 1 << (t % period)
            yield [(machine + dist) % machines], [(machine - dist) % machines]
            t += 1

    return steps()


def GetInnerOuterRingDynamicSendRecvRanks(
    world_size: int, local_size: int, self_rank: int
) -> Iterator[SendRecv]:
    """Yield ``([send_rank], [recv_rank])`` of BlueFog's inner-ring/outer-ring schedule.

    At step t, local rank ``o = t % local_size`` of every machine exchanges with the same
    local rank of the next machine (sends to machine + 1, receives from machine - 1); the
    other local ranks of each machine form a ring that skips ``o`` (send to the next, receive
    from the previous). Needs ``local_size > 2`` and, unlike BlueFog, two machines or more.
    """
    machine, local, local_size, machines = _inner_outer_args(world_size, local_size, self_rank)

    def steps() -> Iterator[SendRecv]:
        t = 0
        while True:
            out = t % local_size
            if local == out:
                send = ((machine + 1) % machines) * local_size + local
                recv = ((machine - 1) % machines) * local_size + local
            else:
                fwd = 1 + ((local + 1) % local_size == out)
                back = 1 + ((local - 1) % local_size == out)
                send = machine * local_size + (local + fwd) % local_size
                recv = machine * local_size + (local - back) % local_size
            yield [send], [recv]
            t += 1

    return steps()


def GetInnerOuterExpo2DynamicSendRecvRanks(
    world_size: int, local_size: int, self_rank: int
) -> Iterator[SendRecv]:
    """Yield ``([send_rank], [recv_rank])`` of BlueFog's inner-exp2/outer-exp2 schedule.

    At step t, local rank ``o = t % local_size`` of every machine exchanges with the same
    local rank of machine ``m +- 2**(t % K_out)`` (K_out powers ``2**k < machines``); the
    other local ranks of each machine, a ring that skips ``o``, send ``2**(t % K_in)`` places
    ahead on it (K_in powers ``2**k <= local_size - 2``) and receive from as far behind.
    Needs ``local_size > 2`` and at least two machines (BlueFog fails on one).
    """
    machine, local, local_size, machines = _inner_outer_args(world_size, local_size, self_rank)
    out_period = (machines - 1).bit_length()
    in_period = (local_size - 2).bit_length()

    def steps() -> Iterator[SendRecv]:
        t = 0
        while True:
            out = t % local_size
            if local == out:
                dist = 1 << (t % out_period)
                send = ((machine + dist) % machines) * local_size + local
                recv = ((machine - dist) % machines) * local_size + local
            else:
                hop = 1 << (t % in_period)
                # Hops reaching or passing the outgoing rank skip it, one place further.
                fwd = hop + (hop >= (out - local) % local_size)
                back = hop + (hop >= (local - out) % local_size)
                send = machine * local_size + (local + fwd) % local_size
                recv = machine * local_size + (local - back) % local_size
            yield [send], [recv]
            t += 1

    return steps()


# -- helpers ------------------------------------------------------------------------------
def _uniform_circulant(size: int, offsets: list[int]) -> nx.DiGraph:
    """Return the graph where agent i receives from ``(i + o) % size`` for each offset ``o``,
    with weight ``1.0 / (len(offsets) + 1)`` on every edge and the self loop (BlueFog's)."""
    w = 1.0 / (len(offsets) + 1)
    return _T.Topology.circulant(size, offsets, w, w).to_networkx()


def _as_graph(topo: TopologyData) -> nx.DiGraph:
    """Return ``topo`` as a DiGraph (a fogsim Topology, a matrix or an undirected graph too)."""
    if isinstance(topo, nx.DiGraph):
        return topo
    return _T.as_topology(topo, argname="topo").to_networkx()


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {number}")
    return number


def _rank(value: Any, size: int, name: str) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer rank, got {type(value).__name__}")
    if not 0 <= value < size:
        raise ValueError(f"{name}={value} is out of range for {size} agents")
    return int(value)


def _machines(world_size: int, local_size: int, need_two: bool) -> int:
    if world_size % local_size:
        raise ValueError(
            f"world_size={world_size} is not a multiple of local_size={local_size}: "
            "machines must all hold the same number of agents"
        )
    machines = world_size // local_size
    if need_two and machines < 2:
        raise ValueError(
            f"needs at least two machines, got world_size == local_size == {world_size}"
        )
    return machines


def _inner_outer_args(world_size: int, local_size: int, self_rank: int) -> tuple[int, ...]:
    world_size = _positive_int(world_size, "world_size")
    local_size = _positive_int(local_size, "local_size")
    self_rank = _rank(self_rank, world_size, "self_rank")
    machines = _machines(world_size, local_size, need_two=True)
    if local_size <= 2:
        raise ValueError(
            f"local_size must be > 2 for the inner/outer schedules, got {local_size}; "
            "use GetDynamicOnePeerSendRecvRanks instead"
        )
    return self_rank // local_size, self_rank % local_size, local_size, machines


# bluefog.torch.topology_util's collective helpers (they need fogsim.init()).
from ._extra import InferDestinationFromSourceRanks, InferSourceFromDestinationRanks  # noqa: E402
