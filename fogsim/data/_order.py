"""The order in which each agent visits its shard: counter-based, agent by agent, vectorized.

Every random number here is a SplitMix64 output (Steele, Lea and Flood 2014),

    ``out(s, i) = mix(s + (i + 1) * 0x9E3779B97F4A7C15 mod 2**64)``

(``mix`` is SplitMix64's finalizer), chained over what a number depends on, so agent
``r``'s numbers depend on ``(seed, r, ...)`` alone, never on the agents held beside it:

* agent ``r``'s stream: ``a_r = out(out(seed, kind), r)``, ``kind`` 0 for epochs, 1 for
  sampling with replacement;
* epochs: epoch ``e`` of agent ``r`` visits the shard's positions ``p = 0 .. m - 1``
  sorted by ``(out(out(a_r, e), p), p)``;
* replacement: draw ``k`` of batch ``t`` is position ``floor(u * m / 2**64)`` with
  ``u = out(out(a_r, t), k)``.

:class:`EpochOrders` keeps each held agent's current epoch and cursor and fills batches of
shard indices from them; this module is its numpy form, `fogsim.data._order_nb` the same
numbers in compiled code for large runs.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "EpochOrders",
    "agent_streams",
    "epoch_positions",
    "replacement_positions",
    "scaled",
    "splitmix",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_S27, _S30, _S31, _S32 = (np.uint64(s) for s in (27, 30, 31, 32))


def splitmix(state: np.ndarray | np.uint64, i: np.ndarray | int) -> np.ndarray:
    """Return ``out(state, i)``, SplitMix64's ``i``-th output from ``state`` (uint64, broadcast)."""
    with np.errstate(over="ignore"):
        z = np.asarray(state, dtype=np.uint64) + (np.asarray(i, dtype=np.uint64) + 1) * _GOLDEN
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
    out: np.ndarray = z ^ (z >> _S31)
    return out


def scaled(u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Return ``floor(u * m / 2**64)`` for uint64 ``u`` and ``m < 2**32`` (no 128-bit type)."""
    m = np.asarray(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        out: np.ndarray = ((u >> _S32) * m + (((u & _LOW32) * m) >> _S32)) >> _S32
    return out


def agent_streams(seed: int, kind: int, ranks: np.ndarray) -> np.ndarray:
    """Return ``a_r = out(out(seed, kind), r)`` for each rank ``r``."""
    return splitmix(splitmix(np.uint64(seed), kind), ranks.astype(np.uint64))


def replacement_positions(
    streams: np.ndarray, sizes: np.ndarray, step: int, batch_size: int
) -> np.ndarray:
    """Return the ``(k, b)`` shard positions the held agents draw with replacement at ``step``."""
    draws = splitmix(splitmix(streams, step)[:, None], np.arange(batch_size, dtype=np.uint64))
    return scaled(draws, sizes[:, None]).astype(np.int64)


def epoch_positions(streams: np.ndarray, epochs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Return the concatenated orders of the agents' epochs (positions within each shard).

    Agent ``a`` (``streams[a]``, epoch ``epochs[a]``, shard of ``sizes[a]``) visits its
    positions in the order of ``(out(out(streams[a], epochs[a]), p), p)``.
    """
    total = int(sizes.sum())
    seg = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.cumsum(sizes) - sizes
    within = np.arange(total, dtype=np.int64) - starts[seg]
    keys = splitmix(splitmix(streams, epochs.astype(np.uint64))[seg], within)
    order = np.lexsort((keys, seg))  # stable: equal keys keep their positions' order
    positions: np.ndarray = order - starts[seg]
    return positions


class EpochOrders:
    """Each held agent's walk through its shard, epoch after epoch (numpy).

    ``flat`` holds the agents' shards one after the other (agent ``a`` at ``offsets[a]``,
    ``sizes[a]`` entries); ``order`` the same slots in the current epoch's order. Agent
    ``a`` has used ``cursor[a]`` entries of epoch ``epoch[a]``; at the start every agent
    stands at the end of epoch -1, so its first draw makes epoch 0.
    """

    def __init__(
        self, flat: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, streams: np.ndarray
    ) -> None:
        self.flat, self.offsets, self.sizes, self.streams = flat, offsets, sizes, streams
        self.order = np.empty_like(flat)
        self.epoch = np.full(len(sizes), -1, dtype=np.int64)
        self.cursor = sizes.copy()

    def seek(self, position: int) -> None:
        """Stand every agent at ``position`` entries into its stream (``step * b``)."""
        sizes = self.sizes
        epoch, rest = np.divmod(position, sizes)
        self.epoch, self.cursor = epoch - 1, sizes.copy()
        started = np.flatnonzero(rest)
        self.advance(started)
        self.cursor[started] = rest[started]

    def advance(self, agents: np.ndarray) -> None:
        """Start the next epoch of ``agents`` (indices into the held agents)."""
        if not len(agents):
            return
        self.epoch[agents] += 1
        sizes = self.sizes[agents]
        positions = epoch_positions(self.streams[agents], self.epoch[agents], sizes)
        base = np.repeat(self.offsets[agents], sizes)
        slots = base + np.arange(len(base)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        self.order[slots] = self.flat[base + positions]
        self.cursor[agents] = 0

    def take(self, batch_size: int) -> np.ndarray:
        """Return the next ``batch_size`` entries of every agent's walk, ``(k, b)``."""
        k = len(self.sizes)
        out = np.empty((k, batch_size), dtype=self.flat.dtype)
        filled = np.zeros(k, dtype=np.int64)
        self.advance(np.flatnonzero(self.cursor == self.sizes))
        if np.all(self.sizes - self.cursor >= batch_size):  # no agent crosses an epoch
            cols = np.arange(batch_size)
            out[:] = self.order[(self.offsets + self.cursor)[:, None] + cols]
            self.cursor += batch_size
            return out
        while True:
            take = np.minimum(batch_size - filled, self.sizes - self.cursor)
            rows = np.repeat(np.arange(k), take)
            within = np.arange(len(rows)) - np.repeat(np.cumsum(take) - take, take)
            out[rows, filled[rows] + within] = self.order[
                self.offsets[rows] + self.cursor[rows] + within
            ]
            self.cursor += take
            filled += take
            if np.all(filled == batch_size):
                return out
            self.advance(np.flatnonzero((self.cursor == self.sizes) & (filled < batch_size)))
