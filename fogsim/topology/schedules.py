"""Dynamic topologies: infinite generators of per-step weight matrices.

Every schedule is deterministic given its arguments (and seed), so every agent, in every
backend, computes the same sequence; ``start=k`` yields step ``k`` first, as if ``k`` steps had
been skipped, so a resumed run continues the same sequence. Each step's ``weights`` is a pull
(row-stochastic) :class:`~fogsim.topology.Topology` including the self weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ._exact import uniform_split
from ._topology import Topology, _csr_from_parts, _from_coo, as_topology
from ._util import check_nonnegative_int, check_positive_int

if TYPE_CHECKING:
    from ._topology import TopologyData

__all__ = [
    "DynamicStep",
    "inner_outer_exponential_two",
    "one_peer_exponential_two",
    "one_peer_schedule",
    "random_matching",
]

#: one_peer_schedule keeps every step's matrix while period * n stays below this.
_CACHE_LIMIT = 1 << 24


@dataclass(frozen=True)
class DynamicStep:
    """One step of a dynamic topology: its index and its weight matrix ``W`` (pull form)."""

    step: int
    weights: Topology

    def send_ranks(self, i: int) -> list[int]:
        """Return the agents agent i sends to this step (column i's off-diagonal pattern)."""
        return self.weights.out_neighbors(i)

    def recv_ranks(self, i: int) -> list[int]:
        """Return the agents agent i receives from this step (row i's off-diagonal pattern)."""
        return self.weights.in_neighbors(i)


def one_peer_exponential_two(n: int, start: int = 0) -> Iterator[DynamicStep]:
    """Yield one-peer exponential-2 steps: at step t agent i sends to ``(i + 2**(t % tau)) % n``.

    ``tau`` counts the powers ``2**k < n``; ``x_i <- (x_i + x_{i - s}) / 2``. For n a power of
    two, any ``log2 n`` consecutive steps multiply to ``1 1^T / n`` exactly.
    """
    n = check_positive_int(n, "n")
    start = check_nonnegative_int(start, "start")
    shifts = [1 << k for k in range((n - 1).bit_length())]
    steps = [Topology.circulant(n, [-s], 0.5, 0.5) for s in shifts] or [_alone(n)]
    return _periodic(steps, start)


def one_peer_schedule(topology: TopologyData, start: int = 0) -> Iterator[DynamicStep]:
    """Yield BlueFog's one-peer steps of a static topology.

    At step t agent i sends to its out-neighbor number ``t % out_degree(i)``, ordered by the
    distance ``(j - i) % n``; ``w = 1 / (len(recv) + 1)`` on each received value and
    ``1 - len(recv) w`` on self, so every row sums to exactly 1.0.
    """
    topo = as_topology(topology)
    start = check_nonnegative_int(start, "start")
    n = topo.size
    form = topo.circulant_form()
    if form is not None:
        # Agent i sends to i - o; sorting by distance n - o is sorting offsets descending.
        offsets = form.offsets[::-1].tolist()
        steps = [Topology.circulant(n, [o], 0.5, 0.5) for o in offsets] or [_alone(n)]
        return _periodic(steps, start)
    indptr, out = topo._transposed_pattern()
    degrees = np.diff(indptr)
    owners = np.repeat(np.arange(n), degrees)
    order = np.lexsort(((out - owners) % n, owners))
    ordered_out = out[order].astype(np.int64)
    senders = np.flatnonzero(degrees)
    first, sender_degrees = indptr[senders], degrees[senders]
    agents = np.arange(n)

    def build(t: int) -> Topology:
        receivers = ordered_out[first + t % sender_degrees]
        w, w_self = uniform_split(np.bincount(receivers, minlength=n))
        return _from_coo(
            n,
            np.concatenate([receivers, agents]),
            np.concatenate([senders, agents]),
            np.concatenate([w[receivers], w_self]),
        )

    # The sequence repeats after lcm(out-degrees) steps: keep them all when that is small.
    period = 1
    for degree in np.unique(sender_degrees).tolist():
        period = math.lcm(period, degree)  # Python ints: numpy's lcm would overflow
        if period * n > _CACHE_LIMIT:
            period = 0
            break
    return _generated(build, start, period)


def inner_outer_exponential_two(n: int, local_size: int, start: int = 0) -> Iterator[DynamicStep]:
    """Yield alternating intra-machine and inter-machine one-peer exponential-2 steps.

    Agent ``i = machine * local_size + local``. Even steps (inner): one-peer exponential-2 among
    the local ranks of each machine; odd steps (outer): among machines, between agents of the
    same local rank. Weights 1/2. One machine: every step inner; local_size 1: every step outer.
    """
    n = check_positive_int(n, "n")
    local_size = check_positive_int(local_size, "local_size")
    start = check_nonnegative_int(start, "start")
    if n % local_size:
        raise ValueError(f"n={n} is not a multiple of local_size={local_size}")
    machines = n // local_size
    agents = np.arange(n)
    local = agents % local_size
    inner = [
        _from_peers(agents - local + (local - s) % local_size, 0.5)
        for s in (1 << k for k in range((local_size - 1).bit_length()))
    ]
    outer = [
        Topology.circulant(n, [-s * local_size], 0.5, 0.5)
        for s in (1 << k for k in range((machines - 1).bit_length()))
    ]
    if not inner and not outer:
        return _periodic([_alone(n)], start)
    if not outer or not inner:
        return _periodic(inner or outer, start)
    # Step 2m is inner step m and step 2m + 1 outer step m; one period covers both cycles.
    cycle = int(np.lcm(len(inner), len(outer)))
    steps = []
    for m in range(cycle):
        steps += [inner[m % len(inner)], outer[m % len(outer)]]
    return _periodic(steps, start)


def random_matching(n: int, seed: int | None = None, start: int = 0) -> Iterator[DynamicStep]:
    """Yield random pairings: each step pairs agents by a random permutation, weights 1/2.

    Step t shuffles with ``np.random.default_rng(SeedSequence(seed, spawn_key=(t,)))``, so
    ``start`` costs nothing; with odd n one agent per step is alone with self weight 1.
    """
    n = check_positive_int(n, "n")
    start = check_nonnegative_int(start, "start")
    entropy = np.random.SeedSequence(seed).entropy  # fixed once, so seed=None stays consistent
    pairs = n // 2

    def build(t: int) -> Topology:
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(t,)))
        perm = rng.permutation(n)
        a, b = perm[0 : 2 * pairs : 2], perm[1 : 2 * pairs : 2]
        peers = np.full(n, -1)
        peers[a], peers[b] = b, a
        return _from_peers(peers, 0.5)

    return _generated(build, start, 0)


def _from_peers(peers: np.ndarray, weight: float) -> Topology:
    """Return W where agent i receives from ``peers[i] != i`` (nobody if -1) with ``weight``.

    Built as CSR directly: every row has at most two entries, so no COO sort is needed.
    """
    n = peers.shape[0]
    agents = np.arange(n)
    paired = peers >= 0
    peer = np.where(paired, peers, agents)
    self_weight = np.where(paired, 1.0 - weight, 1.0)
    self_first = agents <= peer
    cols = np.column_stack([np.minimum(agents, peer), np.maximum(agents, peer)]).ravel()
    vals = np.column_stack(
        [np.where(self_first, self_weight, weight), np.where(self_first, weight, self_weight)]
    ).ravel()
    if paired.all():
        indptr = 2 * np.arange(n + 1)
    else:
        keep = np.column_stack([np.ones(n, dtype=bool), paired]).ravel()
        cols, vals = cols[keep], vals[keep]
        indptr = np.concatenate([[0], np.cumsum(1 + paired)])
    return Topology._from_csr(_csr_from_parts(n, indptr, cols, vals))


def _alone(n: int) -> Topology:
    return Topology.circulant(n, [], 0.0, 1.0)


def _periodic(steps: list[Topology], start: int) -> Iterator[DynamicStep]:
    # Topologies are immutable, so every period reuses the same objects and their caches.
    t = start
    while True:
        yield DynamicStep(t, steps[t % len(steps)])
        t += 1


def _generated(build: Callable[[int], Topology], start: int, period: int) -> Iterator[DynamicStep]:
    cache: dict[int, Topology] = {}
    t = start
    while True:
        if period:
            key = t % period
            if key not in cache:
                cache[key] = build(key)
            weights = cache[key]
        else:
            weights = build(t)
        yield DynamicStep(t, weights)
        t += 1
