"""The simulator's collectives: ``allreduce``, ``allgather``, ``broadcast``, ``barrier``.

Every agent's value is a row of one stacked array, so a collective is one numpy
reduction or copy over the rows; tensors on a device are combined there (``_torchops``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ... import _arrays
from ..._arrays import NUMPY, Kind, wrap_like
from .._base import check_rank
from .._parts import Collectives
from .._stacking import AgentValue, AgentValues, CallName
from . import _torchops
from ._pool import MIN_POOLED_BYTES
from ._stack import allgather_ragged, ragged
from ._state import SimState

__all__ = ["SimCollectives", "allgathered"]


def allgathered(state: SimState, whole: np.ndarray, kind: Kind, arr: np.ndarray) -> Any:
    """Return each stacked agent all ``n`` agents' rows ``whole`` concatenated along the
    first dimension, and charge the allgather of the stacked ``arr`` (this process's rows)."""
    per_agent = whole.reshape(state.n, -1, *whole.shape[2:]) if whole.ndim > 1 else whole[:, None]
    flat = per_agent.reshape(1, -1, *per_agent.shape[2:])
    out = state.pool.empty((state.rows, *flat.shape[1:]), whole.dtype)
    out[...] = flat
    state.charge("allgather", arr)
    return wrap_like(out, kind)


class SimCollectives(Collectives):
    """The collectives of all ``n`` agents stacked in this process (see the module
    docstring); ``barrier`` is the world's (its window ops' round, see SimBackend.barrier)."""

    def __init__(self, state: SimState, barrier: Callable[[], None]) -> None:
        self._state = state
        self._barrier = barrier
        # bound once: allreduce is called in tight loops
        self._stacked = state.stacked
        self._pool_empty = state.pool.empty
        self._n = state.n

    def allreduce(self, x: AgentValue, average: bool = True, name: CallName = None) -> Any:
        if name is not None:
            _arrays.check_name(name)
        if average is not True and average is not False:
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        if type(x) is not np.ndarray and _torchops.takes(x):
            return _torchops.allreduce(self._state, x, average)
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        total = arr.sum(axis=0, dtype=arr.dtype)
        if arr.nbytes < MIN_POOLED_BYTES:
            out = np.empty(arr.shape, arr.dtype)
        else:
            out = self._pool_empty(arr.shape, arr.dtype)
        out[...] = total / self._n if average else total
        if self._state.cost is not None:
            self._state.charge("allreduce", arr)
        return out if kind is NUMPY else wrap_like(out, kind)

    def broadcast(self, x: AgentValue, root_rank: int, name: CallName = None) -> Any:
        _arrays.check_name(name)
        root = check_rank(root_rank, self._n, "root_rank")
        if _torchops.takes(x):
            return _torchops.broadcast(self._state, x, root)
        arr, kind = self._stacked(x, "broadcast", averaging=False)
        out = self._pool_empty(arr.shape, arr.dtype)
        out[...] = arr[root]
        self._state.charge("broadcast", arr)
        return wrap_like(out, kind)

    def allgather(self, x: AgentValues, name: CallName = None) -> Any:
        _arrays.check_name(name)
        if (
            isinstance(x, list | tuple)
            and len(x) == self._n
            and not _arrays.is_literal(x)
            and ragged(x)
        ):
            return allgather_ragged(x)
        if _torchops.takes(x):
            return _torchops.allgather(self._state, x)
        arr, kind = self._stacked(x, "allgather", averaging=False)
        return allgathered(self._state, arr, kind, arr)

    def barrier(self) -> None:
        """Deliver the window messages in flight; every agent acts until the round ends.

        Simulated agents never wait; a barrier makes the modelled asynchronous ones catch up
        (see :func:`fogsim.set_asynchrony`).
        """
        self._barrier()
