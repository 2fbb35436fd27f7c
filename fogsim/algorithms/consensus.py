"""Average consensus: neighbor averaging on static or dynamic graphs, and push-sum on digraphs."""

from __future__ import annotations

from typing import Any

import numpy as np

import fogsim as fs

from ._result import Result
from ._util import Agents, History, Mixer, check_iters, push_weights, show, steps

__all__ = ["consensus", "push_sum", "push_weights"]


def consensus(x0: Any, iters: int, schedule: Any = None, progress: bool = False) -> Result:
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
    x0: Any, iters: int, topology_or_schedule: Any = None, progress: bool = False
) -> Result:
    """Run push-sum (ratio consensus), which averages exactly on directed graphs.

    Every agent keeps a value ``z_i`` (``z_0 = x_0``) and a weight ``p_i`` (``p_0 = 1``) and
    pushes shares of both with column-stochastic weights ``C_k`` (``sum_i c_ij = 1``):

        ``z_{k+1} = C_k z_k``,  ``p_{k+1} = C_k p_k``,  ``x_{k+1} = z_{k+1} / p_{k+1}``.

    Column sums of 1 conserve ``sum_i z_i`` and ``sum_i p_i = n``, so on a strongly
    connected graph every ratio ``x_i`` tends to the average of ``x_0`` even though ``C_k``
    is not row-stochastic (where plain averaging ``x <- C x`` would not agree, and
    ``x <- R x`` with row-stochastic ``R`` agrees on a weighted average). ``z`` and ``p``
    travel in one ``neighbor_allreduce`` per step, with ``C_k`` as a weight matrix.

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
    for k in bar:
        packed = mixer.combine(packed, mixer.next())
        x = (packed[..., :-1] / packed[..., -1:]).reshape(shape)
        values = history.metrics(x, target)
        history.add(k, values)
        show(bar, k, iters, values)
    z = packed[..., :-1].reshape(shape)
    return Result(x, history.arrays, {"z": z, "p": packed[..., -1].copy()})
