"""BlueFog's basics, timeline, ``win_lock`` and utility names that fogsim maps or stubs.

fogsim has no background thread, no negotiation stage and no NCCL build of its own, so
these report fogsim's fixed answers; the timeline calls are :mod:`fogsim.timeline`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

import fogsim
from fogsim import timeline as _timeline

from ._types import Tensor

__all__ = [
    "InferDestinationFromSourceRanks",
    "InferSourceFromDestinationRanks",
    "allreduce_parameters",
    "get_skip_negotiate_stage",
    "is_homogeneous",
    "mpi_threads_supported",
    "nccl_built",
    "resume",
    "set_skip_negotiate_stage",
    "suspend",
    "timeline_context",
    "timeline_end_activity",
    "timeline_start_activity",
    "unified_mpi_window_model_supported",
    "win_lock",
]

_skip_negotiate_stage = False

#: BlueFog's timeline calls are fogsim's (same names, arguments and bool results).
timeline_start_activity = _timeline.timeline_start_activity
timeline_end_activity = _timeline.timeline_end_activity
timeline_context = _timeline.timeline_context


def nccl_built() -> bool:
    """Whether BlueFog was built with NCCL: fogsim has no NCCL build of its own, False."""
    return False


def mpi_threads_supported() -> bool:
    """Whether MPI supports ``MPI_THREAD_MULTIPLE``: fogsim's ops never need it, so True."""
    return True


def unified_mpi_window_model_supported() -> bool:
    """Whether MPI windows use the unified memory model: fogsim's windows behave so, True."""
    return True


def is_homogeneous() -> bool:
    """Whether every machine has the same number of ranks: always so in fogsim, True."""
    return True


def set_skip_negotiate_stage(value: bool) -> None:
    """Store the flag (fogsim has no negotiation stage to skip; nothing else changes)."""
    global _skip_negotiate_stage
    if not isinstance(value, bool):
        raise TypeError(f"value must be a bool, got {type(value).__name__}")
    _skip_negotiate_stage = value


def get_skip_negotiate_stage() -> bool:
    """Return the flag last given to :func:`set_skip_negotiate_stage` (default False)."""
    return _skip_negotiate_stage


def suspend() -> None:
    """BlueFog pauses its background thread (for ibfrun); fogsim has none: a no-op."""


def resume() -> None:
    """BlueFog resumes its background thread (for ibfrun); fogsim has none: a no-op."""


@contextlib.contextmanager
def win_lock(name: str) -> Iterator[None]:
    """Hold window ``name`` for exclusive access in the ``with`` block.

    BlueFog opens an MPI passive-target epoch on the neighbors' windows; fogsim's
    equivalent is :func:`fogsim.win_mutex` on the out-neighbors' window mutexes. Raises
    ``ValueError`` when no window ``name`` exists, as BlueFog does.
    """
    if name not in fogsim.win_names():
        raise ValueError(f"{name} is not found in the registered window object.")
    with fogsim.win_mutex(name, False, None):
        yield


# -- topology inference (bluefog.torch.topology_util) ---------------------------------------
def _infer(
    rank_list: list[int], name: str, transpose: bool, construct_adjacency_matrix: bool
) -> list[int] | tuple[list[int], np.ndarray]:
    me, n = fogsim.rank(), fogsim.size()
    if not isinstance(me, int | np.integer):
        raise TypeError(f"{name}: needs a per-agent backend (fogrun -np N or --spmd)")
    ranks = list(rank_list)
    for r in ranks:
        if not isinstance(r, int | np.integer) or isinstance(r, bool):
            raise ValueError(f"{name} must hold integers, got {r!r}")
        if not 0 <= r < n:
            raise ValueError(f"{name} must hold ranks 0..{n - 1}, got {r}")
    if len(set(ranks)) != len(ranks):
        raise ValueError(f"{name} contains duplicated ranks: {ranks}")
    if me in ranks:
        raise ValueError(f"{name} contains the own rank {me}")
    row = np.zeros((1, n))
    row[0, ranks] = 1.0
    rows = np.asarray(fogsim.allgather(row)).reshape(n, n)  # rows[i, j]: i lists j
    adjacency = rows.T if transpose else rows  # adjacency[i, j]: i sends to j
    found = [int(i) for i in np.flatnonzero(rows[:, me])]
    if not construct_adjacency_matrix:
        return found
    w = adjacency + np.eye(n)
    return found, w / w.sum(axis=0, keepdims=True)


def InferSourceFromDestinationRanks(
    dst_ranks: list[int], construct_adjacency_matrix: bool = False
) -> list[int] | tuple[list[int], np.ndarray]:
    """Return the ranks that list this agent among their ``dst_ranks`` (collective).

    With ``construct_adjacency_matrix`` also ``W`` (``W[i, j]``: weight sent from i to j,
    self loops included, each column summing to 1).
    """
    return _infer(dst_ranks, "dst_ranks", False, construct_adjacency_matrix)


def InferDestinationFromSourceRanks(
    src_ranks: list[int], construct_adjacency_matrix: bool = False
) -> list[int] | tuple[list[int], np.ndarray]:
    """Return the ranks that list this agent among their ``src_ranks`` (collective).

    ``construct_adjacency_matrix``: as in :func:`InferSourceFromDestinationRanks`.
    """
    return _infer(src_ranks, "src_ranks", True, construct_adjacency_matrix)


def allreduce_parameters(
    params: dict[str, Tensor] | list[Tensor] | list[tuple[str, Tensor]],
) -> None:
    """Average every tensor of ``params`` over all agents, in place.

    ``params``: a dict such as ``state_dict()`` (sorted by name, as BlueFog does), or a
    list of tensors or ``(name, tensor)`` pairs such as ``list(model.named_parameters())``.
    """
    items: list[tuple[str | None, Tensor]]
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError(f"invalid params of type: {type(params).__name__}")
    handles = [
        fogsim.allreduce_nonblocking(_detached(t), True, None if k is None else f"allreduce.{k}")
        for k, t in items
    ]
    for (_, t), handle in zip(items, handles, strict=True):
        result = fogsim.wait(handle)
        if isinstance(t, np.ndarray):
            np.copyto(t, result)
        else:
            with _no_grad():
                t.copy_(result)


def _detached(t: Any) -> Any:
    return t.detach() if callable(getattr(t, "detach", None)) else t


def _no_grad() -> Any:
    import torch

    return torch.no_grad()
