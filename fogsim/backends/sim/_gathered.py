"""The simulator's op over the gathered world: what the sharded simulator runs for an op
with no sharded form.

Every process gathers the whole world's arguments (the agents' values, every block to every
process; block-sized per-agent weights and ranks), as the op's parameters declare them
(:mod:`fogsim.backends._stacking`), runs the simulator's method over a whole-world
:class:`~._state.SimState` beside its block's (same topologies, cost meter and faults), and
keeps its block's rows of the result and of the bytes sent. The numbers are the one-process
simulator's, bit for bit; the cost is one process's whole state on every process, for that
op alone, until the op is given a sharded form (:mod:`._sharded_ops`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import _arrays
from ..._arrays import NUMPY, Kind, wrap_like
from ..._handles import Handle
from .._stacking import Stacking, parameters
from ._shardcomm import ShardComm
from ._state import SimState

__all__ = ["gathered"]

_PER_AGENT = (Stacking.SELF_WEIGHT, Stacking.WEIGHTS, Stacking.RANKS)


def gathered(
    method: Callable[..., Any], whole: SimState, block: SimState, comm: ShardComm
) -> Callable[..., Any]:
    """Return ``method`` (a simulator part's, over ``whole``) taking and returning the
    block's values of ``block``, run on the gathered world (see the module docstring)."""
    params = parameters(method)
    op = getattr(method, "__name__", "op")

    def call(*args: Any) -> Any:
        whole.mirror(block)
        kind: Kind = NUMPY
        world: list[Any] = []
        for p, value in zip(params, args, strict=False):
            if p.stacking in (Stacking.VALUE, Stacking.VALUES):
                arr, kind = block.stacked(value, op, averaging=False)
                world.append(comm.gather_blocks(np.ascontiguousarray(arr)))
            elif p.stacking in _PER_AGENT:
                world.append(comm.world_arg(value, p.name))
            else:
                world.append(value)
        world.extend(args[len(world) :])
        out = method(*world)
        counts = whole.sent.counts  # the block's agents' bytes become the block's
        block.sent.counts[...] += counts[comm.lo : comm.hi]
        counts[...] = 0
        return _block_of(out, comm, kind)

    return call


def _block_of(out: Any, comm: ShardComm, kind: Kind) -> Any:
    """The block's part of a whole-world result (n rows, a list of n, or a handle of one)."""
    if isinstance(out, Handle):
        return Handle.completed(out.op, _block_of(out.wait(), comm, kind), out.name)
    if isinstance(out, list) and len(out) == comm.n:
        return out[comm.lo : comm.hi]
    if _arrays.is_tensor(out) or isinstance(out, np.ndarray):
        arr, _ = _arrays.to_numpy(out, allow_cuda=True)
        if arr.ndim and arr.shape[0] == comm.n:
            return wrap_like(arr[comm.lo : comm.hi], kind)
    return out
