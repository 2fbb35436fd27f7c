"""Calls whose arguments differ between ranks, each followed by a plain op (see
test_disagreement.py). Per-agent code: it runs under MPI, torch.distributed and as SPMD
agents alike. Every rank appends one JSON line per case to ``<out>/rank<r>.jsonl``: the
exception it got (type and message, or none) and the result of an allreduce after it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import fogsim as fs

fs.init()
r, n = int(fs.rank()), int(fs.size())
last = n - 1
out = Path(sys.argv[1]) / f"rank{r}.jsonl"
lines: list[str] = []


def outcome(case: str, call) -> None:
    try:
        call()
        kind, message = None, ""
    except (TypeError, ValueError) as exc:
        kind, message = type(exc).__name__, str(exc)
    # the world goes on after a refused call
    after = float(np.asarray(fs.allreduce(np.array([float(r)])))[0])
    lines.append(json.dumps({"case": case, "kind": kind, "message": message, "after": after}))


def agreed_calls(x: np.ndarray) -> None:
    """Calls every rank makes alike: afterwards a call of x's byte size may overlap."""
    for _ in range(3):
        fs.neighbor_allreduce(x)
    for _ in range(2):
        fs.wait(fs.neighbor_allreduce_nonblocking(x))


def odd_dtype(odd: int) -> np.ndarray:
    return np.ones(3, np.float32 if r == odd else np.float64)


for odd in (0, last):
    outcome(f"dtype first call, odd rank {odd}", lambda o=odd: fs.neighbor_allreduce(odd_dtype(o)))
    agreed_calls(np.ones(3))
    outcome(
        f"dtype after agreed calls, odd {odd}",
        lambda o=odd: fs.neighbor_allreduce(odd_dtype(o)),
    )
    agreed_calls(np.ones(3))
    outcome(
        f"dtype queued, odd {odd}",
        lambda o=odd: fs.wait(fs.neighbor_allreduce_nonblocking(odd_dtype(o))),
    )
agreed_calls(np.ones(3))
# the same bytes, another dtype and shape: both sides may start the transfer
outcome(
    "same bytes, another dtype",
    lambda: fs.neighbor_allreduce(np.ones(6, np.float32) if r == last else np.ones(3)),
)
outcome("dtype in allreduce", lambda: fs.allreduce(odd_dtype(last)))
outcome("average and sum", lambda: fs.allreduce(np.ones(2), average=r == 0))
outcome("broadcast from two roots", lambda: fs.broadcast(np.full(3, float(r)), root_rank=r % 2))
outcome(
    "broadcast root out of range on one rank",
    lambda: fs.broadcast(np.ones(3), root_rank=n if r == last else 0),
)
outcome("names in allreduce", lambda: fs.allreduce(np.ones(2), name=f"v{r}"))
outcome("names in broadcast", lambda: fs.broadcast(np.ones(2), 0, name=f"v{r}"))
outcome("names in allgather", lambda: fs.allgather(np.ones(2), name=f"v{r}"))
outcome("names in neighbor_allreduce", lambda: fs.neighbor_allreduce(np.ones(3), name=f"v{r}"))
outcome(
    "names in queued neighbor_allreduce",
    lambda: fs.wait(fs.neighbor_allreduce_nonblocking(np.ones(3), name=f"v{r}")),
)
outcome("names in neighbor_allgather", lambda: fs.neighbor_allgather(np.ones(2), name=f"v{r}"))
outcome("sum of booleans", lambda: fs.allreduce(np.array([True, r == 0]), average=False))
outcome("0-d object array", lambda: fs.allreduce(np.array(3, dtype=object), average=False))
outcome("1-d object array", lambda: fs.allreduce(np.array([3], dtype=object), average=False))
# what must still work: booleans move, and the same name on every rank is agreed
outcome("broadcast of booleans", lambda: fs.broadcast(np.array([r == 0, True]), 0))
outcome("one name on every rank", lambda: fs.allreduce(np.ones(2), name="same"))
out.write_text("\n".join(lines) + "\n")
fs.shutdown()
