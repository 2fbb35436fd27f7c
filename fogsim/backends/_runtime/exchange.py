"""The small exchanges of a dynamic call, over a :class:`~.transport.Transport`.

A dynamic ``neighbor_allreduce`` (``dst_weights`` given) or ``neighbor_allgather``
(``src_ranks``/``dst_ranks``) moves data only between the pairs each rank names, so before
the data moves the ranks check that the pairs match: each rank tells every rank whether,
and with which weight, it sends to it (:func:`exchange_send_tables`, one ``alltoall`` of
an ``(n, 2)`` table), and each receiver compares that with whom it expects.
"""

from __future__ import annotations

import numpy as np

from .agree import LocalError, agree
from .plan import RankPlan, check_senders, send_table
from .transport import Transport

__all__ = ["exchange_send_tables", "check_pairs", "neighbor_rows"]

#: The tag of :func:`neighbor_rows`' messages (no other message of the protocol uses it).
ROWS_TAG = 7


def exchange_send_tables(
    transport: Transport, plan: RankPlan
) -> tuple[np.ndarray | None, LocalError | None]:
    """Tell every rank whether (and with which weight) we send to it; check our senders.

    Returns the combined weights ``r_ij * s_ij`` (the simulator's product, so every runtime
    gives the same bits) or the mismatch found on this rank. Collective.
    """
    table = send_table(plan, transport.size)
    got = np.empty_like(table)
    transport.alltoall(table, got)
    return check_senders(plan, got, transport.rank)


def check_pairs(transport: Transport, srcs: np.ndarray, dsts: np.ndarray) -> None:
    """Raise on every rank unless the ranks' ``src_ranks``/``dst_ranks`` match. Collective."""
    plan = RankPlan(
        1.0,
        srcs,
        np.ones(len(srcs)),
        static=False,
        dsts=dsts,
        send_weights=np.ones(len(dsts)),
        exchange=True,
    )
    _, mismatch = exchange_send_tables(transport, plan)
    if mismatch is not None:
        mismatch.message = mismatch.message.replace("dst_weights", "dst_ranks").replace(
            "src_weights", "src_ranks"
        )
    agree(transport, 0, mismatch, "")


def neighbor_rows(
    transport: Transport, mine: int, srcs: np.ndarray, dsts: np.ndarray
) -> np.ndarray:
    """Return the first-dimension length of each source's value (they may differ), having
    sent ``mine`` to each destination."""
    rows = np.empty(len(srcs), dtype=np.int64)
    sent = np.array([mine], dtype=np.int64)
    reqs = [transport.irecv(rows[k : k + 1], int(j), tag=ROWS_TAG) for k, j in enumerate(srcs)]
    reqs += [transport.isend(sent, int(j), tag=ROWS_TAG) for j in dsts]
    for req in reqs:
        req.wait()
    return rows
