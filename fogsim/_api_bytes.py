"""The public count of the bytes each agent sends (split from :mod:`fogsim._api`)."""

from __future__ import annotations

from typing import Any

from ._api import _backend

__all__ = ["bytes_sent"]


def bytes_sent(reset: bool = False) -> Any:
    """Return the bytes this agent has sent in the neighbor ops since ``init()``.

    Counted: the values of ``neighbor_allreduce``, ``neighbor_allgather`` (and their
    ``_nonblocking`` twins) and of ``hierarchical_neighbor_allreduce``'s exchange among
    machines (by each machine's local rank 0; the averaging inside a machine is not
    counted), once per destination, in the dtype that travels (half precision is averaged,
    and sent, as float32; bfloat16 always travels as float32). Not counted: metadata
    (topology-check fingerprints, send tables, lengths), the collectives ``allreduce``,
    ``allgather`` and ``broadcast`` (their traffic is the MPI or NCCL library's algorithm),
    and the window ops. Distributed (MPI, torch) and in an SPMD agent: this rank's count,
    an int, measured where the runtime hands the buffers to its transport. In simulation:
    an int64 array of what each agent would send (agent r at row r; a sharded simulation:
    the block's agents), the same numbers the runtimes count for the same script.
    ``reset=True`` returns the count and starts it again from zero.
    """
    if not isinstance(reset, bool):
        raise TypeError(f"reset must be a bool, got {type(reset).__name__}")
    return _backend().bytes_sent(reset)
