"""Decentralized optimization of ``f(x) = sum_i f_i(x)``: DGD, exact diffusion, gradient
tracking and push-DIGing.

Agent i knows only its own gradient ``grad f_i`` (the ``problem``'s ``grad(x)``, agent-local)
and talks to its neighbors through ``neighbor_allreduce``. Below, ``x_k`` stacks the agents'
iterates and ``W`` is the step's weight matrix (the current topology, one matrix, or a
schedule; see :func:`fogsim.algorithms.consensus`).

Every function returns a :class:`~fogsim.algorithms.Result` whose ``history`` holds, per
iteration (index 0: the start), ``"consensus_error"`` ``sqrt(mean_i ||x_i - xbar||^2)``,
``"grad_norm"`` ``||(1/n) sum_i grad f_i(xbar)||`` and, when the optimum is known
(``x_star``, or the problem's ``solution()``), ``"distance"`` ``sqrt(mean_i ||x_i - x*||^2)``,
and ``"bytes"``, each agent's cumulative bytes sent, averaged over the agents.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

import fogsim as fs

from ._result import Result
from ._util import (
    Agents,
    History,
    Mixer,
    batch_of,
    check_form,
    check_iters,
    check_step,
    grad_of,
    initial_point,
    optimum,
    show,
    steps,
)

if TYPE_CHECKING:
    from fogsim._types import ArrayLike, Problem, TopologyLike

__all__ = ["dgd", "exact_diffusion", "gradient_tracking", "push_diging"]


class _Run:
    """The parts every optimization run shares: checks, start, weights, metrics, progress."""

    def __init__(
        self,
        problem: Problem,
        iters: int,
        x0: Any,
        schedule: Any,
        x_star: Any,
        progress: bool,
        name: str,
        push: bool = False,
    ) -> None:
        self.iters = check_iters(iters)
        self.grad = grad_of(problem)
        self.agents = Agents()
        self.x0 = initial_point(problem, x0, self.agents)
        self.mixer = Mixer(schedule, self.agents, push=push)
        self.x_star = optimum(problem, x_star, self.agents)
        shape = self.x0.shape
        if self.x_star is not None and _broadcast(self.x_star.shape, shape) != shape:
            raise ValueError(
                f"x_star of shape {self.x_star.shape} does not match the iterates' shape "
                f"{self.x0.shape}"
            )
        self.history = History(self.agents, self.iters, batch_of(problem))
        self.bar = steps(self.iters, progress, name)

    def gradient(self, x: np.ndarray) -> np.ndarray:
        g = np.asarray(self.grad(x), dtype=np.float64)
        if g.shape != x.shape:
            raise ValueError(f"problem.grad returned shape {g.shape} for x of shape {x.shape}")
        return g

    def record(self, k: int, x: np.ndarray) -> None:
        values = self.history.metrics(x, self.x_star, self.grad)
        self.history.add(k, values)
        if k:
            show(self.bar, k, self.iters, values)

    def result(self, x: np.ndarray, **state: Any) -> Result:
        return Result(x, self.history.arrays, state)


def dgd(
    problem: Problem,
    alpha: float | Callable[[int], float],
    iters: int,
    form: str = "atc",
    x0: ArrayLike | None = None,
    schedule: TopologyLike | Iterator[Any] | None = None,
    x_star: ArrayLike | None = None,
    progress: bool = False,
    communicate_every: int = 1,
    global_average_every: int | None = None,
) -> Result:
    """Run decentralized gradient descent.

    * ``form="atc"`` (adapt then combine; the BlueFog paper's Listing 1):
      ``x_{k+1} = W (x_k - alpha grad f(x_k))``;
    * ``form="awc"`` (adapt while combine; the classic DGD of Nedic and Ozdaglar):
      ``x_{k+1} = W x_k - alpha grad f(x_k)``; the ``neighbor_allreduce`` of ``x_k`` is
      started nonblocking and overlaps the gradient computation.

    With a constant step size DGD converges (for small ``alpha``) to a fixed point that is
    not the optimum: for AWC it solves ``(I - W) x + alpha grad f(x) = 0``, for ATC
    ``(I - W) x + alpha W grad f(x) = 0``; its distance to ``x*`` is ``O(alpha)``. A
    diminishing step size ``alpha(k)`` removes the bias.

    Parameters
    ----------
    problem : object with ``grad(x)``, or a function
        The agent-local gradient oracle ``x_i -> grad f_i(x_i)`` (batch-friendly in
        simulation: it gets the stacked iterates). A ``dim`` attribute lets ``x0`` default
        to zeros; a ``solution()`` method supplies ``x*`` for ``"distance"``.
    alpha : float or callable
        The step size, or a function of the iteration ``k = 0, 1, ...`` giving it.
    iters : int
        Number of iterations.
    form : {"atc", "awc"}
    x0 : array, optional
        The agent-local start (default zeros of ``problem.dim``).
    schedule : optional
        The weights (None: the current topology; a matrix; an iterator of them).
    x_star : array, optional
        The optimum for ``"distance"`` (default ``problem.solution()`` if it exists).
    progress : bool
        Show a tqdm progress bar (main process only).
    communicate_every : int
        ``H``: local SGD. Iterations ``k`` that ``H`` does not divide take the local step
        ``x_{k+1} = x_k - alpha grad f(x_k)`` only; the others communicate as ``form``
        says (the schedule moves on at communicating iterations only).
    global_average_every : int, optional
        ``K``: periodic global averaging (Gossip-PGA, Chen et al. 2021). Every ``K``-th
        communicating iteration averages over all agents (``allreduce``) instead of
        mixing with ``W``. ``history["bytes"]`` counts neighbor ops only (as
        ``fs.bytes_sent()``): the global averages add nothing to it, local steps neither.
    """
    form = check_form(form, ("atc", "awc"))
    step_of = _step_rule(alpha)
    every = _positive(communicate_every, "communicate_every")
    pga = (
        None
        if global_average_every is None
        else _positive(global_average_every, "global_average_every")
    )
    run = _Run(problem, iters, x0, schedule, x_star, progress, f"DGD ({form})")
    x = run.x0
    run.record(0, x)
    for k in run.bar:
        a = step_of(k - 1)
        if k % every:  # a local step
            x = x - a * run.gradient(x)
        elif pga is not None and (k // every) % pga == 0:  # a global average
            if form == "atc":
                x = fs.allreduce(x - a * run.gradient(x))
            else:
                handle = fs.allreduce_nonblocking(x)
                g = run.gradient(x)
                x = fs.wait(handle) - a * g
        elif form == "atc":
            x = run.mixer.combine(x - a * run.gradient(x), run.mixer.next())
        else:
            handle = run.mixer.combine_nonblocking(x, run.mixer.next())
            g = run.gradient(x)
            x = fs.wait(handle) - a * g
        run.record(k, x)
    return run.result(x)


def _positive(value: Any, argname: str) -> int:
    """Return ``value`` as an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{argname} must be >= 1, got {value}")
    return int(value)


def exact_diffusion(
    problem: Problem,
    alpha: float,
    iters: int,
    x0: ArrayLike | None = None,
    schedule: TopologyLike | Iterator[Any] | None = None,
    x_star: ArrayLike | None = None,
    progress: bool = False,
) -> Result:
    """Run exact diffusion (Yuan, Ying, Zhao and Sayed, 2019), which removes DGD's bias.

    With ``Wbar = (I + W) / 2`` and ``psi_0 = x_0``:

        ``psi_{k+1} = x_k - alpha grad f(x_k)``          (adapt)
        ``phi_{k+1} = psi_{k+1} + x_k - psi_k``          (correct)
        ``x_{k+1}   = Wbar phi_{k+1}``                   (combine)

    For symmetric doubly stochastic ``W`` and a small enough ``alpha`` (``alpha < 1/L`` is
    safe) every ``x_i`` converges linearly to the exact optimum ``x*`` of
    ``sum_i f_i``. One ``neighbor_allreduce`` per iteration.

    Parameters are those of :func:`dgd` (without ``form``; ``alpha`` a constant).
    ``state["psi"]`` holds the last adapt step.
    """
    a = check_step(alpha, "alpha")
    run = _Run(problem, iters, x0, schedule, x_star, progress, "exact diffusion")
    x = run.x0
    psi = x
    run.record(0, x)
    for k in run.bar:
        psi_next = x - a * run.gradient(x)
        phi = psi_next + x - psi
        x = 0.5 * (phi + run.mixer.combine(phi, run.mixer.next()))
        psi = psi_next
        run.record(k, x)
    return run.result(x, psi=psi)


def gradient_tracking(
    problem: Problem,
    alpha: float,
    iters: int,
    x0: ArrayLike | None = None,
    schedule: TopologyLike | Iterator[Any] | None = None,
    x_star: ArrayLike | None = None,
    progress: bool = False,
) -> Result:
    """Run gradient tracking in adapt-then-combine form (ATC-DIGing; Xu et al., 2015).

    Each agent also tracks the network's average gradient in ``y`` (``y_0 = grad f(x_0)``):

        ``x_{k+1} = W_k (x_k - alpha y_k)``
        ``y_{k+1} = W_k (y_k + grad f(x_{k+1}) - grad f(x_k))``

    With doubly stochastic ``W_k`` the average of ``y`` equals the average gradient at all
    times, so the fixed point is the exact optimum; convergence is linear for strongly
    convex smooth ``f_i`` and small ``alpha``, also over time-varying graphs. Two
    ``neighbor_allreduce`` per iteration, with the same ``W_k``.

    Parameters are those of :func:`dgd` (without ``form``; ``alpha`` a constant).
    ``state["y"]`` holds the gradient tracker.
    """
    a = check_step(alpha, "alpha")
    run = _Run(problem, iters, x0, schedule, x_star, progress, "gradient tracking")
    x = run.x0
    g = run.gradient(x)
    y = g
    run.record(0, x)
    for k in run.bar:
        w = run.mixer.next()
        x = run.mixer.combine(x - a * y, w)
        g_next = run.gradient(x)
        y = run.mixer.combine(y + g_next - g, w)
        g = g_next
        run.record(k, x)
    return run.result(x, y=y)


def push_diging(
    problem: Problem,
    alpha: float,
    iters: int,
    schedule: TopologyLike | Iterator[Any] | None = None,
    x0: ArrayLike | None = None,
    x_star: ArrayLike | None = None,
    progress: bool = False,
) -> Result:
    """Run push-DIGing (Nedic, Olshevsky and Shi, 2017) on time-varying directed graphs.

    Push-sum de-biasing plus gradient tracking with column-stochastic ``C_k``; ``u_0 = x_0``,
    ``v_0 = 1``, ``y_0 = grad f(x_0)``:

        ``u_{k+1} = C_k (u_k - alpha y_k)``
        ``v_{k+1} = C_k v_k``
        ``x_{k+1} = u_{k+1} / v_{k+1}``
        ``y_{k+1} = C_k y_k + grad f(x_{k+1}) - grad f(x_k)``

    Column sums of 1 conserve ``sum_i y_i = sum_i grad f_i(x_i)``, so with a uniformly
    strongly connected sequence and a small ``alpha`` every ``x_i`` converges linearly to
    the exact optimum. ``u``, ``v`` and ``y`` travel in one ``neighbor_allreduce`` per
    iteration, with ``C_k`` as the weight matrix.

    Parameters
    ----------
    schedule : optional
        Column-stochastic weights (checked): None uses the current topology as
        :func:`fogsim.algorithms.push_sum` does; a matrix every step; an iterator of
        ``DynamicStep`` or matrices step by step.

    The other parameters are those of :func:`dgd` (``alpha`` a constant). ``state`` holds
    ``"u"``, ``"v"`` and ``"y"``.
    """
    a = check_step(alpha, "alpha")
    run = _Run(problem, iters, x0, schedule, x_star, progress, "push-DIGing", push=True)
    ag = run.agents
    x = run.x0
    shape = x.shape
    size = ag.flat(x).shape[-1]
    u, v = x, np.ones((*ag.lead, 1))
    g = run.gradient(x)
    y = g
    run.record(0, x)
    for k in run.bar:
        packed = np.concatenate([ag.flat(u - a * y), v, ag.flat(y)], axis=-1)
        packed = run.mixer.combine(packed, run.mixer.next())
        u = packed[..., :size].reshape(shape)
        v = packed[..., size : size + 1]
        x = u / v.reshape(*ag.lead, *(1,) * (len(shape) - len(ag.lead)))
        g_next = run.gradient(x)
        y = packed[..., size + 1 :].reshape(shape) + g_next - g
        g = g_next
        run.record(k, x)
    return run.result(x, u=u, v=v[..., 0].copy(), y=y)


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


def _step_rule(alpha: Any) -> Callable[[int], float]:
    """Return ``k -> alpha_k`` for a constant or a callable step size, checking each value."""
    if callable(alpha):

        def step(k: int) -> float:
            return check_step(alpha(k), f"alpha({k})")

        return step
    a = check_step(alpha, "alpha")
    return lambda k: a
