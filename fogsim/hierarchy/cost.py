"""The alpha-beta cost model of collective and neighbor communication on a hierarchical network.

A message of ``n`` bytes over a link of latency ``alpha`` (s) and bandwidth ``w`` (B/s)
takes ``alpha + n / w``. The BlueConnect paper's models (its equation numbers):
ring reduce-scatter or all-gather among p processes, Eq. (1), ``T_r = (p - 1) alpha +
(p - 1)/p n/w``; recursive halving/doubling, Eq. (2), ``T_c = lg(p) alpha + (p - 1)/p
n/w``; ``T_r/c``, Eq. (3), halving/doubling for powers of two, else the ring; reduce and
broadcast, Eq. (4), ``T_c + T_r`` (``lg p`` as written, also for other p, as Eq. (7) uses
it inside a machine). An all-reduce is a reduce-scatter then an all-gather: twice those.

A :class:`Network` lists levels from the inside out: level 0 joins the processes of a
machine (e.g. NVLink), level l joins ``size_l`` groups of level l - 1 (e.g. machines under
a switch). Ranks fill it in order, rank r's digits in the mixed radix of the level sizes,
innermost fastest (``rank = machine * local_size + local_rank``). A message crosses the
levels 0 .. L, L the outermost level at which its two ranks' digits differ. Level 0's
link belongs to one process; level l's link (l >= 1) is, on a fat tree, the uplink of a
level l - 1 group, shared by its ``p_0 ... p_{l-1}`` processes, and on a torus a link of
the machine, shared by its ``p_0`` processes (the paper's assumptions for Eq. 9 and 10).
Concurrent messages share links: ``c`` of them on one link in one direction get ``w / c``.

* A ring (or one stage of an all-reduce) runs at the narrowest share ``min_l w_l / c_l``
  of the links its hops use and pays the largest of their latencies. This gives the
  one-level ring, Eq. (5, 6), at ``min W``; the two-level scheme, Eq. (7), its masters'
  ring at ``min W``; and the decomposed (BlueConnect) all-reduce, whose stage i among
  ``p_i`` processes moves ``N / (p_0 ... p_{i-1})`` bytes at ``min_{j <= i} w_j / (p_0 ...
  p_{j-1})`` on a fat tree, Eq. (9), and at ``min(w_0, min_{1 <= j <= i} w_j / p_0)`` on a
  torus, Eq. (10) (the paper's sums read ``j < i``; its expanded Eq. (9) includes
  ``j = i``, as here). Any factorization of P works: each stage's hops are counted.
* A neighbor exchange sends ``N`` bytes to every out-neighbor at once and lasts as long
  as its busiest link, ``max_l alpha_l + c_l N / w_l``; a dynamic schedule (e.g. one-peer
  exponential-2) costs the average of its steps. ``hierarchical_neighbor_allreduce`` is
  BlueFog's all-reduce inside each machine (level 0), exchange among the local ranks 0
  over the machine topology, and broadcast inside each machine (the local combine is free).

The paper has one latency; here each level has its own (equal latencies give the paper's
equations exactly). Arithmetic is free, as in the paper. :class:`CostModel` gives any op's
time; :class:`CostMeter` adds them up per op and per iteration;
:func:`~fogsim.hierarchy.attach_cost_model` charges every op of a simulated run to one (and
:mod:`fogsim.timeline` shows the times).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..topology import (
    DynamicStep,
    as_topology,
)

if TYPE_CHECKING:
    from .._types import TopologyLike

__all__ = [
    "INFINIBAND_100G",
    "NVLINK",
    "CostMeter",
    "CostModel",
    "Level",
    "Network",
    "allreduce_time",
    "attach_cost_model",
    "best_time",
    "broadcast_time",
    "decomposed_allreduce_time",
    "detach_cost_model",
    "halving_doubling_time",
    "hierarchical_neighbor_allreduce_time",
    "neighbor_allreduce_time",
    "one_level_allreduce_time",
    "reduce_time",
    "ring_time",
    "schedule_time",
    "two_level_allreduce_time",
]

#: Illustrative link figures (``Level(size, **NVLINK)``), not measurements: an NVLink-class
#: link inside a machine (32 GB/s per lane, as the paper's Fig. 1) and 100 Gb/s InfiniBand.
NVLINK = MappingProxyType({"alpha": 2e-6, "bandwidth": 32e9})
INFINIBAND_100G = MappingProxyType({"alpha": 5e-6, "bandwidth": 12.5e9})


def _check_n(n: Any) -> float:
    # numbers.Real is no static numeric type (python/mypy#3186): compare it as the float it is
    if isinstance(n, bool) or not isinstance(n, numbers.Real) or not cast(float, n) >= 0:
        raise ValueError(f"n (bytes) must be a number >= 0, got {n!r}")
    return float(n)


def _check(p: Any, n: Any, alpha: Any, w: Any) -> None:
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        raise TypeError(f"p must be an integer, got {type(p).__name__}")
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    _check_n(n)
    if not alpha >= 0:
        raise ValueError(f"alpha (s) must be >= 0, got {alpha!r}")
    if not w > 0:
        raise ValueError(f"w (bytes/s) must be > 0, got {w!r}")


def ring_time(p: int, n: float, alpha: float, w: float) -> float:
    """Return Eq. (1), a ring reduce-scatter (or all-gather) of n bytes among p processes."""
    _check(p, n, alpha, w)
    return (p - 1) * alpha + (p - 1) / p * n / w


def halving_doubling_time(p: int, n: float, alpha: float, w: float) -> float:
    """Return Eq. (2), recursive halving (or doubling) of n bytes among p processes."""
    _check(p, n, alpha, w)
    return math.log2(p) * alpha + (p - 1) / p * n / w


def best_time(p: int, n: float, alpha: float, w: float) -> float:
    """Return Eq. (3): halving/doubling when p is a power of two, else the ring."""
    _check(p, n, alpha, w)
    if p & (p - 1) == 0:
        return halving_doubling_time(p, n, alpha, w)
    return ring_time(p, n, alpha, w)


def reduce_time(p: int, n: float, alpha: float, w: float) -> float:
    """Return Eq. (4), a reduce of n bytes to one of p processes: ``T_c + T_r``."""
    return halving_doubling_time(p, n, alpha, w) + ring_time(p, n, alpha, w)


def broadcast_time(p: int, n: float, alpha: float, w: float) -> float:
    """Return Eq. (4), a broadcast of n bytes from one of p processes: ``T_c + T_r``."""
    return reduce_time(p, n, alpha, w)


# -- the network ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Level:
    """One level of the network: ``size`` groups of the level below (or processes, at level
    0) joined by links of latency ``alpha`` (s) and bandwidth ``bandwidth`` (bytes/s)."""

    size: int
    alpha: float
    bandwidth: float
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, numbers.Integral):
            raise TypeError(f"Level.size must be an integer, got {type(self.size).__name__}")
        if self.size < 1:
            raise ValueError(f"Level.size must be >= 1, got {self.size}")
        for field, value, ok in (
            ("alpha", self.alpha, lambda v: v >= 0),
            ("bandwidth", self.bandwidth, lambda v: v > 0),
        ):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Level.{field} must be a number, got {type(value).__name__}")
            if not (math.isfinite(value) and ok(value)):
                bound = ">= 0" if field == "alpha" else "> 0"
                raise ValueError(f"Level.{field} must be finite and {bound}, got {value}")


@dataclass(frozen=True)
class Network:
    """Levels from the inside out; ``kind`` is ``"fat_tree"`` or ``"torus"`` (module doc).

    ``Network([Level(3, **NVLINK), Level(2, **IB), Level(2, **IB2)])`` is the paper's
    Fig. 1: 12 learners, 3 per node, nodes in pairs under a switch, two switches.
    """

    levels: tuple[Level, ...]
    kind: str = "fat_tree"

    def __init__(self, levels: Iterable[Level], kind: str = "fat_tree") -> None:
        levels = tuple(levels)
        if not levels or not all(isinstance(level, Level) for level in levels):
            raise TypeError("Network levels must be a non-empty sequence of Level objects")
        if kind not in ("fat_tree", "torus"):
            raise ValueError(f"Network kind must be 'fat_tree' or 'torus', got {kind!r}")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "kind", kind)

    @classmethod
    def cluster(
        cls,
        gpus_per_machine: int,
        machines: int,
        intra: Mapping[str, float] | None = None,
        inter: Mapping[str, float] | None = None,
        kind: str = "fat_tree",
    ) -> Network:
        """Return machines of ``gpus_per_machine`` processes joined by one switch level.

        ``intra``/``inter``: mappings of ``alpha`` and ``bandwidth``; by default
        :data:`NVLINK` inside a machine and :data:`INFINIBAND_100G` between machines.
        """
        return cls(
            [
                Level(gpus_per_machine, name="intra", **(intra or NVLINK)),
                Level(machines, name="inter", **(inter or INFINIBAND_100G)),
            ],
            kind,
        )

    @property
    def size(self) -> int:
        """Return the number of processes P, the product of the level sizes."""
        return math.prod(level.size for level in self.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Return the level sizes, innermost first."""
        return tuple(level.size for level in self.levels)


def _link_loads(network: Network, src: Any, dst: Any) -> np.ndarray:
    """Return, per level, the most of the messages ``src -> dst`` one link carries one way."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    sizes = np.array(network.sizes, dtype=np.int64)
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    differ = (src[:, None] // strides) % sizes != (dst[:, None] // strides) % sizes
    crossed = np.where(differ.any(axis=1), differ.shape[1] - 1 - np.argmax(differ[:, ::-1], 1), -1)
    loads = np.zeros(sizes.shape[0], dtype=np.int64)
    sharers = 1  # processes under one link of the level
    for level in range(sizes.shape[0]):
        use = crossed >= level
        if not use.any():  # a message crossing level l + 1 crosses level l too
            break
        loads[level] = max(
            np.bincount(src[use] // sharers).max(), np.bincount(dst[use] // sharers).max()
        )
        if network.kind == "fat_tree" or level == 0:
            sharers *= int(sizes[level])
    return loads


def _used_links(network: Network, src: Any, dst: Any) -> list[tuple[Level, int]]:
    """Return the levels whose links the messages ``src -> dst`` use, with their loads."""
    loads = _link_loads(network, src, dst)
    return [(level, int(c)) for level, c in zip(network.levels, loads, strict=True) if c]


def _ring_link(network: Network, src: Any, dst: Any) -> tuple[float, float]:
    """Return (alpha, w) of a ring's concurrent hops: the largest latency, narrowest share."""
    used = _used_links(network, src, dst)
    if not used:
        return 0.0, math.inf
    return max(level.alpha for level, _ in used), min(level.bandwidth / c for level, c in used)


def _exchange_time(network: Network, n: float, src: Any, dst: Any) -> float:
    """Return how long concurrent messages of n bytes take: their busiest link's time."""
    used = _used_links(network, src, dst)
    return max((level.alpha + c * n / level.bandwidth for level, c in used), default=0.0)


def _edges(topology: Any, size: int, argname: str, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Return the senders and receivers of ``topology``'s messages."""
    topo = as_topology(topology, argname=argname)
    if topo.size != size:
        raise ValueError(f"{argname} has {topo.size} agents, but the network has {size} {unit}")
    indptr, senders, _ = topo.offdiag_csr()  # row i: the agents i receives from
    return senders.astype(np.int64), np.repeat(np.arange(size), np.diff(indptr))


# -- all-reduce -----------------------------------------------------------------------------
_ALGORITHMS = ("ring", "flat", "two_level", "decomposed")


def one_level_allreduce_time(network: Network, n: float) -> float:
    """Return Eq. (6): one ring through all P processes, at the narrowest bandwidth it uses."""
    n, ranks = _check_n(n), np.arange(network.size)
    if network.size == 1:
        return 0.0
    return 2 * ring_time(network.size, n, *_ring_link(network, ranks, np.roll(ranks, -1)))


def two_level_allreduce_time(network: Network, n: float) -> float:
    """Return Eq. (7): reduce to a master per machine, all-reduce the masters, broadcast."""
    n, inner = _check_n(n), network.levels[0]
    p0, masters = inner.size, network.size // inner.size
    total = reduce_time(p0, n, inner.alpha, inner.bandwidth) + broadcast_time(
        p0, n, inner.alpha, inner.bandwidth
    )
    if masters > 1:
        ranks = np.arange(masters) * p0
        total += 2 * best_time(masters, n, *_ring_link(network, ranks, np.roll(ranks, -1)))
    return total


def _check_factors(network: Network, factors: Any) -> tuple[int, ...]:
    from ..backends._decomposed import check_factors  # the runtimes' rule: both refuse alike

    return network.sizes if factors is None else check_factors(factors, network.size)


def decomposed_allreduce_time(
    network: Network, n: float, factors: Sequence[int] | None = None
) -> float:
    """Return Eq. (9) (fat tree) or (10) (torus): the decomposed all-reduce's stages.

    ``factors`` (product P; default the level sizes): stage i all-reduces among the
    ``factors[i]`` ranks that differ only in digit i of the ranks' mixed radix over
    ``factors``, as ``fogsim.allreduce(..., algorithm="decomposed", factors=...)`` does.
    """
    n, factors = _check_n(n), _check_factors(network, factors)
    ranks = np.arange(network.size)
    total, chunk, stride = 0.0, n, 1
    for p in factors:
        if p > 1:
            digit = (ranks // stride) % p
            successor = ranks + ((digit + 1) % p - digit) * stride
            total += 2 * best_time(p, chunk, *_ring_link(network, ranks, successor))
        chunk, stride = chunk / p, stride * p
    return total


def allreduce_time(
    network: Network, n: float, algorithm: str = "ring", factors: Sequence[int] | None = None
) -> float:
    """Return the all-reduce of n bytes by ``algorithm`` (``"flat"``, fogsim's name: ring)."""
    if algorithm in ("ring", "flat"):
        return one_level_allreduce_time(network, n)
    if algorithm == "two_level":
        return two_level_allreduce_time(network, n)
    if algorithm == "decomposed":
        return decomposed_allreduce_time(network, n, factors)
    raise ValueError(f"algorithm must be one of {_ALGORITHMS}, got {algorithm!r}")


# -- neighbor ops ---------------------------------------------------------------------------
def neighbor_allreduce_time(network: Network, n: float, topology: TopologyLike) -> float:
    """Return one exchange of n bytes to every out-neighbor of ``topology`` (module doc)."""
    return _exchange_time(
        network, _check_n(n), *_edges(topology, network.size, "topology", "processes")
    )


def schedule_time(network: Network, n: float, steps: Iterable[DynamicStep | TopologyLike]) -> float:
    """Return the average neighbor exchange time over the steps of a dynamic schedule.

    ``steps``: topologies or schedule steps (with ``.weights``), e.g.
    ``itertools.islice(fogsim.topology.one_peer_exponential_two(P), period)``.
    """
    times = [neighbor_allreduce_time(network, n, getattr(s, "weights", s)) for s in steps]
    if not times:
        raise ValueError("schedule_time: steps is empty; it needs at least one step")
    return float(np.mean(times))


def _local_allreduce_time(network: Network, n: float, local_size: int | None = None) -> float:
    """Return an all-reduce of n bytes inside every machine of ``local_size`` ranks at once
    (default level 0's size): twice Eq. (3) at the latency and narrowest share of the
    links that all the machines' rings use together (see :class:`CostModel`)."""
    n = _check_n(n)
    p = network.levels[0].size if local_size is None else local_size
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        raise TypeError(f"local_size must be an integer, got {type(p).__name__}")
    if p < 1 or network.size % p:
        raise ValueError(f"local_size must divide the network's {network.size} ranks, got {p}")
    if p == 1:
        return 0.0
    ranks = np.arange(network.size)
    successor = ranks - ranks % p + (ranks + 1) % p
    return 2 * best_time(int(p), n, *_ring_link(network, ranks, successor))


def hierarchical_neighbor_allreduce_time(
    network: Network, n: float, machine_topology: TopologyLike
) -> float:
    """Return a machine all-reduce, the exchange among local ranks 0, a machine broadcast.

    ``machine_topology`` has one agent per machine (a level-0 group of the network).
    """
    n, inner = _check_n(n), network.levels[0]
    p0 = inner.size
    senders, receivers = _edges(
        machine_topology, network.size // p0, "machine_topology", "machines"
    )
    return (
        2 * best_time(p0, n, inner.alpha, inner.bandwidth)
        + _exchange_time(network, n, senders * p0, receivers * p0)
        + broadcast_time(p0, n, inner.alpha, inner.bandwidth)
    )


# -- per op, per run ------------------------------------------------------------------------
class CostModel:
    """The time of any fogsim op on ``network``; ``allreduce`` names the default algorithm.

    ``allgather`` is a ring all-gather of ``size * nbytes`` (Eq. 1), ``broadcast`` Eq. (4)
    and ``barrier`` ``ceil(lg P)`` latencies (dissemination), all at the latency and
    bandwidth of the one-level ring; ``neighbor_allgather`` moves what
    ``neighbor_allreduce`` moves; ``local_allreduce`` (``allreduce(...,
    is_hierarchical_local=True)``) is every machine's all-reduce at once, as
    ``hierarchical_neighbor_allreduce`` does it inside a machine: twice Eq. (3) among the
    machine's ``local_size`` ranks (default level 0's size) at its ring's latency and
    narrowest share, ``alpha_0`` and ``w_0`` when the machines are level 0's groups.
    """

    OPS = (
        "allreduce",
        "allgather",
        "broadcast",
        "neighbor_allreduce",
        "neighbor_allgather",
        "hierarchical_neighbor_allreduce",
        "local_allreduce",
        "barrier",
    )

    def __init__(self, network: Network, allreduce: str = "ring") -> None:
        if not isinstance(network, Network):
            raise TypeError(f"CostModel needs a Network, got {type(network).__name__}")
        if allreduce not in _ALGORITHMS:
            raise ValueError(f"allreduce must be one of {_ALGORITHMS}, got {allreduce!r}")
        self.network, self.allreduce = network, allreduce
        ranks = np.arange(network.size)
        self._flat = _ring_link(network, ranks, np.roll(ranks, -1))

    def op_time(
        self,
        op: str,
        nbytes: float,
        *,
        size: int,
        topology: TopologyLike | None = None,
        machine_topology: TopologyLike | None = None,
        algorithm: str | None = None,
        factors: Sequence[int] | None = None,
        local_size: int | None = None,
    ) -> float:
        """Return the seconds ``op`` takes on ``nbytes`` per process among ``size``
        (``local_size``: the machine size of a ``local_allreduce``)."""
        net = self.network
        if size != net.size:
            raise ValueError(f"the run has size={size} processes but the network {net.size}")
        if op not in self.OPS:
            raise ValueError(f"unknown op {op!r}; the cost model knows {', '.join(self.OPS)}")
        nbytes, (alpha, w) = _check_n(nbytes), self._flat
        if op == "allreduce":
            return allreduce_time(net, nbytes, algorithm or self.allreduce, factors)
        if op == "allgather":
            return ring_time(size, size * nbytes, alpha, w)
        if op == "broadcast":
            return broadcast_time(size, nbytes, alpha, w)
        if op == "barrier":
            return math.ceil(math.log2(size)) * alpha
        if op == "local_allreduce":
            return _local_allreduce_time(net, nbytes, local_size)
        if op == "hierarchical_neighbor_allreduce":
            if machine_topology is None:
                raise ValueError("hierarchical_neighbor_allreduce needs machine_topology=")
            return hierarchical_neighbor_allreduce_time(net, nbytes, machine_topology)
        if topology is None:
            raise ValueError(f"{op} needs topology=")
        return neighbor_allreduce_time(net, nbytes, topology)


class CostMeter:
    """Adds up the modelled time of the ops :meth:`CostMeter.record` is told about.

    ``total`` (s), ``per_op`` (s by op), ``calls`` (count by op), ``iterations`` (s per
    iteration closed with :meth:`mark`; the ops since then make ``current``).
    """

    def __init__(self, model: CostModel | Network) -> None:
        self.model = model if isinstance(model, CostModel) else CostModel(model)
        self.reset()

    def reset(self) -> None:
        """Forget everything recorded."""
        self.total = 0.0
        self.current = 0.0
        self.per_op: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.iterations: list[float] = []
        self._cache: dict[tuple[Any, ...], tuple[float, list[Any]]] = {}

    def record(self, op: str, nbytes: float, **info: Any) -> float:
        """Charge one op (arguments of :meth:`CostModel.op_time`); return its seconds."""
        values = [v for _, v in sorted(info.items())]
        # Topologies are keyed by identity; the cache holds them, so no id is reused.
        key = (
            op,
            nbytes,
            *(v if isinstance(v, int | str | tuple | None) else id(v) for v in values),
        )
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= 4096:
                self._cache.clear()
            hit = self._cache[key] = (self.model.op_time(op, nbytes, **info), values)
        seconds = hit[0]
        self.total += seconds
        self.current += seconds
        self.per_op[op] = self.per_op.get(op, 0.0) + seconds
        self.calls[op] = self.calls.get(op, 0) + 1
        return seconds

    def mark(self) -> float:
        """Close the current iteration; return its modelled communication time."""
        done, self.current = self.current, 0.0
        self.iterations.append(done)
        return done

    def __repr__(self) -> str:
        return (
            f"CostMeter(total={self.total:.6g} s, iterations={len(self.iterations)}, "
            f"per_op={ {k: round(v, 9) for k, v in self.per_op.items()} })"
        )


def attach_cost_model(model: CostModel | Network | CostMeter) -> CostMeter:
    """Charge every communication op of the current simulated world to a :class:`CostMeter`.

    Returns the meter: ``meter.mark()`` after each iteration gives the modelled time per
    iteration; a running timeline shows the modelled COMMUNICATE spans.
    """
    from .. import _context

    meter = model if isinstance(model, CostMeter) else CostMeter(model)
    backend = _context.current().simulator("attach_cost_model")
    if meter.model.network.size != backend.size_int:
        raise ValueError(
            f"the network has {meter.model.network.size} processes but the "
            f"world {backend.size_int} agents"
        )
    backend.attach_cost_model(meter)
    return meter


def detach_cost_model() -> None:
    """Stop charging the current simulated world's ops to a cost meter."""
    from .. import _context

    ctx = _context.current()
    if ctx.is_simulated:
        ctx.simulator("detach_cost_model").attach_cost_model(None)
