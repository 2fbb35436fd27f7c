"""What fogsim's own messages between processes look like: JSON text, never a pickle.

Agreement reports, stall questions and answers, host names and rendezvous addresses
travel as the UTF-8 bytes of JSON (``None``, bools, numbers, strings, and lists and
dicts of these). ``json.loads`` builds only those values, so a peer, or anyone who
reaches a rank's socket, can at worst make a message unreadable, never make a rank run
code, as an unpickled message could. The runtimes' numeric data (arrays, flags, counts)
travel as fixed-dtype buffers and are not covered here.

The MPI helpers take an ``mpi4py`` communicator and use only its buffer calls
(``Allgather``, ``Allgatherv``, ``Bcast``), never the lowercase ones that pickle.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["BadMessage", "dumps", "loads", "mpi_allgather_json", "mpi_bcast_json"]


class BadMessage(ValueError):
    """A message from another process that is not fogsim's JSON."""


def dumps(value: Any) -> bytes:
    """Return ``value`` (plain JSON data) as UTF-8 JSON bytes; TypeError for anything else."""
    return json.dumps(value, separators=(",", ":")).encode()


def loads(data: bytes, sender: str = "a peer") -> Any:
    """Return the value that :func:`dumps` made ``data`` from; BadMessage if it is not JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise BadMessage(
            f"{sender} sent {len(data)} bytes that are not a fogsim message (JSON): {exc}"
        ) from None


def mpi_allgather_json(comm: Any, value: Any) -> list[Any]:
    """Return every rank's ``value`` (plain JSON data), by rank (collective over ``comm``).

    The byte lengths go first, as an int64 ``Allgather``; then the bytes, in one
    ``Allgatherv``.
    """
    data = np.frombuffer(dumps(value), np.uint8)
    counts = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(np.array([data.size], np.int64), counts)
    if np.any(counts < 0):
        raise BadMessage(f"a peer announced a message of {int(counts.min())} bytes")
    displs = np.zeros_like(counts)
    np.cumsum(counts[:-1], out=displs[1:])
    out = np.empty(int(counts.sum()), np.uint8)
    comm.Allgatherv(data, [out, (counts, displs)])
    return [
        loads(out[d : d + c].tobytes(), f"rank {r}")
        for r, (d, c) in enumerate(zip(displs.tolist(), counts.tolist(), strict=True))
    ]


def mpi_bcast_json(comm: Any, value: Any, root: int = 0) -> Any:
    """Return ``root``'s ``value`` (plain JSON data) on every rank (collective over ``comm``)."""
    mine = comm.Get_rank() == root
    data = np.frombuffer(dumps(value), np.uint8) if mine else None
    count = np.array([0 if data is None else data.size], np.int64)
    comm.Bcast(count, root=root)
    if count[0] < 0:
        raise BadMessage(f"rank {root} announced a message of {int(count[0])} bytes")
    buf = data.copy() if data is not None else np.empty(int(count[0]), np.uint8)
    comm.Bcast(buf, root=root)
    return loads(buf.tobytes(), f"rank {root}")
