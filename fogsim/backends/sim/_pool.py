"""Reuse of large output buffers between simulator steps.

``x = fs.neighbor_allreduce(x)`` on a 512 MB state would otherwise map fresh pages every
step (arrays this large bypass malloc's free lists), and the page faults cost as much as
the step itself. The pool keeps the last few large outputs and hands one out again only
when nothing outside the pool refers to it any more (no array, view or tensor), which
CPython's reference count tells exactly.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["BufferPool"]

#: Outputs smaller than this are plain ``np.empty`` (malloc reuses them cheaply).
MIN_POOLED_BYTES = 1 << 20


class BufferPool:
    """A handful of large arrays recycled once their users have dropped them."""

    def __init__(self, max_items: int = 4) -> None:
        self._items: list[np.ndarray] = []
        self._max_items = max_items
        probe = [np.empty(1)]
        self._free_refs = self._refs(probe, 0)

    @staticmethod
    def _refs(items: list[np.ndarray], i: int) -> int:
        arr = items[i]
        return sys.getrefcount(arr)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Return an uninitialized array, reusing a free pooled one when it fits."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < MIN_POOLED_BYTES:
            return np.empty(shape, dtype)
        items = self._items
        for i in range(len(items)):
            if (
                items[i].shape == shape
                and items[i].dtype == dtype
                and self._refs(items, i) == self._free_refs
            ):
                items.append(items.pop(i))  # most recently used last
                return items[-1]
        arr = np.empty(shape, dtype)
        items.append(arr)
        if len(items) > self._max_items:
            # Forget the least recently used; the caller may still hold it, that's fine.
            del items[0]
        return arr

    def empty_like(self, a: np.ndarray) -> np.ndarray:
        """:meth:`empty` of ``a``'s shape and dtype (a small one without further checks)."""
        if a.nbytes < MIN_POOLED_BYTES:
            return np.empty(a.shape, a.dtype)
        return self.empty(a.shape, a.dtype)

    def clear(self) -> None:
        """Forget every pooled array."""
        self._items.clear()
