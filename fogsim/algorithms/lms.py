"""Diffusion LMS: agents track a moving linear target from streaming noisy measurements."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ._result import Result
from ._util import Agents, History, Mixer, check_form, check_iters, check_step, show, steps

if TYPE_CHECKING:
    from fogsim._types import ArrayLike, TopologyLike

__all__ = ["MovingTarget", "diffusion_lms"]

#: One time step's data: regressors ``u``, measurements ``d`` and the target (or None).
_Sample = tuple[np.ndarray, np.ndarray, np.ndarray | None]


def diffusion_lms(
    stream: Callable[[int], tuple[Any, ...]],
    mu: float,
    iters: int,
    x0: ArrayLike | None = None,
    schedule: TopologyLike | Iterator[Any] | None = None,
    form: str = "atc",
    progress: bool = False,
) -> Result:
    """Run diffusion LMS (Cattivelli and Sayed, 2010) on streaming data.

    At time ``k`` agent i observes regressors ``u_{i,k}`` (rows ``u_{i,k,r}``) and
    measurements ``d_{i,k,r} = u_{i,k,r}^T w_k + noise`` of a target ``w_k`` that may move,
    and updates its estimate ``x_i``:

    * ``form="atc"`` (adapt then combine):
      ``psi_i = x_i + mu sum_r u_{i,k,r} (d_{i,k,r} - u_{i,k,r}^T x_i)``, ``x <- W psi``;
    * ``form="cta"`` (combine then adapt):
      ``phi = W x``, ``x_i <- phi_i + mu sum_r u_{i,k,r} (d_{i,k,r} - u_{i,k,r}^T phi_i)``.

    One ``neighbor_allreduce`` per step. With ``W = I`` it is every agent's own LMS;
    cooperation lowers the steady-state mean-square deviation by up to a factor ``n``.

    Parameters
    ----------
    stream : callable
        ``stream(k)``, called once for ``k = 0, 1, ..., iters - 1`` in this order and on
        every agent, returns ``(u, d)`` or ``(u, d, target)``: this agent's regressors ``u``
        of shape ``(m, dim)`` (or ``(dim,)`` for one), its measurements ``d`` of shape
        ``(m,)`` (or ``()``), all stacked over the agents in simulation, and optionally the
        true ``w_k`` (shape ``(dim,)``, the same for every agent) for the ``"distance"``
        metric. :class:`MovingTarget` is such a stream.
    mu : float
        The step size (``0 < mu < 2 / (m * E||u||^2)`` for stability; small in practice).
    iters : int
        Number of time steps (measurements used).
    x0 : array, optional
        Agent-local start (default zeros).
    schedule : optional
        The weights (None: the current topology; a matrix; an iterator of them).
    form : {"atc", "cta"}
    progress : bool
        Show a tqdm progress bar (main process only).

    Returns
    -------
    Result
        ``history["distance"][k]`` is ``sqrt(mean_i ||x_i - w||^2)`` after the update with
        ``stream(k - 1)``, against that step's target (index 0: the start against the first
        target); the network mean-square deviation is its square. ``"consensus_error"`` as
        for the other methods.
    """
    if not callable(stream):
        raise TypeError(f"stream must be a function of the time step, got {type(stream).__name__}")
    a = check_step(mu, "mu")
    form = check_form(form, ("atc", "cta"))
    iters = check_iters(iters)
    agents = Agents()
    mixer = Mixer(schedule, agents)
    data = _sample(stream, 0, agents, None) if iters else None
    if x0 is None:
        if data is None:
            raise ValueError("x0 is required when iters is 0")
        x = np.zeros((*agents.lead, data[0].shape[-1]))
    else:
        x = agents.array(x0, "x0").copy()
    if data is not None and (x.ndim != len(agents.lead) + 1 or x.shape[-1] != data[0].shape[-1]):
        raise ValueError(
            f"x0 has agent-local shape {agents.local_shape(x)}, the regressors have "
            f"{data[0].shape[-1]} columns"
        )
    history = History(agents, iters)
    history.add(0, history.metrics(x, data[2] if data else None))
    bar = steps(iters, progress, "diffusion LMS")
    for k in bar:
        assert data is not None  # the loop runs only when iters > 0, and then data was sampled
        u, d, target = data
        if form == "atc":
            x = mixer.combine(x + a * _correction(u, d, x), mixer.next())
        else:
            x = mixer.combine(x, mixer.next())
            x = x + a * _correction(u, d, x)
        values = history.metrics(x, target)
        history.add(k, values)
        show(bar, k, iters, values)
        if k < iters:
            data = _sample(stream, k, agents, x.shape[-1])
    return Result(x, history.arrays)


def _correction(u: np.ndarray, d: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Return ``sum_r u_r (d_r - u_r^T x)`` per agent (batched)."""
    error = d - np.einsum("...rj,...j->...r", u, x)
    correction: np.ndarray = np.einsum("...rj,...r->...j", u, error)
    return correction


def _sample(
    stream: Callable[[int], tuple[Any, ...]], k: int, agents: Agents, dim: int | None
) -> _Sample:
    out = stream(k)
    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise TypeError(f"stream({k}) must return (u, d) or (u, d, target), got {out!r:.80}")
    u = agents.array(out[0], f"stream({k}) regressors u")
    d = agents.array(out[1], f"stream({k}) measurements d")
    lead = len(agents.lead)
    if u.ndim == lead + 1:  # one regressor per agent
        u, d = u[..., None, :], d[..., None]
    if u.ndim != lead + 2 or d.shape != u.shape[:-1]:
        raise ValueError(
            f"stream({k}) must give u of agent-local shape (m, dim) or (dim,) and d of shape "
            f"(m,) or (); got u {agents.local_shape(u)} and d {agents.local_shape(d)}"
        )
    if dim is not None and u.shape[-1] != dim:
        raise ValueError(f"stream({k}) regressors have {u.shape[-1]} columns, not {dim}")
    target = None
    if len(out) == 3 and out[2] is not None:
        target = np.asarray(out[2], dtype=np.float64)
    return u, d, target


class MovingTarget:
    """A stream for :func:`diffusion_lms`: noisy linear measurements of a moving target.

    The target moves smoothly and periodically,
    ``w_k = center + amplitude * sin(2 pi k / period + phase)`` (per component), and agent i
    observes ``batch`` regressors ``u ~ N(0, s_i^2 I)`` with ``d = u^T w_k + sigma_i v``,
    ``v ~ N(0, 1)``; the agents differ in ``s_i`` (uniform in [0.5, 1.5]) and in ``sigma_i``
    (``noise`` times uniform in [0.5, 1.5]). ``period=inf`` keeps the target still.

    ``stream(k)`` returns ``(u, d, w_k)``: ``u`` agent-local ``(batch, dim)``, ``d``
    ``(batch,)`` (stacked in simulation), ``w_k`` ``(dim,)``. Step ``k``'s data come from
    ``SeedSequence(seed, spawn_key=(k,))``, drawn for all agents at once (every rank draws
    every agent's and keeps its own row; a sharded process keeps its block's rows), so
    simulation, sharded simulation and MPI see the same numbers.
    """

    def __init__(
        self,
        dim: int,
        batch: int = 1,
        noise: float = 0.1,
        amplitude: float = 1.0,
        period: float = 1000.0,
        seed: int = 0,
    ) -> None:
        for name, value in (("dim", dim), ("batch", batch)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, amount in (("noise", noise), ("amplitude", amplitude)):
            if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or not amount >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {amount!r}")
        if isinstance(period, bool) or not isinstance(period, numbers.Real) or not period > 0:
            raise ValueError(f"period must be a number > 0 (inf: a still target), got {period!r}")
        agents = Agents()
        self.dim: int = int(dim)
        self.batch: int = int(batch)
        self.period: float = period
        self.amplitude: float = amplitude
        self._seed: int = seed
        # every agent's data are drawn (one stream for all), each process keeps its rows
        self._rows: slice | int = (
            slice(agents.first, agents.first + agents.rows) if agents.stacked else agents.first
        )
        self._n: int = agents.n
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        self.center: np.ndarray = rng.standard_normal(self.dim)
        self.phase: np.ndarray = rng.uniform(0.0, 2.0 * np.pi, self.dim)
        self.scales: np.ndarray = rng.uniform(0.5, 1.5, self._n)
        self.noise: np.ndarray = noise * rng.uniform(0.5, 1.5, self._n)

    def target(self, k: int) -> np.ndarray:
        """Return ``w_k``."""
        angle = 2.0 * np.pi * k / self.period + self.phase
        target: np.ndarray = self.center + self.amplitude * np.sin(angle)
        return target

    def __call__(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(np.random.SeedSequence(self._seed, spawn_key=(int(k),)))
        U = rng.standard_normal((self._n, self.batch, self.dim)) * self.scales[:, None, None]
        V = rng.standard_normal((self._n, self.batch)) * self.noise[:, None]
        w = self.target(k)
        D = U @ w + V
        return U[self._rows], D[self._rows], w
