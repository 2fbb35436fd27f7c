"""The clock of a sharded simulation: each process keeps its block's clocks only."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..topology import Topology
from . import _clock
from ._clock import Clock, kernels
from ._messages import message_times
from ._platform import Platform, check_seconds

__all__ = ["BlockClock", "Shards"]


class Shards(Protocol):
    """What a :class:`BlockClock` asks of the sharded simulator it runs in."""

    @property
    def block(self) -> tuple[int, int]:
        """This process's agents ``[lo, hi)``."""

    def neighbor_values(
        self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For the world's message pattern (CSR by receiver), the block's ``values`` followed
        by those of the other blocks' senders the block hears from, and, edge by edge of
        the block's receivers in the pattern's order, where its sender's value lies."""

    def max_over_shards(self, values: np.ndarray) -> np.ndarray:
        """Entry by entry, the largest of every process's ``values`` (alike in shape)."""


class BlockClock(Clock):
    """The clock of a sharded simulation, seen from one process: the clocks of its block of
    agents, ``[lo, hi)`` (``time``, ``computing``, ``communicating`` and ``waiting`` hold
    theirs), the same numbers as one process's :class:`Clock`, bit for bit.

    A neighbor op reads the clocks of the other blocks' agents that the block hears from
    (its halo: the op's boundary, as the values themselves move); a collective, the
    largest clock of all (one number from each process); a hierarchical step, each
    machine's latest. While every clock reads the same and the ops treat every agent
    alike, one number holds them and nothing moves at all. ``compute`` takes a number, or
    one per agent of the block (or of the world); straggler draws are the world's, so the
    numbers do not depend on how the agents are split.
    """

    def __init__(self, platform: Platform, shards: Shards) -> None:
        super().__init__(platform, shards.block)
        self._shards = shards
        self._block_edges: dict[tuple[int, float], _BlockEdges] = {}

    @property
    def block(self) -> tuple[int, int]:
        """This process's agents ``[lo, hi)``."""
        return self._lo, self._hi

    def _per_agent(self, value: Any, argname: str) -> Any:
        if isinstance(value, np.ndarray | list | tuple) and len(value) == self.size != self.n:
            value = np.asarray(value, dtype=np.float64)[self._lo : self._hi]
        return check_seconds(value, self.n, argname)

    def _latest(self) -> float:
        if self._level is not None:  # every process holds the same number
            return self._level
        mine = np.array([self._ext[:-1].max()])
        return float(self._shards.max_over_shards(mine)[0])

    def _machine_starts(self, local: int) -> np.ndarray:
        lo, hi = self._lo, self._hi
        first, last = lo // local, (hi - 1) // local
        partial = np.full(self.size // local, -np.inf)  # machines this block has no agent of
        ids = np.arange(lo, hi) // local - first
        bounds = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        partial[first : last + 1] = np.maximum.reduceat(self.time, bounds)
        return self._shards.max_over_shards(partial)

    def _compiled(self, edges: Any) -> bool:
        self._visited += edges.time.size
        compiled = kernels() if self._visited > _clock._COMPILE_AFTER else None
        if compiled is None:
            return False
        start = self._clocks()
        ext, where = self._shards.neighbor_values(edges.indptr, edges.senders, start)
        done = self._spare
        compiled.exchange_csr(
            start,
            ext,
            where,
            edges.time,
            edges.block_indptr,
            edges.out_time,
            edges.own_time,
            done,
            self._communicating,
        )
        self._ext, self._spare = done, self._ext
        return True

    def _edges_of(self, topology: Topology, nbytes: float) -> Any:
        key = (id(topology), nbytes)
        edges = self._block_edges
        hit = edges.get(key)
        if hit is None or hit.topology is not topology:
            if len(edges) >= 64:
                edges.clear()
            hit = edges[key] = _BlockEdges(topology, nbytes, self.platform, self.block)
        return hit

    def _exchange(self, edges: Any) -> tuple[np.ndarray, np.ndarray]:
        """A neighbor exchange over the block: agent i is done when its own messages are
        out and every message it receives has arrived, its in-neighbors' clocks read from
        their blocks (every process takes part, each for its own block)."""
        start = self._clocks()
        ext, where = self._shards.neighbor_values(edges.indptr, edges.senders, start)
        done = np.add(start, edges.out_time, out=self._spare[:-1])
        if edges.time.size:
            arrival = ext[where] + edges.time
            latest = np.maximum.reduceat(arrival, edges.starts)
            done[edges.receiving] = np.maximum(done[edges.receiving], latest)
        return done, edges.own_time


class _BlockEdges:
    """A step's messages into the block's receivers, and each one's time on the network
    (as ``fogsim.clock._messages.Edges`` computes them over the world: the link
    sharing is the world's); ``own_alike`` is the world's, the same on every process."""

    def __init__(
        self, topology: Topology, nbytes: float, platform: Platform, block: tuple[int, int]
    ) -> None:
        self.topology = topology
        lo, hi = block
        n = topology.size
        indptr, senders, _ = topology.offdiag_csr()
        self.indptr, self.senders = indptr, senders  # the pattern (kept: the halo's key)
        counts = np.diff(indptr)
        times = np.zeros(0)
        out_time, in_time = np.zeros(n), np.zeros(n)
        if senders.size:
            senders64 = senders.astype(np.int64)
            receivers = np.repeat(np.arange(n), counts)
            times = message_times(platform.network, senders64, receivers, nbytes)
            np.maximum.at(out_time, senders64, times)
            has = counts > 0
            in_time[has] = np.maximum.reduceat(times, indptr[:-1][has])
        self.seconds = float(times.max()) if times.size else 0.0
        own_time = np.maximum(out_time, in_time)
        first = float(own_time[0])
        self.own_alike: float | None = first if bool(np.all(own_time == first)) else None
        self.out_time, self.own_time = out_time[lo:hi], own_time[lo:hi]
        a, z = int(indptr[lo]), int(indptr[hi])
        self.time = times[a:z]
        mine = counts[lo:hi]
        self.block_indptr = indptr[lo : hi + 1].astype(np.int64)  # into time from its first
        self.receiving = np.flatnonzero(mine)
        self.starts = (indptr[lo:hi] - a)[mine > 0]
