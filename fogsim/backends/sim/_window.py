"""The state of one simulated window, for every agent at once (see :class:`SimWindow`).

A window holds, for every agent ``i`` at once: the registered array ``x`` (stacked, updated
in place), one buffer per edge ``j -> i`` of the topology current at ``win_create`` (edges
in the order of ``topology.offdiag_csr()``: receiver rows, senders ascending), a write count
(version) per buffer, the push-sum weight ``p_i`` with one p-buffer ``q`` per edge, and the
*exposed* value and ``p`` that ``win_get`` reads (the registered value as it stood after
agent ``i``'s own last put, accumulate or update). Messages that the modelled asynchrony
holds back wait in the window's queue, by round; with a clock (:mod:`fogsim.clock`) they
wait with their landing times until their receiver's clock reaches them (see
:mod:`fogsim.backends.sim._windows`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...topology import Topology
from .._windows import WindowFormat

__all__ = ["ACCUMULATE", "GET", "PUT", "SimWindow"]

#: The kinds of message: a put or a get overwrites a buffer, an accumulate adds to it.
PUT, ACCUMULATE, GET = "put", "accumulate", "get"


class SimWindow:
    """The state of one window for all agents (see the module docstring).

    The properties (``edges``, ``buffers``, ``versions``, ``p_buffers``) and the
    ``in_flight*`` methods are read-only views for tests and debugging; the plain
    attributes are the working arrays of
    :class:`~fogsim.backends.sim._windows.SimWindowOps`, which alone changes them.
    """

    def __init__(
        self,
        name: str,
        obj: Any,
        raw: np.ndarray,
        fmt: WindowFormat,
        topo: Topology,
        default: Topology,
        zero_init: bool,
    ) -> None:
        n = raw.shape[0]
        self.name, self.obj, self.fmt = name, obj, fmt
        self.dtype, self.shape = fmt.dtype, raw.shape  # dtype: what buffers hold
        # the caller's memory, one row per agent: read with fmt.decode, written with fmt.encode
        self.raw = raw.reshape(n, int(np.prod(raw.shape[1:], dtype=np.int64)))
        indptr, indices, _ = topo.offdiag_csr()
        self.indptr = indptr
        self.send = indices.astype(np.int64)
        self.recv = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        self.keys = self.recv * n + self.send  # strictly ascending
        self.all_edges = np.arange(self.send.size, dtype=np.int64)
        # win_update's default weights: the topology's as neighbor_allreduce uses them
        self.self_weight = default.self_weights
        self.weights = np.zeros(self.send.size)
        dptr, didx, ddata = default.offdiag_csr()
        drecv = np.repeat(np.arange(n, dtype=np.int64), np.diff(dptr))
        self.weights[np.searchsorted(self.keys, drecv * n + didx)] = ddata
        value = fmt.decode(self.raw)
        self.buf = np.zeros((self.send.size, self.raw.shape[1]), self.dtype)
        if not zero_init:
            self.buf[...] = value[self.recv]
        self.ver = np.zeros(self.send.size, np.int64)
        self.p = np.ones(n)
        self.q = np.zeros(self.send.size)  # neighbours' p: nothing received yet (BlueFog's)
        self.exposed = value.copy()
        self.exposed_p = self.p.copy()
        # arrival round -> [(send sequence number, kind, edges, values, p values or None)]
        self._queue: dict[int, list[tuple[int, str, np.ndarray, np.ndarray, Any]]] = {}
        self._sent = 0
        # with a clock: [(landing times, send sequence number, kind, edges, values, p's)]
        self._timed: list[tuple[np.ndarray, int, str, np.ndarray, np.ndarray, Any]] = []

    # -- read-only views (tests, debugging) -------------------------------------------------
    @staticmethod
    def _view(a: np.ndarray, shape: tuple[int, ...] | None = None) -> np.ndarray:
        v = a.view() if shape is None else a.reshape(shape)
        v.flags.writeable = False
        return v

    @property
    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """``(receiver, sender)`` of every buffer, in buffer order."""
        return self._view(self.recv), self._view(self.send)

    @property
    def buffers(self) -> np.ndarray:
        """The buffers, ``(edges, *x.shape[1:])`` in edge order."""
        return self._view(self.buf, (self.send.size, *self.shape[1:]))

    @property
    def versions(self) -> np.ndarray:
        """Writes to each buffer since it was last read by ``win_update``."""
        return self._view(self.ver)

    @property
    def p_buffers(self) -> np.ndarray:
        """The p-buffers ``q``, one per edge."""
        return self._view(self.q)

    def in_flight(self) -> int:
        """Return how many messages are on their way (sent, not delivered yet, not lost)."""
        rounds = sum(len(b[2]) for batches in self._queue.values() for b in batches)
        return rounds + sum(len(b[0]) for b in self._timed)

    def in_flight_mass(self) -> tuple[np.ndarray, float]:
        """Return the sums of the values and of the p's that messages in flight carry.

        For tests and debugging: with accumulates only (push-sum), ``sum(x) + sum of
        buffers + values in flight`` and ``sum(p) + sum(q) + p in flight`` are conserved.
        """
        x = np.zeros(self.raw.shape[1])
        p = 0.0
        for batches in self._queue.values():
            for _, _, _, vals, pvals in batches:
                x += vals.sum(axis=0, dtype=np.float64)
                p += 0.0 if pvals is None else float(pvals.sum())
        for _, _, _, _, vals, pvals in self._timed:
            x += vals.sum(axis=0, dtype=np.float64)
            p += 0.0 if pvals is None else float(pvals.sum())
        return x.reshape(self.shape[1:]), p

    # -- messages ---------------------------------------------------------------------------
    def apply(self, kind: str, edges: np.ndarray, vals: np.ndarray, pvals: Any) -> None:
        """Land messages (``edges`` unique): a put or get overwrites, an accumulate adds."""
        if not edges.size:
            return
        if kind == ACCUMULATE:
            self.buf[edges] += vals
            if pvals is not None:
                self.q[edges] += pvals
        else:
            self.buf[edges] = vals
            if pvals is not None:
                self.q[edges] = pvals
        self.ver[edges] += 1

    def enqueue(self, due: int, kind: str, edges: np.ndarray, vals: np.ndarray, pvals: Any) -> None:
        """Hold messages until round ``due``."""
        self._queue.setdefault(due, []).append((self._sent, kind, edges, vals, pvals))
        self._sent += 1

    def deliver_due(self, now: int) -> None:
        """Land the messages due in round ``now``, in send order."""
        for _, *batch in self._queue.pop(now, ()):
            self.apply(*batch)

    def deliver_all(self) -> None:
        """Land every message in flight, in send order."""
        batches = sorted((b for due in self._queue.values() for b in due), key=lambda b: b[0])
        self._queue.clear()
        for _, *batch in batches:
            self.apply(*batch)

    # -- messages in virtual time (fogsim.clock) --------------------------------------------
    def launch(
        self, landing: np.ndarray, kind: str, edges: np.ndarray, vals: np.ndarray, pvals: Any
    ) -> None:
        """Hold messages until their receivers' clocks reach ``landing`` (one per edge)."""
        if edges.size:
            self._timed.append((landing, self._sent, kind, edges, vals, pvals))
            self._sent += 1

    def latest_landing(self) -> float:
        """When the last message in flight lands (-inf: none is in flight)."""
        return max((float(b[0].max()) for b in self._timed), default=-np.inf)

    def deliver_landed(self, clocks: np.ndarray | None) -> None:
        """Land each message whose landing time its receiver's clock (``clocks``; None:
        every message) has reached, in landing order (ties: send order)."""
        if not self._timed:
            return
        due, kept = [], []
        for batch in self._timed:
            landing, seq, kind, edges, vals, pvals = batch
            if clocks is None:
                mask = np.ones(landing.size, bool)
            else:
                mask = landing <= clocks[self.recv[edges]]
            if mask.all():
                due.append(batch)
            elif mask.any():
                rest = ~mask
                due.append((landing[mask], seq, kind, edges[mask], vals[mask], _pick(pvals, mask)))
                kept.append((landing[rest], seq, kind, edges[rest], vals[rest], _pick(pvals, rest)))
            else:
                kept.append(batch)
        self._timed = kept
        if not due:
            return
        landing = np.concatenate([b[0] for b in due])
        sent = np.concatenate([np.full(b[0].size, b[1]) for b in due])
        # each message's run: a change of kind, or of carrying p, starts a new one
        label = np.concatenate(
            [np.full(b[0].size, 2 * (b[2] == ACCUMULATE) + (b[5] is not None)) for b in due]
        )
        edges = np.concatenate([b[3] for b in due])
        vals = np.concatenate([b[4] for b in due])
        pvals = np.concatenate([np.zeros(b[0].size) if b[5] is None else b[5] for b in due])
        order = np.lexsort((sent, landing))
        label, edges, vals, pvals = label[order], edges[order], vals[order], pvals[order]
        cuts = np.flatnonzero(np.diff(label)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, label.size], strict=True):
            code = int(label[a])
            e, v, pv = edges[a:b], vals[a:b], pvals[a:b] if code & 1 else None
            if code & 2:  # accumulates add up, repeated edges too
                np.add.at(self.buf, e, v)
                if pv is not None:
                    np.add.at(self.q, e, pv)
            else:  # puts and gets overwrite: the last to land wins
                _, first = np.unique(e[::-1], return_index=True)
                last = e.size - 1 - first
                self.buf[e[last]] = v[last]
                if pv is not None:
                    self.q[e[last]] = pv[last]
            np.add.at(self.ver, e, 1)

    def expose(self, rows: np.ndarray | None) -> None:
        """Refresh the exposed value and p of ``rows`` (None: every agent)."""
        if rows is None:
            self.exposed[...] = self.fmt.decode(self.raw)
            self.exposed_p[...] = self.p
        else:
            self.exposed[rows] = self.fmt.decode(self.raw[rows])
            self.exposed_p[rows] = self.p[rows]


def _pick(pvals: Any, mask: np.ndarray) -> Any:
    return None if pvals is None else pvals[mask]
