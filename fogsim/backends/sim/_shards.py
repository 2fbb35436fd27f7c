"""Split a combine plan over P processes holding contiguous blocks of agents (sharding).

The first piece of sharded simulation: for process ``me`` of ``P``, holding agents
``[lo, hi)``, :func:`shard_plan` turns one step's plan (see ``_plan``) into

* the *halo*: the agents of other blocks whose rows this block's combine reads, ascending;
  each other block's part of it is one contiguous run (``recv``), since blocks are;
* ``send``: for every other process, the rows of this block it reads, ascending, so that
  what ``me`` sends to ``q`` is exactly ``q``'s run of halo rows from ``me``;
* a local CSR over the *extended* rows ``[block; halo]``, whose entries keep the
  one-process plan's order (ascending source agent), so :func:`apply_shard` runs
  ``csr_combine`` with the same products summed in the same order: the block's rows come
  out bit for bit as one process computes them, for CSR and circulant plans alike (the
  circulant kernel also sums by ascending source agent).

A circulant plan is sharded in O(b k + P) work and memory (``_circshard``), never expanded
to its n k entries; a CSR plan, global already, in O(nnz).

Overlap: the block's rows are split into *interior* runs (reading only the block) and
*boundary* runs (reading the halo). :func:`exchange_into` starts moving the halo straight
into the rows after the block of one ``(b + h, m)`` buffer, and :func:`combine_overlapped`
combines the interior runs while it travels, waits, then combines the boundary runs.

Blocks: agent counts differ by at most one, the first ``n % P`` blocks holding one more
(:func:`block_bounds`), so N need not divide by P.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _core
from ._circshard import circulant_block
from ._plan import CircPlan, CsrPlan, Plan

#: At most this many boundary runs: beyond, the shortest interior gaps between them count as
#: boundary, so that the overlapped combine makes a bounded number of kernel calls.
MAX_RUNS = 64

__all__ = [
    "MAX_RUNS",
    "ShardPlan",
    "apply_shard",
    "block_bounds",
    "block_of",
    "combine_overlapped",
    "exchange_halo",
    "exchange_into",
    "shard_plan",
]

#: Message tags of the sharded simulator, one per kind of op: all processes run ops in
#: the same order, and messages between two processes with one tag arrive in order.
TAG_NEIGHBOR, TAG_GATHER, TAG_MACHINE = 11, 12, 13


def block_bounds(n: int, parts: int) -> np.ndarray:
    """Return the ``parts + 1`` bounds of ``parts`` contiguous blocks of ``n`` agents."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    if n < parts:
        raise ValueError(f"{n} agents cannot be split over {parts} processes: fewer than one each")
    base, extra = divmod(n, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def block_of(agents: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Return the block (process) holding each of ``agents``."""
    return np.searchsorted(bounds, agents, side="right") - 1


@dataclass(frozen=True)
class ShardPlan:
    """One process's part of a step: see the module docstring."""

    lo: int
    hi: int
    halo: np.ndarray  # (h,) int64: the other blocks' agents this block reads, ascending
    recv: dict[int, tuple[int, int]]  # process -> [start, stop) of its rows in ``halo``
    send: dict[int, np.ndarray]  # process -> rows of this block (0-based, ascending) it reads
    indptr: np.ndarray  # (b + h + 1,) int64 over the extended rows; halo rows empty
    indices: np.ndarray  # (nnz,) int32 into the extended rows, in the plan's order
    data: np.ndarray  # (nnz,) float64
    self_weight: np.ndarray  # (b + h,) float64; 0 on the halo rows
    #: block-relative ``[a, z)`` runs of rows reading only the block, ascending
    interior: list[tuple[int, int]]
    #: the runs between them: rows reading the halo (and, past MAX_RUNS, short gaps)
    boundary: list[tuple[int, int]]

    @property
    def size(self) -> int:
        """The number of agents in this block."""
        return self.hi - self.lo


def shard_plan(plan: Plan, n: int, parts: int, me: int) -> ShardPlan:
    """Return process ``me``'s :class:`ShardPlan` of ``plan`` over ``parts`` blocks.

    Every process computes its ``send`` from the same plan as the readers compute their
    ``recv``, so the two agree without a message.
    """
    if not 0 <= me < parts:
        raise ValueError(f"process {me} is not one of the {parts} processes")
    bounds = block_bounds(n, parts)
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    b = hi - lo
    if isinstance(plan, CircPlan):
        circ = circulant_block(plan.form, n, bounds, me)
        halo, send, indices, data = circ.halo, circ.send, circ.indices, circ.data
        indptr = np.arange(b + 1, dtype=np.int64) * len(plan.form.offsets)
        block_sw, reads_halo = circ.self_weight, circ.reads_halo
    else:
        halo, indptr, indices, data = _csr_block(plan, lo, hi)
        send = _csr_sends(plan, bounds, me)
        sw = np.asarray(plan.self_weight, dtype=np.float64)
        block_sw = np.broadcast_to(sw, (n,))[lo:hi]
        reads_halo = _reads_halo(indptr, indices, b)
    # each other block's part of the (ascending) halo is one run
    cut = np.searchsorted(halo, bounds)
    recv = {q: (int(cut[q]), int(cut[q + 1])) for q in np.flatnonzero(np.diff(cut)).tolist()}
    nnz = len(indices)
    ext_indptr = np.empty(b + len(halo) + 1, dtype=np.int64)
    ext_indptr[: b + 1] = indptr
    ext_indptr[b + 1 :] = nnz
    self_weight = np.zeros(b + len(halo))
    self_weight[:b] = block_sw
    interior, boundary = _runs(reads_halo)
    return ShardPlan(
        lo=lo,
        hi=hi,
        halo=halo,
        recv=recv,
        send=send,
        indptr=ext_indptr,
        indices=indices,
        data=data,
        self_weight=self_weight,
        interior=interior,
        boundary=boundary,
    )


def _csr_block(plan: CsrPlan, lo: int, hi: int) -> tuple[np.ndarray, ...]:
    """The block's rows of a CSR plan: (halo, indptr (b + 1,), local indices, data)."""
    start, stop = int(plan.indptr[lo]), int(plan.indptr[hi])
    mine = plan.indices[start:stop].astype(np.int64)
    outside = (mine < lo) | (mine >= hi)
    halo = np.unique(mine[outside])
    local = np.where(outside, hi - lo + np.searchsorted(halo, mine), mine - lo)
    data = np.ascontiguousarray(plan.data[start:stop], dtype=np.float64)
    return halo, plan.indptr[lo : hi + 1] - start, local.astype(np.int32), data


def _csr_sends(plan: CsrPlan, bounds: np.ndarray, me: int) -> dict[int, np.ndarray]:
    """For every other block, the rows of block ``me`` its rows read (0-based, ascending)."""
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    sends: dict[int, np.ndarray] = {}
    for q in range(len(bounds) - 1):
        if q == me:
            continue
        # block q's rows' entries are one slice of the plan
        cols = plan.indices[plan.indptr[bounds[q]] : plan.indptr[bounds[q + 1]]]
        read = cols[(cols >= lo) & (cols < hi)]
        if len(read):
            sends[q] = np.unique(read).astype(np.int64) - lo
    return sends


def _reads_halo(indptr: np.ndarray, indices: np.ndarray, b: int) -> np.ndarray:
    """Whether each of the block's ``b`` rows reads a halo row (a local index ``>= b``)."""
    filled = np.flatnonzero(indptr[1:] > indptr[:-1])
    reads = np.zeros(b, dtype=bool)
    if len(filled):
        # a filled row's entries end where the next filled row's begin
        reads[filled] = np.maximum.reduceat(indices, indptr[filled]) >= b
    return reads


def _runs(boundary: np.ndarray) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The interior and boundary runs of a block whose rows ``boundary`` marks."""
    b = len(boundary)
    edges = np.flatnonzero(np.diff(boundary, prepend=False, append=False))
    pairs = edges.reshape(-1, 2)  # [start, stop) of each boundary run
    if len(pairs) > MAX_RUNS:
        # keep the MAX_RUNS - 1 longest gaps between boundary runs; the rest turn boundary
        gaps = pairs[1:, 0] - pairs[:-1, 1]
        keep = np.sort(np.argsort(-gaps, kind="stable")[: MAX_RUNS - 1])
        pairs = np.column_stack(
            [np.r_[pairs[0, 0], pairs[keep + 1, 0]], np.r_[pairs[keep, 1], pairs[-1, 1]]]
        )
    bounds = [0, *pairs.ravel().tolist(), b]
    interior = [(a, z) for a, z in zip(bounds[::2], bounds[1::2], strict=True) if z > a]
    return interior, [(int(a), int(z)) for a, z in pairs.tolist()]


def apply_shard(shard: ShardPlan, block: np.ndarray, halo_rows: np.ndarray) -> np.ndarray:
    """Return the block's combined rows from its own rows and the halo's, ``(b, m)``.

    ``halo_rows`` holds the values of ``shard.halo``'s agents in that order (what the
    other processes sent, placed at their ``recv`` runs).
    """
    x = np.ascontiguousarray(np.concatenate([block, halo_rows]))
    out = np.empty_like(x)
    _core.csr_combine(shard.indptr, shard.indices, shard.data, shard.self_weight, x, out)
    return out[: shard.size]


def exchange_halo(
    transport: Any, shard: ShardPlan, block: np.ndarray, tag: int = 0
) -> tuple[Any, np.ndarray]:
    """Start moving the halo over ``transport`` (a runtime ``Transport`` whose ranks are
    the blocks); return the request and the ``(h, *row)`` halo buffer it fills.

    Only boundary rows move: to each process the rows of ``block`` it reads, from each the
    run of halo rows it holds, in one batch. Every process calls it for the same step.
    """
    block = np.ascontiguousarray(block)
    halo = np.empty((len(shard.halo), *block.shape[1:]), dtype=block.dtype)
    sends = [(np.ascontiguousarray(block[rows]), q) for q, rows in shard.send.items()]
    recvs = [(halo[a:z], q) for q, (a, z) in shard.recv.items()]
    return transport.exchange(sends, recvs, tag), halo


def exchange_into(transport: Any, shard: ShardPlan, x_ext: np.ndarray, tag: int = 0) -> Any:
    """Start moving the halo into ``x_ext[b:]``; return the transport's request.

    ``x_ext`` is ``(b + h, *row)``, C-contiguous, the block in its first ``b`` rows: each
    process's run of halo rows is received at its ``recv`` rows after the block, and each
    other process gets ``x_ext[rows]`` of its ``send`` (a view when the rows are one run).
    The block's rows must not change until the request completes.
    """
    b = shard.size
    if x_ext.shape[0] != b + len(shard.halo) or not x_ext.flags.c_contiguous:
        raise ValueError(
            f"x_ext must be C-contiguous with {b + len(shard.halo)} rows (block and halo),"
            f" got shape {x_ext.shape}"
        )
    sends = [(_take_rows(x_ext, rows), q) for q, rows in shard.send.items()]
    recvs = [(x_ext[b + a : b + z], q) for q, (a, z) in shard.recv.items()]
    return transport.exchange(sends, recvs, tag)


def _take_rows(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]`` for ascending ``rows``, without a copy when they are one run."""
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return x[int(rows[0]) : int(rows[-1]) + 1]
    return np.ascontiguousarray(x[rows])


def combine_overlapped(
    shard: ShardPlan, x_ext: np.ndarray, out_ext: np.ndarray, request: Any
) -> None:
    """Combine the block into ``out_ext[:b]`` while its halo arrives in ``x_ext[b:]``.

    The interior runs first, then ``request.wait()`` (the halo's transfer, e.g. from
    :func:`exchange_into`), then the boundary runs: ``out_ext[:b]`` is then bit for bit
    :func:`apply_shard`'s result. ``x_ext`` and ``out_ext`` are C-contiguous ``(b + h, m)``.
    """
    args = (shard.indptr, shard.indices, shard.data, shard.self_weight, x_ext, out_ext)
    for a, z in shard.interior:
        _core.csr_combine_rows(*args, a, z)
    request.wait()
    for a, z in shard.boundary:
        _core.csr_combine_rows(*args, a, z)
