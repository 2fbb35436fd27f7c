"""One block's part of a circulant plan, in O(b k + P) work and memory (see ``_shards``).

A circulant step reads, for row i, the agents ``(i + offsets[t]) % n``: over a block
``[lo, hi)`` each offset reads one cyclic interval of agents and is read by one cyclic
interval of readers, so the halo and the sends are unions of O(k) intervals, never found by
expanding the n k entries. The block's own entries are written straight into their final
(b, k) arrays: row i sums by ascending source agent, i.e. first the offsets that wrap past
n - 1 (``offsets[t] >= n - i``), then the others, each in ascending order; the rows sharing
which offsets wrap form at most k + 1 runs, and within a run each sorted slot reads a
contiguous range of agents, so its local indices are a few shifted ranges.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ...topology import CirculantForm

__all__ = ["CircBlock", "circulant_block"]

Pieces = list[tuple[int, int]]

# Rows whose (rows, k) entries are written together (a few hundred KB: cached).
_CHUNK_ROWS = 8192


@dataclass(frozen=True)
class CircBlock:
    """A block's halo, sends and (b, k) entries in local indices; see :func:`circulant_block`."""

    halo: np.ndarray  # (h,) int64, ascending
    send: dict[int, np.ndarray]  # process -> rows of the block (0-based, ascending)
    indices: np.ndarray  # (b * k,) int32 into [block; halo], each row by ascending source
    data: np.ndarray  # (b * k,) float64, likewise
    self_weight: np.ndarray  # (b,) float64
    reads_halo: np.ndarray  # (b,) bool: the rows that read a halo agent


def _cyclic(a: int, z: int, n: int) -> Pieces:
    """The cyclic interval ``[a, z)`` mod n (``0 <= z - a <= n``) as pieces of ``[0, n)``."""
    length = z - a
    if length >= n:
        return [(0, n)]
    if length <= 0:
        return []
    a %= n
    z = a + length
    return [(a, z)] if z <= n else [(a, n), (0, z - n)]


def _merge(pieces: Pieces) -> Pieces:
    """The union of ``pieces`` as disjoint, ascending, non-adjacent intervals."""
    out: Pieces = []
    for a, z in sorted(p for p in pieces if p[1] > p[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], z))
        else:
            out.append((a, z))
    return out


def _ranges(pieces: Pieces) -> np.ndarray:
    """The integers of disjoint ascending ``pieces``, ascending, as int64."""
    if not pieces:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in pieces])


def _halo_pieces(offsets: list[int], n: int, lo: int, hi: int) -> Pieces:
    """The agents outside ``[lo, hi)`` that the block's rows read, as intervals."""
    read = [p for off in offsets for p in _cyclic(lo + off, hi + off, n)]
    outside = []
    for a, z in _merge(read):
        outside += [(a, min(z, lo)), (max(a, hi), z)]
    return _merge(outside)


def _sends(offsets: list[int], n: int, bounds: np.ndarray, me: int) -> dict[int, np.ndarray]:
    """For every other block, the rows of block ``me`` its rows read (0-based, ascending)."""
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    wanted: dict[int, Pieces] = {}
    for off in offsets:
        # readers (i + off) % n in [lo, hi): i in the cyclic [lo - off, hi - off)
        for r0, r1 in _cyclic(lo - off, hi - off, n):
            first = int(np.searchsorted(bounds, r0, side="right")) - 1
            last = int(np.searchsorted(bounds, r1 - 1, side="right")) - 1
            for q in range(first, last + 1):
                a, z = max(r0, int(bounds[q])), min(r1, int(bounds[q + 1]))
                if q != me and z > a:
                    c = (a + off) % n - lo  # the run maps onto a run of the block
                    wanted.setdefault(q, []).append((c, c + z - a))
    return {q: _ranges(_merge(wanted[q])) for q in sorted(wanted)}


class _LocalMap:
    """Agent -> local index: the block's agents to ``[0, b)``, the halo's after them."""

    def __init__(self, lo: int, hi: int, halo_pieces: Pieces) -> None:
        #: which block rows read a halo agent, as the writes find them
        self.reads_halo = np.zeros(hi - lo, dtype=bool)
        # (first agent, stop, local index of the first), ascending
        self.segments = [(lo, hi, 0)]
        at = hi - lo
        for a, z in halo_pieces:
            self.segments.append((a, z, at))
            at += z - a
        self.segments.sort()
        self.starts = [seg[0] for seg in self.segments]

    def write(self, column: np.ndarray, rel: np.ndarray, c: int, c1: int, shift: int) -> None:
        """Set ``column[r]`` to the local index of agent ``r + shift`` for the block rows
        ``r`` (``rel[r] == r``) whose agents are ``[c, c1)``: a few shifted ranges."""
        seg = bisect.bisect_right(self.starts, c) - 1
        while c < c1:
            a, z, base = self.segments[seg]
            assert a <= c < z, "a read agent is in neither the block nor the halo"
            e = min(c1, z)
            if base:  # a halo run (the block's local indices start at 0)
                self.reads_halo[c - shift : e - shift] = True
            np.add(
                rel[c - shift : e - shift],
                np.int32(shift - a + base),
                out=column[c - shift : e - shift],
            )
            c, seg = e, seg + 1


def circulant_block(form: CirculantForm, n: int, bounds: np.ndarray, me: int) -> CircBlock:
    """Return block ``me``'s part of the circulant ``form`` over blocks ``bounds``."""
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    b = hi - lo
    offs = np.asarray(form.offsets, dtype=np.int64)
    offsets = offs.tolist()
    k = len(offsets)
    halo_pieces = _halo_pieces(offsets, n, lo, hi)
    local = _LocalMap(lo, hi, halo_pieces)
    w = np.asarray(form.weights, dtype=np.float64)
    indices = np.empty((b, k), dtype=np.int32)
    data = np.empty((b, k), dtype=np.float64)
    rel = np.arange(b, dtype=np.int32)
    # Row i's offsets t with offs[t] >= n - i wrap; that set changes at i = n - offs[t].
    cuts = sorted({lo, hi, *(n - off for off in offsets if lo < n - off < hi)})
    for g0, g1 in zip(cuts[:-1], cuts[1:], strict=True):
        s = int(np.searchsorted(offs, n - g0, side="left"))  # offsets below s do not wrap
        slots = [(s + j) % k for j in range(k)]
        shifts = [offsets[t] - (n if t >= s else 0) for t in slots]
        # Rows in chunks whose (rows, k) entries stay cached while their k columns are
        # written: column by column over the whole block took many times longer.
        for c0 in range(g0, g1, _CHUNK_ROWS):
            c1 = min(c0 + _CHUNK_ROWS, g1)
            if w.ndim == 1:
                data[c0 - lo : c1 - lo] = w[slots]
            for j, t in enumerate(slots):
                if w.ndim == 2:
                    data[c0 - lo : c1 - lo, j] = w[t, c0:c1]
                # slot j of block row r = i - lo reads agent r + lo + shifts[j]
                d = lo + shifts[j]
                local.write(indices[:, j], rel, c0 + shifts[j], c1 + shifts[j], d)
    sw = np.asarray(form.self_weight, dtype=np.float64)
    self_weight = sw[lo:hi].copy() if sw.ndim else np.full(b, float(sw))
    return CircBlock(
        halo=_ranges(halo_pieces),
        send=_sends(offsets, n, bounds, me),
        indices=indices.reshape(-1),
        data=data.reshape(-1),
        self_weight=self_weight,
        reads_halo=local.reads_halo,
    )
