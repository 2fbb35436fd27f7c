"""Weight-argument rules shared by every backend's neighbor_allreduce."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from .._arrays import is_tensor
from ..topology import Topology

if TYPE_CHECKING:
    from ._base import Backend

__all__ = ["is_matrix", "check_partners", "machine_words", "exchange_between_machines"]


def is_matrix(obj: Any) -> bool:
    """Whether a weight argument is one matrix for every agent (vs. per-agent dicts)."""
    if isinstance(obj, Topology) or sp.issparse(obj):
        return True
    if type(obj).__module__.startswith("networkx"):
        return True
    return (isinstance(obj, np.ndarray) or is_tensor(obj)) and obj.ndim == 2


def check_partners(self_weight: Any, src_weights: Any, dst_weights: Any) -> bool:
    """Raise ValueError for weight arguments given without their partners.

    Returns True when no weights are given at all (the static topology's own weights).
    """
    if src_weights is None:
        if dst_weights is not None:
            raise ValueError(
                "dst_weights was given without src_weights: a dynamic neighbor_allreduce "
                "needs self_weight, src_weights and dst_weights"
            )
        if self_weight is not None:
            raise ValueError("self_weight and src_weights must be given together (or neither)")
        return True
    return False


_MACHINE_WORDS = [
    (re.compile(r"\b(src|dst)_weights\b"), r"\1_machine_weights"),
    (re.compile(r"\b(src|dst)_ranks\b"), r"\1_machine_ranks"),
    (re.compile(r"\bset_topology\(\)"), "set_machine_topology()"),
    (re.compile(r"\b(agent|rank)s\b"), "machines"),
    (re.compile(r"\b(agent|rank)\b"), "machine"),
]


@contextlib.contextmanager
def machine_words() -> Iterator[None]:
    """Re-word the errors of rank-level weight checks run on machine-level arguments."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for pattern, repl in _MACHINE_WORDS:
            message = pattern.sub(repl, message)
        raise type(exc)(message) from None


def exchange_between_machines(
    world: Backend,
    mean: Any,
    self_weight: Any,
    src_machine_weights: Any,
    dst_machine_weights: Any,
    enable_topo_check: bool,
) -> tuple[Any, Exception | None]:
    """The step of ``hierarchical_neighbor_allreduce`` that a machine's local rank 0 runs:
    the ``neighbor_allreduce`` of the machine's ``mean`` in ``world``, the world of those
    ranks (machines as ranks). Returns ``(result, None)``, or ``(None, error)`` with the
    ``TypeError``/``ValueError`` it raised, worded for machines, for the caller to tell
    its machine.
    """
    # the callers agreed on shapes, and the machine topology was agreed when it was set
    static = self_weight is None and src_machine_weights is None and dst_machine_weights is None
    try:
        with machine_words():
            out = world.neighbors.neighbor_allreduce(
                mean,
                self_weight,
                src_machine_weights,
                dst_machine_weights,
                enable_topo_check and not static,
            )
    except (TypeError, ValueError) as exc:  # raised on every machine's rank 0
        return None, exc
    return out, None
