"""The block order of BlueFog's dynamic ``neighbor_allgather``: as ``src_ranks`` lists them.

fogsim's own op returns the in-neighbors' blocks by rank; BlueFog returns them in the order
of the call's ``src_ranks``. These functions reorder a result, for one process's agent
(blocks may differ in length) or for the simulator's stacked agents (equal blocks).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["src_order", "src_order_stacked"]


def _src_permutation(order: list[int], rows: np.ndarray) -> np.ndarray | None:
    """Return the row index that puts rank-ordered blocks (``rows[k]`` rows for the k-th
    smallest rank of ``order``) in the order of ``order``; None when it is the identity."""
    by_rank = sorted(order)
    if order == by_rank:
        return None
    starts = np.concatenate([[0], np.cumsum(rows)])
    where = {r: k for k, r in enumerate(by_rank)}
    parts = [np.arange(starts[where[r]], starts[where[r] + 1]) for r in order]
    return np.concatenate(parts).astype(np.int64)


def _take_rows(result: Any, index: np.ndarray) -> Any:
    """Return ``result[index]`` along the first dimension, for numpy arrays and tensors."""
    return result[index] if isinstance(result, np.ndarray) else result[index.tolist()]


def src_order(result: Any, rows: np.ndarray, src_ranks: Any) -> Any:
    """Reorder one agent's gathered blocks (by rank, ``rows`` long) as ``src_ranks``."""
    index = _src_permutation([int(r) for r in src_ranks], np.asarray(rows, dtype=np.int64))
    return result if index is None else _take_rows(result, index)


def src_order_stacked(result: Any, tensor: Any, src_ranks: Any) -> Any:
    """Reorder every simulated agent's blocks as its ``src_ranks`` (blocks of equal length)."""
    shape = tuple(getattr(tensor, "shape", ()))
    block = shape[1] if len(shape) > 1 else 1
    orders = [[int(r) for r in ranks] for ranks in src_ranks]
    index = [
        _src_permutation(order, np.full(len(order), block, dtype=np.int64)) for order in orders
    ]
    if all(i is None for i in index):
        return result
    full = [
        np.arange(len(o) * block) if i is None else i for o, i in zip(orders, index, strict=True)
    ]
    if isinstance(result, list):
        return [
            r if i is None else _take_rows(r, f)
            for r, i, f in zip(result, index, full, strict=True)
        ]
    agents = np.arange(len(full))[:, None]
    table = np.stack(full)
    if isinstance(result, np.ndarray):
        return result[agents, table]
    return result[agents.tolist(), table.tolist()]
