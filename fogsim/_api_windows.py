"""The public one-sided window ops; each dispatches to the backend of the current context.

Split from :mod:`fogsim._api` (same conventions: in simulation, agent-local values and
per-agent arguments are stacked along a leading agent axis).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context
from ._api import _backend, poll, wait
from ._handles import Handle
from ._routing import EAGER, Runner, public_op
from ._types import ArrayLike, PerAgent, SelfWeight, Value, Weights

__all__ = [
    "win_create",
    "win_free",
    "win_names",
    "win_put",
    "win_accumulate",
    "win_get",
    "win_update",
    "win_update_then_collect",
    "win_mutex",
    "get_win_version",
    "win_associated_p",
    "set_win_ops_with_associated_p",
    "win_put_nonblocking",
    "win_accumulate_nonblocking",
    "win_get_nonblocking",
    "win_wait",
    "win_poll",
    "set_asynchrony",
]


# -- one-sided window ops -----------------------------------------------------------------
# A window is a named set of buffers, one per in-neighbor of the static topology, that the
# neighbors write (win_put, win_accumulate) or this agent fills from them (win_get) without
# the other side taking part; win_update combines the buffers with the agent's own value.
# In simulation the asynchrony of real processes is modelled (see set_asynchrony).


@public_op("WIN_CREATE", route=lambda world: world.windows.win_create, twin=None)
def win_create(run: Runner[bool], x: ArrayLike, name: str, zero_init: bool = False) -> bool:
    """Create the window ``name`` for ``x`` (collective); return True.

    ``x`` (an array or CPU tensor, stacked over agents in simulation) is registered: the
    window ops read it, and :func:`win_update` writes its result into it. Each agent gets
    one buffer per in-neighbor of the current topology, holding a copy of its own ``x`` (or
    zeros with ``zero_init``). The topology cannot change while windows exist.

    ``x`` is float32 or float64, or half precision (float16, bfloat16): then the buffers
    hold float32, and each result written into ``x`` is computed in float32 and rounded
    once, the same bits in every mode. Integers are refused (TypeError).
    """
    return run()(x, name, zero_init)


@public_op("WIN_FREE", route=lambda world: world.windows.win_free, twin=None)
def win_free(run: Runner[bool], name: str | None = None) -> bool:
    """Free the window ``name``, or every window when ``name`` is None (collective)."""
    return run()(name)


def win_names() -> list[str]:
    """Return the names of the windows that exist, in creation order."""
    return _backend().windows.win_names()


@public_op("WIN_PUT", route=lambda world: world.windows.win_put, twin=EAGER)
def win_put(
    run: Runner[bool],
    x: ArrayLike,
    name: str,
    self_weight: SelfWeight = None,
    dst_weights: Weights = None,
    require_mutex: bool = False,
) -> bool:
    """Write ``dst_weights[j] * x`` into this agent's buffer at each out-neighbor ``j``.

    ``dst_weights``: a dict ``{rank: weight}`` or a list of ranks (weight 1), which must be
    out-neighbors in the window's topology; default: every out-neighbor, weight 1. Then
    ``x *= self_weight`` in place (default 1: unchanged). ``require_mutex`` holds each
    destination's window mutex during the write. In simulation the arguments are per agent
    (an array of n self weights, n dicts, or one n x n matrix ``D[i, j]`` = what ``j``
    writes to ``i``).
    """
    return run()(x, name, self_weight, dst_weights, require_mutex)


win_put_nonblocking = win_put.nonblocking


@public_op("WIN_ACCUMULATE", route=lambda world: world.windows.win_accumulate, twin=EAGER)
def win_accumulate(
    run: Runner[bool],
    x: ArrayLike,
    name: str,
    self_weight: SelfWeight = None,
    dst_weights: Weights = None,
    require_mutex: bool = False,
) -> bool:
    """Like :func:`win_put`, but add ``dst_weights[j] * x`` to the buffers at ``j``."""
    return run()(x, name, self_weight, dst_weights, require_mutex)


win_accumulate_nonblocking = win_accumulate.nonblocking


@public_op("WIN_GET", route=lambda world: world.windows.win_get, twin=EAGER)
def win_get(
    run: Runner[bool], name: str, src_weights: Weights = None, require_mutex: bool = False
) -> bool:
    """Fetch ``src_weights[j] *`` (in-neighbor ``j``'s exposed value) into ``j``'s buffer.

    An agent's exposed value is its registered ``x`` as it stood after its own last window
    op (create, put, accumulate or update). ``src_weights``: dict or list of in-neighbor
    ranks; default every in-neighbor, weight 1. ``require_mutex`` holds ``j``'s mutex.
    """
    return run()(name, src_weights, require_mutex)


win_get_nonblocking = win_get.nonblocking


@public_op("WIN_UPDATE", route=lambda world: world.windows.win_update, twin=None)
def win_update(
    run: Runner[Value],
    name: str,
    self_weight: SelfWeight = None,
    neighbor_weights: Weights = None,
    reset: bool = False,
    clone: bool = False,
    require_mutex: bool = False,
) -> Value:
    """Return ``self_weight * x + sum_j neighbor_weights[j] * buffer_j`` (ascending ``j``).

    Default weights: the topology's, as :func:`neighbor_allreduce` uses (give both or
    neither). The result is written into the registered ``x``, which is returned, unless
    ``clone`` (then ``x`` is left alone and a new array returned); half precision is
    computed in float32 and rounded once. ``reset`` zeroes the buffers that were read. The
    versions of the buffers read go back to 0. ``require_mutex`` holds this agent's own
    mutex, so no neighbor writes meanwhile.
    """
    return run()(name, self_weight, neighbor_weights, reset, clone, require_mutex)


@public_op(
    "WIN_UPDATE_THEN_COLLECT", route=lambda world: world.windows.win_update_then_collect, twin=None
)
def win_update_then_collect(run: Runner[Value], name: str, require_mutex: bool = True) -> Value:
    """Add every buffer to ``x`` and zero the buffers, atomically under the own mutex.

    ``win_update(name, 1, {j: 1 for every in-neighbor j}, reset=True)``: with
    :func:`win_accumulate` this moves mass without losing or duplicating any (push-sum).
    """
    return run()(name, require_mutex)


def win_mutex(
    name: str, for_self: bool = False, ranks: Sequence[int] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """Context manager holding the window mutexes of ``ranks`` (default: out-neighbors).

    With ``for_self`` it holds this agent's own mutex instead. Mutexes are taken in
    ascending rank order, so two agents locking overlapping sets cannot deadlock. A wait
    for a mutex another agent holds is under the stall guard: after
    ``FOGSIM_STALL_TIMEOUT`` seconds it raises :class:`fogsim.StallError` naming the holder.
    """
    windows = _backend().windows
    mutexes: contextlib.AbstractContextManager[Any] = windows.win_mutex(name, for_self, ranks)
    return mutexes


def get_win_version(name: str) -> PerAgent:
    """Return ``{in-neighbor: number of writes to its buffer since the last win_update}``.

    Puts and accumulates by the neighbor and gets by this agent count; in simulation a
    list of n dicts.
    """
    return _backend().windows.get_win_version(name)


def win_associated_p(name: str) -> PerAgent:
    """Return the push-sum weight ``p`` carried by the window (per agent in simulation).

    ``p`` starts at 1 and the neighbour buffers' ``p`` at 0, with or without ``zero_init``
    (as in BlueFog: a neighbour's ``p`` counts only once something was put or accumulated);
    while :func:`set_win_ops_with_associated_p` is on, every window op applies to ``p`` what
    it applies to ``x`` (scaled, sent, accumulated, combined).
    """
    return _backend().windows.win_associated_p(name)


def set_win_ops_with_associated_p(enabled: bool) -> None:
    """Switch whether window ops also carry the push-sum weight ``p`` (default off)."""
    _backend().windows.set_win_ops_with_associated_p(enabled)


def win_wait(handle: Handle) -> Any:
    """Block until the window op behind ``handle`` finishes; return its result (True)."""
    return wait(handle)


def win_poll(handle: Handle) -> bool:
    """Return whether :func:`win_wait` on ``handle`` would return without blocking."""
    return poll(handle)


def set_asynchrony(
    activation: str = "all",
    *,
    p_active: float = 0.5,
    speeds: Sequence[float] | np.ndarray | None = None,
    max_delay: int = 0,
    loss: float = 0.0,
    seed: int | None = None,
) -> None:
    """Choose how the simulator models asynchrony in window ops (reproducible from ``seed``).

    Time advances in rounds; a round ends at each :func:`win_update` (or
    :func:`win_update_then_collect`). In each round only the active agents do their window
    ops (the others' values, buffers and versions stay as they are):

    * ``activation="all"``: every agent, every round (lock-step: the same numbers as an
      MPI run with a barrier after every window op);
    * ``"one"``: one agent drawn uniformly per round (randomized gossip);
    * ``"bernoulli"``: each agent independently with probability ``p_active``;
    * ``"speeds"``: agent i with probability ``speeds[i] / max(speeds)`` (stragglers are
      the slow ones).
    * ``"clock"``: the agents whose virtual clocks are the earliest (the first to finish
      the computation charged with :func:`fogsim.clock.compute`); needs a running
      :mod:`fogsim.clock`. Agents then act at the rate their speeds allow.

    Each message of put, accumulate or get arrives ``d`` rounds late, ``d`` uniform in
    ``0..max_delay`` (bounded staleness), and is lost with probability ``loss`` (then mass
    is no longer conserved). All windows share one clock. :func:`barrier` delivers
    everything in flight and makes every agent active until the round ends, as agents
    leave a barrier together (so ``barrier(); win_update_then_collect(name)`` collects
    everything, as under MPI). While a :mod:`fogsim.clock` runs, messages take virtual time
    on its network instead of rounds (``max_delay`` must be 0; ``loss`` still applies), and
    each agent's window ops see what has landed by its clock. Under MPI the processes are
    really asynchronous and this call only checks its arguments.
    """
    ctx = _context.current()  # without a seed, the world's (init(seed=...)), if it has one
    ctx.backend.set_asynchrony(
        activation,
        p_active=p_active,
        speeds=speeds,
        max_delay=max_delay,
        loss=loss,
        seed=ctx.seed if seed is None else seed,
    )
