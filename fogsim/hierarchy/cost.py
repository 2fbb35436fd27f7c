"""The alpha-beta cost model of collective and neighbor communication on a hierarchical network.

A message of ``n`` bytes over a link of latency ``alpha`` (s) and bandwidth ``w`` (B/s)
takes ``alpha + n / w``. The BlueConnect paper's models (equation numbers refer to it):

* ring reduce-scatter or all-gather among p processes, Eq. (1):
  ``T_r(p, n) = (p - 1) alpha + (p - 1)/p * n / w``;
* recursive halving/doubling, Eq. (2): ``T_c(p, n) = lg(p) alpha + (p - 1)/p * n / w``;
* ``T_r/c`` picks halving/doubling for powers of two, else the ring, Eq. (3);
* reduce and broadcast, Eq. (4): ``T_c + T_r``.

An all-reduce is a reduce-scatter then an all-gather, so twice those. On a
:class:`Network` (levels from the inside out, e.g. NVLink in a machine, then switches):

* one-level ring, Eq. (5, 6): ``2 T_r(P, N, alpha, min w)``;
* two-level, Eq. (7): reduce to a master and broadcast back inside level 0, and a ring or
  halving/doubling all-reduce among the ``P / p0`` masters at the narrowest bandwidth;
* decomposed (BlueConnect) on a fat tree, Eq. (9): stage i all-reduces among ``p_i``
  processes on the chunk ``N / (p_0 ... p_{i-1})`` at bandwidth
  ``min_{j <= i} w_j / (p_0 ... p_{j-1})`` (the uplink of level j is shared by the
  ``p_0 ... p_{j-1}`` processes under it); on a torus, Eq. (10), at
  ``min(w_0, min_{1 <= j <= i} w_j / p_0)`` (dedicated links between hosts).

The paper uses one latency; here each level has its own, and a stage among the processes
of level i pays level i's (with equal latencies the paper's equations come out exactly).

Neighbor ops (fogsim's, BlueFog's): every process sends its ``N`` bytes to each
out-neighbor and receives from each in-neighbor at once. A message between two ranks
crosses the outermost level at which they differ (ranks fill machines in order: rank
``r``'s digits in the mixed radix of the level sizes, innermost fastest). Messages
through the same level share the process's link there: per process and level
``alpha_l + max(sent_l, received_l) * N / w_l``; a process takes its slowest level, and
the op takes its slowest process. A dynamic schedule (e.g. one-peer exponential-2) costs
the average over its steps. ``hierarchical_neighbor_allreduce`` is an all-reduce inside
each machine (level 0), the neighbor exchange among machines over the outer levels, and
a broadcast inside each machine.

:class:`CostModel` gives any op's time; :class:`CostMeter` adds them up per op and per
iteration, and :func:`attach_cost_model` charges every op of a simulated run to one
(see also :mod:`fogsim.timeline`, whose COMMUNICATE spans then show the modelled times).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    "plot_allreduce_scaling",
    "reduce_time",
    "ring_time",
    "scaling_table",
    "schedule_time",
    "two_level_allreduce_time",
]

#: Illustrative link figures: NVLink-class inside a machine, 100 Gb/s InfiniBand between.
NVLINK = {"alpha": 2e-6, "bandwidth": 32e9}
INFINIBAND_100G = {"alpha": 5e-6, "bandwidth": 12.5e9}


def _check(p: Any, n: Any, alpha: Any, w: Any) -> None:
    if isinstance(p, bool) or not isinstance(p, numbers.Integral) or p < 1:
        raise ValueError(f"p must be an integer >= 1, got {p!r}")
    if not n >= 0:
        raise ValueError(f"n (bytes) must be >= 0, got {n!r}")
    if not alpha >= 0:
        raise ValueError(f"alpha (s) must be >= 0, got {alpha!r}")
    if not w > 0:
        raise ValueError(f"w (bytes/s) must be > 0, got {w!r}")


def ring_time(p: int, n: float, alpha: float, w: float) -> float:
    """Eq. (1): ring reduce-scatter (or all-gather) of n bytes among p processes."""
    _check(p, n, alpha, w)
    return (p - 1) * alpha + (p - 1) / p * n / w


def halving_doubling_time(p: int, n: float, alpha: float, w: float) -> float:
    """Eq. (2): recursive halving (or doubling) of n bytes among p processes."""
    _check(p, n, alpha, w)
    return math.log2(p) * alpha + (p - 1) / p * n / w


def best_time(p: int, n: float, alpha: float, w: float) -> float:
    """Eq. (3): halving/doubling when p is a power of two, else the ring."""
    if p >= 1 and p & (p - 1) == 0:
        return halving_doubling_time(p, n, alpha, w)
    return ring_time(p, n, alpha, w)


def reduce_time(p: int, n: float, alpha: float, w: float) -> float:
    """Eq. (4): reduce of n bytes to one of p processes, ``T_c + T_r``."""
    return halving_doubling_time(p, n, alpha, w) + ring_time(p, n, alpha, w)


def broadcast_time(p: int, n: float, alpha: float, w: float) -> float:
    """Eq. (4): broadcast of n bytes from one of p processes, ``T_c + T_r``."""
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
        for field, value, ok in (("alpha", self.alpha, lambda v: v >= 0),
                                 ("bandwidth", self.bandwidth, lambda v: v > 0)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"Level.{field} must be a number, got {type(value).__name__}")
            if not (math.isfinite(value) and ok(value)):
                bound = ">= 0" if field == "alpha" else "> 0"
                raise ValueError(f"Level.{field} must be finite and {bound}, got {value}")


@dataclass(frozen=True)
class Network:
    """Levels from the inside out; ``kind`` is ``"fat_tree"`` or ``"torus"``.

    ``Network([Level(3, **NVLINK), Level(2, **IB), Level(2, **IB2)])`` is the paper's
    Fig. 1: 12 learners, 3 per node, nodes in pairs under a switch, two switches.
    """

    levels: tuple[Level, ...]
    kind: str = "fat_tree"

    def __init__(self, levels: Iterable[Level], kind: str = "fat_tree") -> None:
        levels = tuple(levels)
        if not levels or not all(isinstance(level, Level) for level in levels):
            raise TypeError("Network needs a non-empty sequence of Level objects")
        if kind not in ("fat_tree", "torus"):
            raise ValueError(f"Network kind must be 'fat_tree' or 'torus', got {kind!r}")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "kind", kind)

    @classmethod
    def cluster(cls, gpus_per_machine: int, machines: int, intra: dict | None = None,
                inter: dict | None = None, kind: str = "fat_tree") -> Network:  # fmt: skip
        """Machines of ``gpus_per_machine`` joined by one switch level (figures: dicts of
        ``alpha`` and ``bandwidth``; defaults NVLink-class inside, 100 Gb/s between)."""
        return cls([Level(gpus_per_machine, name="intra", **(intra or NVLINK)),
                    Level(machines, name="inter", **(inter or INFINIBAND_100G))], kind)  # fmt: skip

    @property
    def size(self) -> int:
        """The number of processes, the product of the level sizes."""
        return math.prod(level.size for level in self.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(level.size for level in self.levels)

    @property
    def links(self) -> tuple[Level, ...]:
        """The levels a message can cross: those joining more than one group (else level 0)."""
        return tuple(level for level in self.levels if level.size > 1) or self.levels[:1]

    def level_between(self, i: int, j: int) -> int:
        """The outermost level at which ranks i and j differ (-1 when i == j)."""
        out, k = -1, 0
        for p in self.sizes:
            if i % p != j % p:
                out = k
            i, j, k = i // p, j // p, k + 1
        return out


def _stage_bandwidth(network: Network, i: int, factors: Sequence[int]) -> float:
    w = [level.bandwidth for level in network.levels]
    if network.kind == "torus":  # Eq. (10)
        return min([w[0]] + [w[j] / factors[0] for j in range(1, i + 1)])
    return min(w[j] / math.prod(factors[:j]) for j in range(i + 1))  # Eq. (9)


# -- all-reduce -------------------------------------------------------------------------------
def one_level_allreduce_time(network: Network, n: float) -> float:
    """Eq. (6): one ring over all P processes, at the narrowest bandwidth it crosses."""
    alpha = max(level.alpha for level in network.links)
    w = min(level.bandwidth for level in network.links)
    return 2 * ring_time(network.size, n, alpha, w)


def two_level_allreduce_time(network: Network, n: float) -> float:
    """Eq. (7): reduce to a master per level-0 group, all-reduce among masters, broadcast."""
    inner = network.levels[0]
    p0 = inner.size
    outer = tuple(level for level in network.levels[1:] if level.size > 1) or (inner,)
    alpha = max(level.alpha for level in outer)
    w = min(level.bandwidth for level in network.links)
    masters = network.size // p0
    return (reduce_time(p0, n, inner.alpha, inner.bandwidth)
            + broadcast_time(p0, n, inner.alpha, inner.bandwidth)
            + 2 * best_time(masters, n, alpha, w))  # fmt: skip


def decomposed_allreduce_time(network: Network, n: float,
                              factors: Sequence[int] | None = None) -> float:  # fmt: skip
    """Eq. (9) (fat tree) or (10) (torus): the stages of the decomposed all-reduce.

    ``factors`` (one per level, product P) default to the level sizes.
    """
    sizes = network.sizes if factors is None else tuple(factors)
    if len(sizes) != len(network.levels):
        raise ValueError(
            f"factors {sizes} must give one size per network level ({len(network.levels)})"
        )
    if math.prod(sizes) != network.size:
        raise ValueError(
            f"factors {sizes} multiply to {math.prod(sizes)}, but the network has "
            f"{network.size} processes"
        )
    total = 0.0
    for i, (p, level) in enumerate(zip(sizes, network.levels, strict=True)):
        chunk = n / math.prod(sizes[:i])
        total += 2 * best_time(p, chunk, level.alpha, _stage_bandwidth(network, i, sizes))
    return total


def allreduce_time(network: Network, n: float, algorithm: str = "ring",
                   factors: Sequence[int] | None = None) -> float:  # fmt: skip
    """The all-reduce of n bytes: ``"ring"`` (one level), ``"two_level"``, ``"decomposed"``."""
    if algorithm in ("ring", "flat"):
        return one_level_allreduce_time(network, n)
    if algorithm == "two_level":
        return two_level_allreduce_time(network, n)
    if algorithm == "decomposed":
        return decomposed_allreduce_time(network, n, factors)
    raise ValueError(
        f"algorithm must be 'ring', 'two_level' or 'decomposed', got {algorithm!r}"
    )


# -- neighbor ops ---------------------------------------------------------------------------
def neighbor_allreduce_time(network: Network, n: float, topology: Any) -> float:
    """One neighbor exchange of n bytes per message over ``topology`` (see module doc)."""
    from ..topology import as_topology

    topo = as_topology(topology)
    if topo.size != network.size:
        raise ValueError(
            f"the topology has {topo.size} agents but the network {network.size} processes"
        )
    levels = network.levels
    sent = np.zeros((topo.size, len(levels)), dtype=np.int64)
    received = np.zeros_like(sent)
    indptr, indices, _ = topo.offdiag_csr()
    for i in range(topo.size):  # row i: the ranks agent i receives from
        for j in indices[indptr[i]:indptr[i + 1]]:
            level = network.level_between(i, int(j))
            received[i, level] += 1
            sent[int(j), level] += 1
    busiest = np.maximum(sent, received)
    worst = 0.0
    for row in busiest:
        for level, count in zip(levels, row, strict=True):
            if count:
                worst = max(worst, level.alpha + int(count) * n / level.bandwidth)
    return worst


def schedule_time(network: Network, n: float, steps: Iterable[Any]) -> float:
    """The average neighbor exchange time over the steps of a dynamic schedule.

    ``steps``: topologies or schedule steps (with ``.weights``), e.g.
    ``itertools.islice(fogsim.topology.one_peer_exponential_two(P), period)``.
    """
    times = [neighbor_allreduce_time(network, n, getattr(s, "weights", s)) for s in steps]
    if not times:
        raise ValueError("schedule_time needs at least one step")
    return float(np.mean(times))


def hierarchical_neighbor_allreduce_time(network: Network, n: float,
                                         machine_topology: Any) -> float:  # fmt: skip
    """Machine all-reduce (level 0), exchange among machines, broadcast in each machine."""
    inner = network.levels[0]
    outer = network.levels[1:]
    intra = 2 * best_time(inner.size, n, inner.alpha, inner.bandwidth)
    bcast = broadcast_time(inner.size, n, inner.alpha, inner.bandwidth)
    if not outer:
        return intra + bcast
    between = neighbor_allreduce_time(Network(outer, network.kind), n, machine_topology)
    return intra + between + bcast


# -- per op, per run ------------------------------------------------------------------------
class CostModel:
    """The time of any fogsim op on ``network``; ``allreduce`` is the default algorithm."""

    OPS = ("allreduce", "allgather", "broadcast", "neighbor_allreduce", "neighbor_allgather",
           "hierarchical_neighbor_allreduce", "barrier")  # fmt: skip

    def __init__(self, network: Network, allreduce: str = "ring") -> None:
        if not isinstance(network, Network):
            raise TypeError(f"CostModel needs a Network, got {type(network).__name__}")
        allreduce_time(network, 0.0, allreduce)  # checks the name
        self.network, self.allreduce = network, allreduce

    def op_time(self, op: str, nbytes: float, *, size: int, topology: Any = None,
                machine_topology: Any = None, algorithm: str | None = None,
                factors: Sequence[int] | None = None) -> float:  # fmt: skip
        """Seconds for ``op`` on ``nbytes`` per process among ``size`` processes."""
        net = self.network
        if size != net.size:
            raise ValueError(f"the run has {size} agents but the network {net.size} processes")
        if op not in self.OPS:
            raise ValueError(f"unknown op {op!r}; the cost model knows {', '.join(self.OPS)}")
        slow = min(level.bandwidth for level in net.links)
        alpha = max(level.alpha for level in net.links)
        if op == "allreduce":
            if algorithm == "decomposed" and factors is not None and len(factors) != len(
                net.levels
            ):  # a decomposition other than the network's: charge it as the ring would
                return one_level_allreduce_time(net, nbytes)
            return allreduce_time(net, nbytes, algorithm or self.allreduce, factors)
        if op == "allgather":  # a ring all-gather of size * nbytes
            return ring_time(size, size * nbytes, alpha, slow)
        if op == "broadcast":
            return broadcast_time(size, nbytes, alpha, slow)
        if op == "barrier":
            return math.ceil(math.log2(size)) * alpha if size > 1 else 0.0
        if op == "hierarchical_neighbor_allreduce":
            if machine_topology is None:
                raise ValueError("hierarchical_neighbor_allreduce needs machine_topology=")
            return hierarchical_neighbor_allreduce_time(net, nbytes, machine_topology)
        if topology is None:
            raise ValueError(f"{op} needs topology=")
        return neighbor_allreduce_time(net, nbytes, topology)


class CostMeter:
    """Adds up the modelled time of the ops :meth:`record` is told about.

    ``total`` (s), ``per_op`` (s by op), ``iterations`` (s per iteration closed with
    :meth:`mark`; the ops since then are ``current``).
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
        self._cache: dict[tuple, float] = {}

    def record(self, op: str, nbytes: float, **info: Any) -> float:
        """Charge one op (see :meth:`CostModel.op_time`); return its modelled seconds."""
        key = (op, nbytes, *(id(v) if not isinstance(v, (int, str, tuple, type(None))) else v
                             for _, v in sorted(info.items())))  # fmt: skip
        seconds = self._cache.get(key)
        if seconds is None:
            seconds = self._cache[key] = self.model.op_time(op, nbytes, **info)
            if len(self._cache) > 4096:
                self._cache.clear()
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
        return (f"CostMeter(total={self.total:.6g} s, iterations={len(self.iterations)}, "
                f"per_op={ {k: round(v, 9) for k, v in self.per_op.items()} })")  # fmt: skip


def attach_cost_model(model: CostModel | Network | CostMeter) -> CostMeter:
    """Charge every communication op of the current simulated world to a :class:`CostMeter`.

    Returns the meter: ``meter.mark()`` after each iteration gives the modelled time per
    iteration; a running timeline shows the modelled COMMUNICATE spans.
    """
    import fogsim as fs

    meter = model if isinstance(model, CostMeter) else CostMeter(model)
    backend = fs._api._backend()
    if not hasattr(backend, "attach_cost_model"):
        raise ValueError(
            f"attach_cost_model: the {backend.name} backend runs real communication; "
            "the cost model attaches to the simulator (init(backend='sim'))"
        )
    if meter.model.network.size != backend.size_int:
        raise ValueError(
            f"the network has {meter.model.network.size} processes but the world "
            f"{backend.size_int} agents"
        )
    backend.attach_cost_model(meter)
    return meter


def detach_cost_model() -> None:
    """Stop charging the current simulated world's ops to a cost meter."""
    import fogsim as fs

    backend = fs._api._backend()
    if hasattr(backend, "attach_cost_model"):
        backend.attach_cost_model(None)


# -- plots ----------------------------------------------------------------------------------
def plot_allreduce_scaling(gpus_per_machine: int, machine_counts: Sequence[int], nbytes: float,
                           intra: dict | None = None, inter: dict | None = None,
                           ax: Any = None) -> Any:  # fmt: skip
    """Plot modelled times against the number of GPUs: ring, two-level and decomposed
    all-reduce, neighbor allreduce on the exponential-2 graph and one-peer exponential-2.
    """
    import matplotlib.pyplot as plt

    rows = scaling_table(gpus_per_machine, machine_counts, nbytes, intra, inter)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    gpus = [row["gpus"] for row in rows]
    for key, label in (("ring", "ring all-reduce (Eq. 6)"),
                       ("two_level", "two-level all-reduce (Eq. 7)"),
                       ("decomposed", "decomposed all-reduce (Eq. 9)"),
                       ("neighbor_exp2", "neighbor allreduce, exponential-2"),
                       ("one_peer", "one-peer exponential-2 (average step)")):  # fmt: skip
        ax.plot(gpus, [1e3 * row[key] for row in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs")
    ax.set_ylabel("modelled time per op (ms)")
    ax.set_title(f"{nbytes / 2**20:.0f} MiB per GPU, {gpus_per_machine} GPUs per machine")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return ax


def scaling_table(gpus_per_machine: int, machine_counts: Sequence[int], nbytes: float,
                  intra: dict | None = None, inter: dict | None = None) -> list[dict]:  # fmt: skip
    """The rows of :func:`plot_allreduce_scaling`: seconds per op by machine count."""
    import itertools

    from ..topology import exponential_two_graph, one_peer_exponential_two

    rows = []
    for machines in machine_counts:
        net = Network.cluster(gpus_per_machine, machines, intra, inter)
        p = net.size
        period = max(1, (p - 1).bit_length())
        rows.append({
            "gpus": p,
            "ring": one_level_allreduce_time(net, nbytes),
            "two_level": two_level_allreduce_time(net, nbytes),
            "decomposed": decomposed_allreduce_time(net, nbytes),
            "neighbor_exp2": neighbor_allreduce_time(net, nbytes, exponential_two_graph(p)),
            "one_peer": schedule_time(net, nbytes,
                                      itertools.islice(one_peer_exponential_two(p), period)),
        })  # fmt: skip
    return rows
