"""How the processes of a sharded simulation move rows (see ``_sharded``).

:class:`ShardComm` holds the transport among the processes and where each block lies, and
moves what the sharded parts need: a step plan's halo rows (the plan split once per plan,
:func:`~._shards.shard_plan` or :func:`~._bands.band_plan`), whole blocks to every
process, and per-agent arguments gathered to the world's (as JSON data, :mod:`._shardwire`).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from typing import Any

import numpy as np

from ... import _arrays
from ... import timeline as _timeline
from .._runtime.transport import Request, Transport
from .._weights import is_matrix
from ._bands import BandPlan, band_plan, combine_band, exchange_band
from ._plan import CsrPlan, Plan
from ._pool import BufferPool
from ._shards import (
    TAG_GATHER,
    TAG_NEIGHBOR,
    ShardPlan,
    block_bounds,
    combine_overlapped,
    exchange_into,
    shard_plan,
)
from ._shardwire import decode, encode

__all__ = ["ShardComm", "plan_key"]

#: Step plans whose split is remembered (a dynamic schedule cycles through a few).
CACHED_SHARDS = 32


def plan_key(plan: Plan) -> tuple[int, ...]:
    """The identity of what a plan is made of (the cache holds the plan, so it lives on)."""
    if isinstance(plan, CsrPlan):
        return (id(plan.indptr), id(plan.indices), id(plan.data), id(plan.self_weight))
    return (id(plan.form),)


class ShardComm:
    """The rows' moves among the ``transport``'s processes, each holding one block of the
    ``n`` agents (see the module docstring)."""

    def __init__(self, transport: Transport, n: int) -> None:
        self.transport = transport
        self.n = n
        self.parts, self.me = int(transport.size), int(transport.rank)
        self.bounds = block_bounds(n, self.parts)
        self.lo, self.hi = int(self.bounds[self.me]), int(self.bounds[self.me + 1])
        self.rows = self.hi - self.lo
        self._extended = BufferPool()  # (block + halo) buffers: inputs and outputs
        self._splits: OrderedDict[tuple[tuple[int, ...], bool], tuple[Plan, Any]] = OrderedDict()
        #: the device steps of this process's splits (see ``_sharded_device``), by id
        self.device_steps: dict[int, tuple[ShardPlan, CsrPlan]] = {}
        #: message patterns as plans (see neighbor_values), by their arrays' ids
        self._patterns: OrderedDict[tuple[int, int], tuple[CsrPlan, ShardPlan]] = OrderedDict()

    def clear(self) -> None:
        """Forget the buffers and the split plans."""
        self._extended.clear()
        self._splits.clear()
        self.device_steps.clear()
        self._patterns.clear()

    # -- blocks ---------------------------------------------------------------------------
    def blocks(self) -> list[tuple[int, int]]:
        """Every process's agents ``[lo, hi)``, by process."""
        b = self.bounds
        return [(int(b[q]), int(b[q + 1])) for q in range(self.parts)]

    def gather_blocks(self, arr: np.ndarray) -> np.ndarray:
        """Return all N agents' rows on every process (every block to every process)."""
        whole = np.empty((self.n, *arr.shape[1:]), dtype=arr.dtype)
        lo, hi = self.lo, self.hi
        whole[lo:hi] = arr
        self.all_to_all(whole[lo:hi], [whole[a:z] for a, z in self.blocks()], TAG_GATHER)
        return whole

    def all_to_all(self, mine: np.ndarray, parts: list[np.ndarray], tag: int) -> None:
        """Send ``mine`` to every other process; receive process q's into ``parts[q]``."""
        me = self.me
        others = [q for q in range(self.parts) if q != me]
        if others:
            self.transport.exchange(
                [(mine, q) for q in others], [(parts[q], q) for q in others], tag
            ).wait()

    # -- plans' halos ---------------------------------------------------------------------
    def split(self, plan: Plan, narrow: bool = False) -> ShardPlan | BandPlan:
        """Return this process's part of ``plan``: a :class:`BandPlan` when ``narrow``
        allows one and the plan is a narrow circulant, else a :class:`ShardPlan`.

        Computed once per plan's arrays: a dynamic schedule's Topology objects give plans
        made afresh each step but holding the same (cached) arrays.
        """
        key = (plan_key(plan), narrow)
        hit = self._splits.get(key)
        if hit is not None and plan_key(hit[0]) == key[0]:
            self._splits.move_to_end(key)
            found: ShardPlan | BandPlan = hit[1]
            return found
        split: BandPlan | ShardPlan | None = None
        if narrow:
            split = band_plan(plan, self.n, self.parts, self.me)
        if split is None:
            split = shard_plan(plan, self.n, self.parts, self.me)
        self._splits[key] = (plan, split)
        if len(self._splits) > CACHED_SHARDS:
            self._splits.popitem(last=False)
        return split

    def shard(self, plan: Plan) -> ShardPlan:
        """Return this process's :class:`ShardPlan` of ``plan`` (cached)."""
        split = self.split(plan)
        assert isinstance(split, ShardPlan)
        return split

    def _extended_rows(self, flat: np.ndarray, before: int, total: int) -> np.ndarray:
        """Return a ``(total, m)`` buffer holding ``flat`` at rows ``[before, before + b)``.

        ``flat`` that already sits there in such a buffer (an earlier result) is used in
        place: ``x = fs.neighbor_allreduce(x)`` copies no block.
        """
        b, m = self.rows, flat.shape[1]
        base = flat.base
        if (
            isinstance(base, np.ndarray)
            and base.shape == (total, m)
            and base.dtype == flat.dtype
            and base.flags.c_contiguous
            and flat.flags.c_contiguous
            and flat.ctypes.data == base.ctypes.data + before * m * base.itemsize
        ):
            return base
        ext = self._extended.empty((total, m), flat.dtype)
        ext[before : before + b] = flat
        return ext

    def with_halo(self, flat: np.ndarray, shard: ShardPlan) -> tuple[np.ndarray, Request]:
        """Return the ``(b + h, m)`` extended rows of ``flat`` and the request filling the
        halo rows ``[b, b + h)``."""
        ext = self._extended_rows(flat, 0, self.rows + len(shard.halo))
        return ext, exchange_into(self.transport, shard, ext, TAG_NEIGHBOR)

    def combine(self, plan: Plan, flat: np.ndarray) -> np.ndarray:
        """Return the block's rows of ``W x`` for the block's rows ``flat`` ``(b, m)``."""
        split = self.split(plan, narrow=True)
        b = self.rows
        if isinstance(split, BandPlan):
            a = split.before
            ext = self._extended_rows(flat, a, a + b + split.after)
            request = exchange_band(self.transport, split, ext, TAG_NEIGHBOR)
            out = self._extended.empty(ext.shape, ext.dtype)
            with _timeline.phase("COMPUTE_AVERAGE"):
                combine_band(split, ext, out, request)
            return out[a : a + b]
        ext, request = self.with_halo(flat, split)
        out = self._extended.empty(ext.shape, ext.dtype)
        with _timeline.phase("COMPUTE_AVERAGE"):
            combine_overlapped(split, ext, out, request)
        return out[:b]

    # -- per-agent numbers (the clock of a sharded run, fogsim.clock.BlockClock) ----------
    def neighbor_values(
        self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For the world's message pattern ``indptr``, ``indices`` (CSR by receiver), the
        block's ``values`` (one float each) followed by the halo's, and for each edge of the
        block's receivers, in the pattern's order, the row of its sender among them."""
        key = (id(indptr), id(indices))
        hit = self._patterns.get(key)
        if hit is None or hit[0].indptr is not indptr or hit[0].indices is not indices:
            plan = CsrPlan(np.zeros(self.n), indptr, indices, np.ones(len(indices)))
            hit = self._patterns[key] = (plan, shard_plan(plan, self.n, self.parts, self.me))
            if len(self._patterns) > CACHED_SHARDS:
                self._patterns.popitem(last=False)
        else:
            self._patterns.move_to_end(key)
        shard = hit[1]
        flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1, 1)
        ext, request = self.with_halo(flat, shard)
        request.wait()
        b = self.rows
        return ext[:, 0], shard.indices[: shard.indptr[b]]

    def max_over_shards(self, values: np.ndarray) -> np.ndarray:
        """Entry by entry, the largest of every process's ``values`` (alike in shape)."""
        arr = np.ascontiguousarray(values, dtype=np.float64)
        parts = np.empty((self.parts, arr.size))
        parts[self.me] = arr.ravel()
        self.all_to_all(parts[self.me], list(parts), TAG_GATHER)
        most: np.ndarray = parts.max(axis=0).reshape(arr.shape)
        return most

    # -- per-agent arguments --------------------------------------------------------------
    def gather_json(self, value: Any, argname: str) -> list[Any]:
        """Every process's ``value``, by process, as JSON data (never pickled)."""
        parts = self.transport.allgather_json(encode(value))
        return [decode(part, argname, f"process {p}") for p, part in enumerate(parts)]

    def world_arg(self, value: Any, argname: str) -> Any:
        """Return a per-agent argument for the whole world, gathering block-sized ones.

        Every process gathers whenever the argument is per agent (by its type, the same on
        every process running the same script), so the processes never disagree on
        whether to communicate; lengths that fit neither form raise on every process.
        """
        if value is None or isinstance(value, numbers.Real) or is_matrix(value):
            return value
        if _arrays.is_tensor(value):
            value = value.detach().cpu().numpy()
        if not isinstance(value, np.ndarray | list | tuple) or (
            isinstance(value, np.ndarray) and value.ndim == 0
        ):
            return value  # the plan's parser names what is wrong with it
        lengths = self.transport.allgather_json(len(value))
        if all(n == self.n for n in lengths):
            return value
        sizes = np.diff(self.bounds).tolist()
        if lengths == sizes:  # the blocks' entries: gather them
            parts = self.gather_json(value, argname)
            if isinstance(value, np.ndarray):
                return np.concatenate([np.asarray(p) for p in parts])
            return [v for p in parts for v in p]
        raise ValueError(
            f"{argname}: the processes gave {lengths} entries; give one per agent of the "
            f"process's block ({sizes}, as fogsim.local builds it) or one per agent of the "
            f"world ({self.n}) on every process"
        )
