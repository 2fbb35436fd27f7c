"""A block's step of a narrow circulant plan (rings, small-offset circulants), run by the
circulant kernel.

A circulant plan whose offsets reach at most ``A`` agents back and ``B`` ahead (signed,
``-A <= o <= B``) reads, for a block ``[lo, hi)``, only the window ``[lo - A, hi + B)``
(modulo n). The block's rows are laid out in that window: rows ``[0, A)`` of the extended
array are agents ``lo - A .. lo - 1``, rows ``[A, A + b)`` the block, rows
``[A + b, A + b + B)`` agents ``hi .. hi + B - 1``. Then

* the *interior* rows ``[A, b - B)`` of the block read only the block: the circulant
  kernel runs on the block's rows alone (a circulant of size b, whose wrapped rows are
  the edges, recomputed next) while the halo is in flight;
* the *edge* rows (the first ``A`` and last ``B`` of the block) are computed once the halo
  has arrived, by the CSR kernel on their gathered rows, each summed by ascending source
  agent of the world -- the one-process order, which differs from the window's for the
  rows whose sources wrap around the world's ends.

So the block's rows are those of one process bit for bit, at the circulant kernel's speed
(no index arrays for the interior). Plans reaching further than the block is long (the
exponential graphs) take the CSR split of ``_shards``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _core
from ._plan import CircPlan
from ._shards import block_bounds

__all__ = ["BandPlan", "band_plan", "combine_band", "exchange_band"]


@dataclass(frozen=True)
class BandPlan:
    """One process's part of a narrow circulant step (see the module docstring)."""

    lo: int
    hi: int
    before: int  # A: halo rows before the block
    after: int  # B: halo rows after it
    recv: list[tuple[int, int, int]]  # (process, start, stop) runs of halo rows, in order
    send: list[tuple[int, np.ndarray]]  # (process, block rows it reads), in its recv order
    offsets: np.ndarray  # ascending offsets modulo b, for the interior's kernel
    weights: np.ndarray  # (k,) or (k, b): the interior's kernel weights, in ``offsets`` order
    self_weight: np.ndarray  # () or (b,)
    edges: np.ndarray  # block rows (0-based) computed by the CSR kernel after the halo
    edge_rows: np.ndarray  # (e * (1 + k),) extended rows gathered for them: own, sources
    edge_indptr: np.ndarray
    edge_indices: np.ndarray
    edge_data: np.ndarray
    edge_self: np.ndarray

    @property
    def size(self) -> int:
        """The number of agents in this block."""
        return self.hi - self.lo


def _reach(plan: CircPlan, n: int) -> tuple[np.ndarray, int, int]:
    off = np.asarray(plan.form.offsets, dtype=np.int64)
    signed = np.where(off <= n // 2, off, off - n)
    return signed, int(max(0, -signed.min(initial=0))), int(max(0, signed.max(initial=0)))


def band_plan(plan: Any, n: int, parts: int, me: int) -> BandPlan | None:
    """Return process ``me``'s :class:`BandPlan` of ``plan``, or None when the plan is not
    a circulant one narrow enough for every block (then use ``_shards.shard_plan``)."""
    if not isinstance(plan, CircPlan):
        return None
    bounds = block_bounds(n, parts)
    signed, a, z = _reach(plan, n)
    if a + z >= int(np.diff(bounds).min()):
        return None
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    b = hi - lo
    f = plan.form
    w = np.asarray(f.weights, dtype=np.float64)
    sw = np.asarray(f.self_weight, dtype=np.float64)
    order = np.argsort(signed % b, kind="stable")
    weights = w[order] if w.ndim == 1 else np.ascontiguousarray(w[order][:, lo:hi])
    self_weight = sw if sw.ndim == 0 else np.ascontiguousarray(sw[lo:hi])
    recv, send = _halo_runs(bounds, me, a, z, n)
    edges = np.unique(np.concatenate([np.arange(min(a, b)), np.arange(max(b - z, 0), b)]))
    return BandPlan(
        lo=lo,
        hi=hi,
        before=a,
        after=z,
        recv=recv,
        send=send,
        offsets=np.ascontiguousarray((signed % b)[order]),
        weights=weights,
        self_weight=self_weight,
        edges=edges,
        **_edge_csr(plan, signed, edges, lo, a, n),
    )


def _window(lo: int, hi: int, a: int, z: int, n: int) -> list[np.ndarray]:
    """The agents of a block's halo, before and after it (modulo n)."""
    return [np.arange(lo - a, lo) % n, np.arange(hi, hi + z) % n]


def _runs(agents: np.ndarray, bounds: np.ndarray) -> list[tuple[int, int, int]]:
    """Split ``agents`` (consecutive modulo n) into (owner, start, stop) runs."""
    if not len(agents):
        return []
    owners = np.searchsorted(bounds, agents, side="right") - 1
    cuts = np.flatnonzero(np.diff(owners)) + 1
    starts = np.concatenate([[0], cuts]).astype(int)
    stops = np.concatenate([cuts, [len(agents)]]).astype(int)
    return [(int(owners[s]), int(s), int(e)) for s, e in zip(starts, stops, strict=True)]


def _halo_runs(
    bounds: np.ndarray, me: int, a: int, z: int, n: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, np.ndarray]]]:
    """This block's halo runs to receive, and what it sends to the others, in the order
    each receiver posts its runs (so that runs from one process pair up in order)."""
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    recv = []
    b = hi - lo
    for k, agents in enumerate(_window(lo, hi, a, z, n)):
        base = 0 if k == 0 else a + b
        recv += [(q, base + s, base + e) for q, s, e in _runs(agents, bounds)]
    send = []
    for q in range(len(bounds) - 1):
        if q == me:
            continue
        qlo, qhi = int(bounds[q]), int(bounds[q + 1])
        for agents in _window(qlo, qhi, a, z, n):
            for owner, s, e in _runs(agents, bounds):
                if owner == me:
                    send.append((q, agents[s:e] - lo))
    return recv, send


def _edge_csr(
    plan: CircPlan, signed: np.ndarray, edges: np.ndarray, lo: int, a: int, n: int
) -> dict[str, np.ndarray]:
    """The edge rows as a CSR over their gathered rows, sources by ascending world agent."""
    f = plan.form
    w = np.asarray(f.weights, dtype=np.float64)
    sw = np.broadcast_to(np.asarray(f.self_weight, dtype=np.float64), (n,))
    k, e = len(signed), len(edges)
    agents = lo + edges
    sources = (agents[:, None] + signed[None, :]) % n  # (e, k)
    weights = np.broadcast_to(w[:, None], (k, e)).T if w.ndim == 1 else w[:, agents].T
    order = np.argsort(sources, axis=1, kind="stable")
    sources = np.take_along_axis(sources, order, axis=1)
    weights = np.take_along_axis(np.ascontiguousarray(weights), order, axis=1)
    own = a + edges  # the edges' own extended rows; agent s sits at (s - (lo - A)) mod n
    rows = np.concatenate([own, ((sources - (lo - a)) % n).ravel()])
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    indptr[1 : e + 1] = np.arange(1, e + 1) * k
    indptr[e + 1 :] = e * k
    return {
        "edge_rows": rows,
        "edge_indptr": indptr,
        "edge_indices": (e + np.arange(e * k)).astype(np.int32),
        "edge_data": np.ascontiguousarray(weights.ravel()),
        "edge_self": np.concatenate([sw[agents], np.zeros(e * k)]),
    }


def exchange_band(transport: Any, band: BandPlan, ext: np.ndarray, tag: int) -> Any:
    """Start moving the halo into ``ext`` (``(A + b + B, m)``, the block at rows
    ``[A, A + b)``); return the request."""
    a = band.before
    sends = [(np.ascontiguousarray(ext[a + rows]), q) for q, rows in band.send]
    recvs = [(ext[s:e], q) for q, s, e in band.recv]
    return transport.exchange(sends, recvs, tag)


def combine_band(band: BandPlan, ext: np.ndarray, out: np.ndarray, request: Any) -> None:
    """Write the block's combined rows into ``out[A : A + b]``: the interior while the halo
    moves, the edges once ``request`` has completed."""
    a, b = band.before, band.size
    _core.circulant_combine(
        band.offsets, band.weights, band.self_weight, ext[a : a + b], out[a : a + b]
    )
    request.wait()
    if not len(band.edges):
        return
    gathered = np.ascontiguousarray(ext[band.edge_rows])
    done = np.empty_like(gathered)
    _core.csr_combine(
        band.edge_indptr, band.edge_indices, band.edge_data, band.edge_self, gathered, done
    )
    out[a + band.edges] = done[: len(band.edges)]
