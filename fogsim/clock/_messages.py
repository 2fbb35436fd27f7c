"""A step's messages and each one's time on the network, as the clocks read them."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..hierarchy.cost import _link_loads
from ..topology import Topology
from ._platform import Platform

__all__ = ["Edges", "message_times"]


def message_times(network: Any, senders: np.ndarray, receivers: np.ndarray, nbytes: float) -> Any:
    """Each message's seconds on ``network``: a message ``senders[k] -> receivers[k]`` of
    ``nbytes`` crossing levels 0..L takes the longest of those levels' ``alpha_l + c_l N /
    w_l``, ``c_l`` the most of these messages that one link of level l carries one way (the
    cost model's link sharing)."""
    if not senders.size:
        return np.zeros(0)
    loads = _link_loads(network, senders, receivers)
    per_level = np.array(
        [
            level.alpha + c * nbytes / level.bandwidth if c else 0.0
            for level, c in zip(network.levels, loads, strict=True)
        ]
    )
    upto = np.maximum.accumulate(per_level)  # a message crossing level L: max over 0..L
    sizes = np.array(network.sizes, dtype=np.int64)
    strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
    differ = (senders[:, None] // strides) % sizes != (receivers[:, None] // strides) % sizes
    crossed = differ.shape[1] - 1 - np.argmax(differ[:, ::-1], axis=1)
    return upto[crossed]


class Edges:
    """A step's messages (receiver by receiver) and each one's time on the network.

    A message crossing levels 0..L takes the longest of those levels' times, ``alpha_l +
    c_l N / w_l`` with ``c_l`` the most messages of the step that one link of level l
    carries one way (the cost model's link sharing), so that with every agent arriving
    at once the step lasts what :func:`~fogsim.hierarchy.neighbor_allreduce_time` says.
    """

    def __init__(self, topology: Topology, nbytes: float, platform: Platform) -> None:
        self.topology = topology
        # each column: its senders, its shift when circulant, its seconds (one number when
        # they are alike); see below
        self.columns: list[tuple[np.ndarray, int | None, Any]] | None = None
        self._kernel: tuple[np.ndarray, ...] | None = None
        n = topology.size
        network = platform.network
        indptr, senders, _ = topology.offdiag_csr()
        senders = senders.astype(np.int64)
        counts = np.diff(indptr)
        receivers = np.repeat(np.arange(n), counts)
        self.senders, self.indptr = senders, indptr.astype(np.int64)
        self.receiving = np.flatnonzero(counts)  # the agents that receive
        self.starts = indptr[:-1][counts > 0]
        self.seconds = 0.0
        #: every agent's own transfers' time when it is the same number for all, else None
        self.own_alike: float | None = 0.0
        if not senders.size:
            self.time = np.zeros(0)
            self.out_time = np.zeros(n)
            self.own_time = np.zeros(n)
            return
        self.time = message_times(network, senders, receivers, nbytes)
        self.seconds = float(self.time.max())
        out_time = np.zeros(n)
        np.maximum.at(out_time, senders, self.time)
        in_time = np.zeros(n)
        in_time[self.receiving] = np.maximum.reduceat(self.time, self.starts)
        self.out_time = out_time
        self.own_time = np.maximum(out_time, in_time)
        first = float(self.own_time[0])
        self.own_alike = first if bool(np.all(self.own_time == first)) else None
        # Where the in-degrees are alike (circulant, exponential, one-peer steps), column j
        # holds each agent's j-th sender and its message time, padded with sender n (whose
        # clock is -inf) where an agent has fewer: k contiguous passes instead of a reduceat;
        # a column whose senders are i + s (mod n) is read as two slices.
        k = int(counts.max())
        self.columns = None
        if k * n <= 2 * senders.size:
            # each row's senders by their distance ahead, (sender - receiver) mod n
            order = np.lexsort(((senders - receivers) % n, receivers))
            slot = np.arange(senders.size) - np.repeat(indptr[:-1], counts)
            index = np.full((k, n), n, dtype=np.int64)
            seconds = np.zeros((k, n))
            index[slot, receivers] = senders[order]
            seconds[slot, receivers] = self.time[order]
            ranks = np.arange(n)
            self.columns = []
            for column, times in zip(index, seconds, strict=True):
                shift = int(column[0])
                circulant = np.array_equal(column, (ranks + shift) % n) and 0 < shift < n
                sent = times[column < n]  # a padding's seconds do not count: it never arrives
                alike = sent.size > 0 and bool(np.all(sent == sent[0]))
                self.columns.append(
                    (column, shift if circulant else None, float(sent[0]) if alike else times)
                )

    def kernel_arrays(self) -> tuple[np.ndarray, ...]:
        """The columns as ``fogsim.clock._clock_nb.exchange`` reads them: shifts, index,
        rows, seconds, second_rows, alike."""
        if self._kernel is None:
            assert self.columns is not None
            n, k = self.topology.size, len(self.columns)
            shifts = np.full(k, -1, dtype=np.int64)
            rows = np.full(k, -1, dtype=np.int64)
            second_rows = np.full(k, -1, dtype=np.int64)
            alike = np.zeros(k)
            index: list[np.ndarray] = []
            seconds: list[np.ndarray] = []
            for c, (column, shift, times) in enumerate(self.columns):
                if shift is None:
                    rows[c] = len(index)
                    index.append(column)
                else:
                    shifts[c] = shift
                if isinstance(times, np.ndarray):
                    second_rows[c] = len(seconds)
                    seconds.append(times)
                else:
                    alike[c] = times
            self._kernel = (
                shifts,
                np.array(index, dtype=np.int64).reshape(len(index), n),
                rows,
                np.array(seconds, dtype=np.float64).reshape(len(seconds), n),
                second_rows,
                alike,
            )
        return self._kernel
