"""BlueFog's environment variables, read by ``bf.init()`` of fogsim's BlueFog layer.

BlueFog reads these when it starts (its C++ core, ``operations.cc`` and friends, and its
environment-variable page). fogsim honours those that mean something here; where a
``FOGSIM_*`` variable says the same, fogsim's wins when both are set. The others are
accepted: rank 0 prints one line to stderr, once per process and variable, saying that
it has no effect in fogsim.

==================================  ========================================================
BlueFog variable                    In fogsim
==================================  ========================================================
``BLUEFOG_NODES_PER_MACHINE``       honoured: ranks per machine, as ``init(local_size=)``
                                    (``FOGSIM_LOCAL_SIZE`` wins)
``BLUEFOG_TIMELINE``                honoured: rank r writes ``PREFIX<r>.json`` in BlueFog's
                                    layout (:mod:`fogsim.timeline`, ``bluefog=True``)
                                    (``FOGSIM_TIMELINE`` wins, with fogsim's layout)
``BLUEFOG_FUSION_THRESHOLD``        honoured: bytes up to which nonblocking neighbor
                                    allreduces are fused, as ``FOGSIM_FUSION_THRESHOLD``
                                    (0: off; ``FOGSIM_FUSION_THRESHOLD`` wins; the MPI
                                    and torch backends fuse, the others never do)
``BLUEFOG_CYCLE_TIME``              no effect: fogsim has no background cycle; a batch is
                                    sent when it is full or waited on
``BLUEFOG_LOG_LEVEL``,              no effect: fogsim has no BlueFog log
``BLUEFOG_LOG_HIDE_TIME``
``BLUEFOG_MPI_THREAD_LEVEL``        no effect: fogsim chooses the MPI thread level itself
``BLUEFOG_OPS_ON_CPU``,             no effect: fogsim's ops run where the tensors are (no
``BLUEFOG_WIN_ON_GPU``,             GPU-direct windows)
``BLUEFOG_WIN_ON_CPU``
``BLUEFOG_ALLREDUCE_BY_MPI``,       no effect: fogsim has no NCCL path to turn off
``BLUEFOG_ALLGATHER_BY_MPI``,
``BLUEFOG_BROADCAST_BY_MPI``,
``BLUEFOG_NEIGHBOR_ALLREDUCE_BY_MPI``,
``BLUEFOG_NEIGHBOR_ALLGATHER_BY_MPI``,
``BLUEFOG_WIN_OPS_BY_MPI``
``BLUEFOG_NUM_FINALIZER_THREADS``   no effect: fogsim has no NCCL callback thread pool
``BLUEFOG_MAX_WIN_SENT_LENGTH``,    no effect: fogsim's window messages have no length
``BLUEFOG_SLEEP_USEC_FOR_WIN_PASSIVE``  limit and no passive-target polling
==================================  ========================================================

BlueFog's install-time variables (``BLUEFOG_MPICXX_SHOW``, ``BLUEFOG_WITH_NCCL``,
``BLUEFOG_CUDA_*``, ``BLUEFOG_NCCL_*``) concern building BlueFog and are ignored without a
notice, as is any other ``BLUEFOG_*`` name. BlueFog has no variable for its stall check
(60 s, fixed); fogsim's is ``FOGSIM_STALL_TIMEOUT``. A bad value of an honoured variable
is a ``ValueError`` naming the variable.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "HONOURED",
    "NO_EFFECT",
    "fusion_threshold",
    "init_environment",
    "notice_no_effect",
    "start_timeline",
    "timeline_prefix",
]

#: The variables fogsim honours (see the module docstring).
HONOURED = ("BLUEFOG_NODES_PER_MACHINE", "BLUEFOG_TIMELINE", "BLUEFOG_FUSION_THRESHOLD")

#: The variables fogsim accepts without effect, and why (the notice's reason).
NO_EFFECT = {
    "BLUEFOG_CYCLE_TIME": "fogsim has no background cycle",
    "BLUEFOG_LOG_LEVEL": "fogsim has no BlueFog log",
    "BLUEFOG_LOG_HIDE_TIME": "fogsim has no BlueFog log",
    "BLUEFOG_MPI_THREAD_LEVEL": "fogsim chooses the MPI thread level itself",
    "BLUEFOG_OPS_ON_CPU": "fogsim's ops run where the tensors are",
    "BLUEFOG_WIN_ON_GPU": "fogsim's windows run where the tensors are",
    "BLUEFOG_WIN_ON_CPU": "fogsim's windows run where the tensors are",
    "BLUEFOG_ALLREDUCE_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_ALLGATHER_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_BROADCAST_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_NEIGHBOR_ALLREDUCE_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_NEIGHBOR_ALLGATHER_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_WIN_OPS_BY_MPI": "fogsim has no NCCL path",
    "BLUEFOG_NUM_FINALIZER_THREADS": "fogsim has no NCCL callback threads",
    "BLUEFOG_MAX_WIN_SENT_LENGTH": "fogsim's window messages have no length limit",
    "BLUEFOG_SLEEP_USEC_FOR_WIN_PASSIVE": "fogsim does not poll passive-target windows",
}

_noticed: set[str] = set()  # the variables whose notice this process printed


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    from ... import _settings

    return _settings.environ() if environ is None else environ


def fusion_threshold(environ: Mapping[str, str] | None = None) -> int | None:
    """``BLUEFOG_FUSION_THRESHOLD`` in bytes; None when unset or ``FOGSIM_FUSION_THRESHOLD``
    is set. ``ValueError`` unless it is an integer >= 0."""
    env = _environ(environ)
    text = env.get("BLUEFOG_FUSION_THRESHOLD", "").strip()
    if not text or env.get("FOGSIM_FUSION_THRESHOLD", "").strip():
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"BLUEFOG_FUSION_THRESHOLD must be a number of bytes >= 0 (0: no fusion), got {text!r}"
        )
    return value


def timeline_prefix(environ: Mapping[str, str] | None = None) -> str | None:
    """``BLUEFOG_TIMELINE`` (a file prefix); None when unset or ``FOGSIM_TIMELINE`` is set.

    ``ValueError`` when it is set but blank (BlueFog would write files named ``0.json``...).
    """
    env = _environ(environ)
    if "BLUEFOG_TIMELINE" not in env or env.get("FOGSIM_TIMELINE", "").strip():
        return None
    prefix = env["BLUEFOG_TIMELINE"].strip()
    if not prefix:
        raise ValueError(
            "BLUEFOG_TIMELINE must be a file prefix (rank r writes "
            "PREFIX<r>.json), got an empty value"
        )
    return prefix


def notice_no_effect(
    environ: Mapping[str, str] | None = None, rank: Any = 0, out: Any = None
) -> list[str]:
    """Print one line per set variable of :data:`NO_EFFECT` not noticed yet in this process
    (to ``out``, default stderr; on rank 0 only: other ranks print nothing); return them."""
    env = _environ(environ)
    names = [name for name in NO_EFFECT if name in env and name not in _noticed]
    _noticed.update(names)
    if not isinstance(rank, int) or rank == 0:  # simulation: rank is every agent's
        for name in names:
            print(
                f"fogsim: {name} is set but has no effect in fogsim ({NO_EFFECT[name]})",
                file=out or sys.stderr,
                flush=True,
            )
    return names


@contextlib.contextmanager
def init_environment(environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Around ``fogsim.init``: BlueFog's variables that fogsim's settings read at init.

    ``BLUEFOG_FUSION_THRESHOLD`` is given to fogsim as ``FOGSIM_FUSION_THRESHOLD`` for the
    block. Not inside an SPMD agent thread: its backend does not fuse, and the agents'
    threads share the process environment.
    """
    from ... import _context
    from .common.util import env

    threshold = fusion_threshold(environ)
    if threshold is None or _context.spmd_agent() is not None:
        yield
        return
    with env(FOGSIM_FUSION_THRESHOLD=str(threshold)):
        yield


def start_timeline(ctx: Any, environ: Mapping[str, str] | None = None) -> bool:
    """After ``fogsim.init`` returned ``ctx``: start the BlueFog-layout timeline when
    ``BLUEFOG_TIMELINE`` says so; return whether it did.

    An SPMD agent's timeline is stopped when the agent's context closes (``bf.shutdown``,
    a new ``bf.init``, the end of the run); otherwise ``fogsim.shutdown`` stops it.
    """
    import fogsim
    from fogsim import timeline

    from ... import _context

    prefix = timeline_prefix(environ)
    if prefix is None:
        return False
    if _context.spmd_agent() is None:
        timeline.start(prefix, bluefog=True)
        return True
    rank = int(fogsim.rank())
    timeline.start_agent(prefix, rank, bluefog=True)
    close = ctx.close

    def close_and_stop() -> None:
        try:
            close()
        finally:
            timeline.stop_agent(rank)

    ctx.close = close_and_stop  # this context's close also ends the agent's timeline
    return True
