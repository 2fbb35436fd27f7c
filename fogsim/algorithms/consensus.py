"""Average consensus: neighbor averaging on static or dynamic graphs, and push-sum on digraphs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

import fogsim as fs

from ._result import Result
from ._util import Agents, History, Mixer, check_iters, push_weights, show, steps

if TYPE_CHECKING:
    from fogsim._types import ArrayLike, TopologyLike

__all__ = ["consensus", "push_sum", "push_sum_estimate", "push_weights"]


def consensus(
    x0: ArrayLike,
    iters: int,
    schedule: TopologyLike | Iterator[Any] | None = None,
    progress: bool = False,
) -> Result:
    """Run average consensus: every agent repeatedly averages with its in-neighbors.

    ``x_{k+1} = W_k x_k``, i.e. ``x_i <- sum_j w_ij x_j`` (one ``neighbor_allreduce``).

    With doubly stochastic ``W_k`` the average ``xbar = (1/n) sum_i x_i`` is preserved and
    every ``x_i`` tends to it; a static ``W`` contracts the disagreement by
    ``rho(W) = ||W - 11^T/n||_2`` per step (:func:`fogsim.topology.rho`).

    Parameters
    ----------
    x0 : array
        The agent-local starting values (stacked ``(n, ...)`` in simulation).
    iters : int
        Number of averaging steps.
    schedule : optional
        The weights: None uses the current topology exactly as ``fs.neighbor_allreduce(x)``
        does; one weight matrix (``Topology``, array, scipy.sparse, networkx graph) is used
        every step; an iterator (a :mod:`fogsim.topology` schedule such as
        ``one_peer_exponential_two(n)``, or any iterator of matrices) gives ``W_k`` step by
        step, passed as ``src_weights=next(schedule).weights``.
    progress : bool
        Show a tqdm progress bar (main process only).

    Returns
    -------
    Result
        ``x`` the final values; ``history["consensus_error"]`` is
        ``sqrt(mean_i ||x_i - mean_j x_j||^2)`` (disagreement) and ``history["distance"]``
        ``sqrt(mean_i ||x_i - xbar_0||^2)`` with ``xbar_0`` the initial average (the two
        coincide when ``W`` is doubly stochastic).
    """
    iters = check_iters(iters)
    agents = Agents()
    x = agents.array(x0, "x0").copy()
    mixer = Mixer(schedule, agents)
    target = fs.allreduce(x)
    history = History(agents, iters)
    history.add(0, history.metrics(x, target))
    bar = steps(iters, progress, "consensus")
    for k in bar:
        x = mixer.combine(x, mixer.next())
        values = history.metrics(x, target)
        history.add(k, values)
        show(bar, k, iters, values)
    return Result(x, history.arrays)


def push_sum(
    x0: ArrayLike,
    iters: int,
    topology_or_schedule: TopologyLike | Iterator[Any] | None = None,
    progress: bool = False,
) -> Result:
    """Run push-sum (ratio consensus), which averages exactly on directed graphs.

    Every agent keeps a value ``z_i`` (``z_0 = x_0``) and a weight ``p_i`` (``p_0 = 1``) and
    pushes shares of both with column-stochastic weights ``C_k`` (``sum_i c_ij = 1``):

        ``z_{k+1} = C_k z_k``,  ``p_{k+1} = C_k p_k``,  ``x_{k+1} = z_{k+1} / p_{k+1}``.

    Column sums of 1 conserve ``sum_i z_i`` and ``sum_i p_i = n``, so on a strongly
    connected graph every ratio ``x_i`` tends to the average of ``x_0`` even though ``C_k``
    is not row-stochastic (where plain averaging ``x <- C x`` would not agree, and
    ``x <- R x`` with row-stochastic ``R`` agrees on a weighted average). ``z`` and ``p``
    travel in one ``neighbor_allreduce`` per step, with ``C_k`` as a weight matrix. The
    ratio is read by :func:`push_sum_estimate`, which holds an agent's estimate while its
    ``p`` is too small to divide by (an agent that sends for long stretches of a schedule
    and receives nothing; never on a static strongly connected graph).

    Parameters
    ----------
    x0 : array
        The agent-local starting values (stacked ``(n, ...)`` in simulation).
    iters : int
        Number of steps.
    topology_or_schedule : optional
        None: the current topology, with its weights if it was set weighted (they must be
        column-stochastic), else every agent keeps and sends equal shares
        ``1/(out-degree + 1)`` (:func:`push_weights`). A weight matrix is used every step;
        an iterator gives ``C_k`` step by step (``DynamicStep`` or matrices). Every matrix
        must be column-stochastic, else ``ValueError``.
    progress : bool
        Show a tqdm progress bar (main process only).

    Returns
    -------
    Result
        ``x`` the estimates ``z / p``; ``state`` holds ``"z"`` and ``"p"``; ``history`` has
        ``"consensus_error"`` (spread of the estimates) and ``"distance"`` (to the true
        average of ``x0``).
    """
    iters = check_iters(iters)
    agents = Agents()
    x = agents.array(x0, "x0").astype(np.float64)
    shape = x.shape
    mixer = Mixer(topology_or_schedule, agents, push=True, argname="topology_or_schedule")
    target = fs.allreduce(x)
    packed = np.concatenate([agents.flat(x), np.ones((*agents.lead, 1))], axis=-1)
    history = History(agents, iters)
    history.add(0, history.metrics(x, target))
    bar = steps(iters, progress, "push-sum")
    held = agents.flat(x)
    for k in bar:
        packed = mixer.combine(packed, mixer.next())
        held = push_sum_estimate(packed[..., :-1], packed[..., -1], held)
        x = held.reshape(shape)
        values = history.metrics(x, target)
        history.add(k, values)
        show(bar, k, iters, values)
    z = packed[..., :-1].reshape(shape)
    return Result(x, history.arrays, {"z": z, "p": packed[..., -1].copy()})


def push_sum_estimate(x: npt.ArrayLike, p: npt.ArrayLike, previous: npt.ArrayLike) -> np.ndarray:
    """Return push-sum's estimate ``x / p`` where ``p`` is not tiny, else ``previous``.

    ``z_i <- x_i / p_i`` if ``p_i >= sqrt(tiny)``, else ``z_i`` unchanged, with ``tiny``
    the smallest normal number of ``x``'s dtype (``sqrt(tiny)`` is about 1.5e-154 for
    float64, 1.1e-19 for float32, 2**-7 for float16).

    An agent that runs far ahead of its in-neighbors (asynchronous push-sum under load)
    keeps giving shares of ``x`` and ``p`` away while nothing arrives, so both shrink
    geometrically, by ``1/(d+1)`` a step, and underflow: ``x`` loses digits once it is
    subnormal and ``x / p`` becomes ``0 / 0 = nan``. Meanwhile its ratio does not change
    (``x`` and ``p`` are scaled alike), so holding the estimate read while ``p`` was larger
    loses nothing, and the estimate moves again as soon as a neighbor's share arrives.
    Above the threshold ``x = p z`` is a normal number for every ``|z| >= sqrt(tiny)``
    (smaller ``|z|`` are off by at most ``sqrt(tiny) * eps``), so the estimate is as exact
    as ``x / p`` itself. Mass is untouched: ``x`` and ``p`` are only read.

    Parameters
    ----------
    x : array
        The push-sum numerator (stacked ``(n, ...)`` in simulation, this agent's value
        distributed): a window's value, or ``z`` of a synchronous push-sum.
    p : array or float
        The push-sum weight (:func:`fogsim.win_associated_p`): ``(n,)`` in simulation, a
        float distributed.
    previous : array
        The estimate to hold where ``p`` is tiny, of ``x``'s shape (or broadcastable to
        it): the last estimate, and at the start ``x`` itself (``p`` starts at 1).

    Returns
    -------
    numpy.ndarray
        The estimate, of ``x``'s shape and of the dtype of ``x / p``; finite wherever
        ``x`` and ``previous`` are.
    """
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"push_sum_estimate: x must hold floats, got dtype {x.dtype}")
    p = np.asarray(p, dtype=np.float64)
    if p.ndim > x.ndim or x.shape[: p.ndim] != p.shape:
        raise ValueError(
            f"push_sum_estimate: p has shape {p.shape}; expected one weight per agent, "
            f"the leading axes of x's shape {x.shape}"
        )
    p = p.reshape(p.shape + (1,) * (x.ndim - p.ndim))  # one p for each agent's whole x
    # x = p z is a normal number (full precision) for |z| >= sqrt(tiny) while p >= sqrt(tiny)
    fresh = np.broadcast_to(p >= np.sqrt(np.finfo(x.dtype).tiny), x.shape)
    try:
        held = np.broadcast_to(previous, x.shape)
    except ValueError:
        raise ValueError(
            f"push_sum_estimate: previous has shape {np.shape(previous)}; expected x's shape "
            f"{x.shape}"
        ) from None
    out = np.array(held, dtype=np.result_type(x, p))
    np.divide(x, p, out=out, where=fresh)
    return out
