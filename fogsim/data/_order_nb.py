"""`fogsim.data._order`'s epoch walk in compiled code (numba); private.

The same numbers as :class:`fogsim.data._order.EpochOrders`: an epoch's order is found
by a bucket sort of its keys (bucket ``floor(key * m / 2**64)``, which grows with the key,
then an insertion sort of each bucket by ``(key, position)``), linear in the shard's size,
so a new epoch of 1,000 agents costs about what gathering its samples costs.

Imported only when a loader has drawn enough to pay for numba (see ``fogsim.data._loader``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

__all__ = ["take"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOW32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_S27, _S30, _S31, _S32 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)


@njit(nogil=True, cache=True)
def _out(state: Any, i: Any) -> Any:
    z = state + (np.uint64(i) + _ONE) * _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(nogil=True, cache=True)
def _shuffle(flat, order, start, m, state, keys, counts, perm):  # type: ignore[no-untyped-def]
    """Write agent's epoch order (``state = out(a_r, e)``) into ``order[start:start+m]``."""
    mm = np.uint64(m)
    for b in range(m + 1):
        counts[b] = 0
    for p in range(m):
        key = _out(state, p)
        keys[p] = key
        bucket = ((key >> _S32) * mm + (((key & _LOW32) * mm) >> _S32)) >> _S32
        counts[np.int64(bucket) + 1] += 1
    for b in range(m):
        counts[b + 1] += counts[b]
    for p in range(m):  # scatter by bucket; each bucket receives its positions in order
        key = keys[p]
        bucket = np.int64(((key >> _S32) * mm + (((key & _LOW32) * mm) >> _S32)) >> _S32)
        perm[counts[bucket]] = p
        counts[bucket] += 1
    for j in range(1, m):  # a stable insertion sort by key moves entries within buckets only
        p = perm[j]
        key = keys[p]
        i = j
        while i > 0 and keys[perm[i - 1]] > key:
            perm[i] = perm[i - 1]
            i -= 1
        perm[i] = p
    for j in range(m):
        order[start + j] = flat[start + perm[j]]


@njit(nogil=True, cache=True)
def take(flat, order, offsets, sizes, streams, epoch, cursor, batch_size, out):  # type: ignore[no-untyped-def]
    """Fill ``out`` (k, b) with each agent's next entries, starting new epochs as needed."""
    longest = 0
    for a in range(sizes.shape[0]):
        longest = max(longest, sizes[a])
    keys = np.empty(longest, dtype=np.uint64)
    counts = np.empty(longest + 1, dtype=np.int64)
    perm = np.empty(longest, dtype=np.int64)
    for a in range(sizes.shape[0]):
        start, m, c = offsets[a], sizes[a], cursor[a]
        for i in range(batch_size):
            if c == m:
                epoch[a] += 1
                _shuffle(flat, order, start, m, _out(streams[a], epoch[a]), keys, counts, perm)
                c = 0
            out[a, i] = order[start + c]
            c += 1
        cursor[a] = c
