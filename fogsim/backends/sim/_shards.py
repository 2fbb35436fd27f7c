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

Blocks: agent counts differ by at most one, the first ``n % P`` blocks holding one more
(:func:`block_bounds`), so N need not divide by P.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import _core
from ._plan import CircPlan, CsrPlan, Plan

__all__ = [
    "ShardPlan",
    "apply_shard",
    "block_bounds",
    "block_of",
    "exchange_halo",
    "shard_plan",
]


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

    @property
    def size(self) -> int:
        """The number of agents in this block."""
        return self.hi - self.lo


def _rows_in_order(plan: Plan, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The plan as (indptr, indices int64, data, self_weight (n,)), each row's entries in
    ascending source agent: the order both combine kernels sum in."""
    if isinstance(plan, CsrPlan):
        sw = np.broadcast_to(np.asarray(plan.self_weight, dtype=np.float64), (n,))
        return plan.indptr, plan.indices.astype(np.int64), plan.data, sw
    assert isinstance(plan, CircPlan)
    f = plan.form
    offsets = np.asarray(f.offsets, dtype=np.int64)
    k = len(offsets)
    rows = np.repeat(np.arange(n, dtype=np.int64), k)
    cols = (rows + np.tile(offsets, n)) % n
    w = np.asarray(f.weights, dtype=np.float64)
    data = w.T.ravel() if w.ndim == 2 else np.tile(w, n)
    order = np.lexsort((cols, rows))
    indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
    sw = np.broadcast_to(np.asarray(f.self_weight, dtype=np.float64), (n,))
    return indptr, cols[order], data[order], sw


def shard_plan(plan: Plan, n: int, parts: int, me: int) -> ShardPlan:
    """Return process ``me``'s :class:`ShardPlan` of ``plan`` over ``parts`` blocks.

    Every process computes its ``send`` from the same plan as the readers compute their
    ``recv``, so the two agree without a message.
    """
    if not 0 <= me < parts:
        raise ValueError(f"process {me} is not one of the {parts} processes")
    bounds = block_bounds(n, parts)
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    indptr, cols, data, sw = _rows_in_order(plan, n)
    start, stop = int(indptr[lo]), int(indptr[hi])
    mine = cols[start:stop]
    outside = (mine < lo) | (mine >= hi)
    halo = np.unique(mine[outside])
    b = hi - lo
    local = np.where(outside, b + np.searchsorted(halo, mine), mine - lo)
    owners = block_of(halo, bounds)
    blocks, first = np.unique(owners, return_index=True)
    ends = np.append(first[1:], len(halo))[: len(first)]
    recv = {int(q): (int(a), int(z)) for q, a, z in zip(blocks, first, ends, strict=True)}
    ext_indptr = np.concatenate([indptr[lo : hi + 1] - start, np.full(len(halo), stop - start)])
    self_weight = np.concatenate([sw[lo:hi], np.zeros(len(halo))])
    return ShardPlan(
        lo=lo,
        hi=hi,
        halo=halo,
        recv=recv,
        send=_sends(indptr, cols, bounds, me),
        indptr=ext_indptr.astype(np.int64),
        indices=local.astype(np.int32),
        data=np.ascontiguousarray(data[start:stop], dtype=np.float64),
        self_weight=self_weight,
    )


def _sends(
    indptr: np.ndarray, cols: np.ndarray, bounds: np.ndarray, me: int
) -> dict[int, np.ndarray]:
    """For every other block, the rows of block ``me`` its combine reads (0-based, ascending)."""
    lo, hi = int(bounds[me]), int(bounds[me + 1])
    reader = block_of(np.repeat(np.arange(len(indptr) - 1), np.diff(indptr)), bounds)
    wanted = (cols >= lo) & (cols < hi) & (reader != me)
    sends: dict[int, np.ndarray] = {}
    for q in np.unique(reader[wanted]).tolist():
        sends[int(q)] = np.unique(cols[wanted & (reader == q)]) - lo
    return sends


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
