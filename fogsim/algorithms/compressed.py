"""Compressed communication: CHOCO-gossip for average consensus and CHOCO-SGD.

Koloskova, Stich and Jaggi, "Decentralized Stochastic Optimization and Gossip Algorithms
with Compressed Communication" (ICML 2019), Algorithms 1 and 2, on the static topology's
weights, with :class:`fogsim.compress.CompressedGossip` doing the exchange. Besides the
algorithms' metrics, ``Result.history["bytes"]`` is the cumulative number of bytes each
agent has sent, averaged over the agents (as ``fs.bytes_sent()`` counts them: the packed
payload, ``payload_bytes`` of the compressor times the agent's out-degree per step; index
0 is 0), so ``plt.semilogy(h["bytes"], h["consensus_error"])`` plots error against
communication.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import fogsim as fs

from ..compress._base import Compressor
from ..compress._gossip import CompressedGossip, check_gamma
from ._result import Result
from ._util import Agents, History, check_iters, check_step, show, steps
from .optimization import _Run

if TYPE_CHECKING:
    from fogsim._types import ArrayLike, Problem

__all__ = ["choco_gossip", "choco_sgd"]


def choco_gossip(
    x0: ArrayLike, compressor: Compressor, gamma: float, iters: int, progress: bool = False
) -> Result:
    """Run CHOCO-gossip: average consensus sending compressed differences only.

    Per step, on agent i (``x_hat_i`` its neighbors' copy of it, zero at the start)::

        q_i = C(x_i - x_hat_i);  x_hat_j += q_j for j = i and its in-neighbors
        x_i += gamma sum_j w_ij (x_hat_j - x_hat_i)

    With doubly stochastic ``W`` the average is preserved and, for ``gamma`` up to the
    paper's bound ``gamma* = gap^2 omega / (16 gap + gap^2 + 4 beta^2 + 2 gap beta^2 -
    8 gap omega)`` (``gap = 1 - |lambda_2(W)|``, ``beta = ||I - W||_2``, ``omega`` the
    compressor's quality: ``||C(x) - x||^2 <= (1 - omega) ||x||^2``, ``k/d`` for top-k),
    the error falls linearly, at least by ``1 - gap^2 omega / 82`` per step (Theorem 2);
    in practice much larger ``gamma`` converge too.

    Parameters
    ----------
    x0 : array
        The agent-local starting values (stacked ``(n, ...)`` in simulation).
    compressor : fogsim.compress.Compressor
        E.g. ``fogsim.compress.top_k(0.01)``; randomized ones draw from ``fs.rng()``.
    gamma : float
        The consensus step size, in (0, 1].
    iters : int
        Number of steps.
    progress : bool
        Show a tqdm progress bar (main process only).

    Returns
    -------
    Result
        ``x`` the final values; ``history`` has ``"consensus_error"``, ``"distance"`` (to
        the initial average) and ``"bytes"``; ``state`` holds ``"x_hat"`` (flat, float64)
        and ``"bytes_sent"`` (each agent's cumulative bytes).
    """
    iters = check_iters(iters)
    gamma = check_gamma(gamma)
    agents = Agents()
    x = agents.array(x0, "x0").copy()
    gossip = CompressedGossip(compressor, gamma)
    target = fs.allreduce(x)
    history = History(agents, iters)
    history.add(0, history.metrics(x, target))
    bar = steps(iters, progress, "CHOCO-gossip")
    for k in bar:
        x = gossip.step(x)
        values = history.metrics(x, target)
        history.add(k, values)
        show(bar, k, iters, values)
    return Result(x, history.arrays, {"x_hat": gossip.x_hat, "bytes_sent": gossip.bytes_sent})


def choco_sgd(
    problem: Problem,
    compressor: Compressor,
    gamma: float,
    lr: float | Callable[[int], float],
    iters: int,
    x0: ArrayLike | None = None,
    x_star: ArrayLike | None = None,
    progress: bool = False,
) -> Result:
    """Run CHOCO-SGD: a local (stochastic) gradient step, then one CHOCO-gossip step.

    ``x_i^{k+1/2} = x_i^k - lr_k g_i(x_i^k)``, then ``q_i = C(x_i^{k+1/2} - x_hat_i)``,
    ``x_hat_j += q_j`` and ``x_i^{k+1} = x_i^{k+1/2} + gamma sum_j w_ij (x_hat_j -
    x_hat_i)`` (Koloskova et al. 2019, Algorithm 2), on the static topology's weights.
    ``g_i`` is the problem's gradient oracle (stochastic if it draws, e.g. from
    ``fs.rng()``). As for DGD, a constant ``lr`` leaves an ``O(lr)`` bias; the paper's
    rate takes ``lr_k = a / (k + b)``.

    Parameters
    ----------
    problem : object with ``grad(x)``, or a function
        The agent-local gradient oracle (see :func:`fogsim.algorithms.dgd`).
    compressor : fogsim.compress.Compressor
    gamma : float
        The consensus step size, in (0, 1].
    lr : float or callable
        The learning rate, or a function of the iteration ``k = 0, 1, ...`` giving it.
    iters : int
    x0 : array, optional
        The agent-local start (default zeros of ``problem.dim``).
    x_star : array, optional
        The optimum for ``"distance"`` (default ``problem.solution()`` if it exists).
    progress : bool

    Returns
    -------
    Result
        ``history`` has ``"consensus_error"``, ``"grad_norm"``, ``"distance"`` (when the
        optimum is known) and ``"bytes"``; ``state`` as for :func:`choco_gossip`.
    """
    gamma = check_gamma(gamma)
    step_of = _lr_rule(lr)
    run = _Run(problem, iters, x0, None, x_star, progress, "CHOCO-SGD")
    gossip = CompressedGossip(compressor, gamma)
    x = run.x0
    run.record(0, x)
    for k in run.bar:
        x = gossip.step(x - step_of(k - 1) * run.gradient(x))
        run.record(k, x)
    return run.result(x, x_hat=gossip.x_hat, bytes_sent=gossip.bytes_sent)


def _lr_rule(lr: Any) -> Callable[[int], float]:
    """Return ``k -> lr_k`` for a constant or a callable learning rate, checking each value."""
    if callable(lr):
        return lambda k: check_step(lr(k), f"lr({k})")
    value = check_step(lr, "lr")
    return lambda k: value
