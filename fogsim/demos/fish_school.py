"""Fish school: diffusion estimation of a predator on a dynamic proximity graph.

``n`` fish swim in the plane. Two fish are neighbors when they are within ``radius`` of each
other, so the communication graph changes at every step. Each step:

1. every fish shares its position and velocity (``fs.global_view``), so every agent builds
   the same proximity graph and its Metropolis-Hastings weights ``W`` (doubly stochastic:
   ``w_ij = 1 / (1 + max(d_i, d_j))`` for neighbors, ``w_ii = 1 - sum_j w_ij``);
2. fish ``i`` measures the predator's distance and direction with noise, which gives it a
   fix ``z_i`` of the predator's position;
3. every fish keeps a small tracker ``s_i = [e_i, w_i]`` (position and velocity estimate of
   the predator) and the school runs one adapt-then-combine diffusion step, the combine
   being ``fs.neighbor_allreduce`` with that step's ``W``:
   ``s_i <- sum_j w_ij track(s_j, z_j)``, where ``track`` predicts ``e + w`` and corrects
   it with ``alpha`` times the miss ``z - (e + w)`` (``alpha = step_size``);
4. each fish steers by its own estimate ``e_i`` (it never sees the true predator): away from
   it (``"escape"``: the school disperses) or around it at ``ring_radius`` (``"encircle"``),
   plus boids-like alignment, cohesion and collision avoidance with its neighbors, and a
   weak pull back to its reef (the disk of radius ``2.5 x`` the school's around the origin).

The same code runs simulated (every agent-local value is stacked, shape ``(n, 2)``) and under
``fogrun -np N`` (one fish per rank, shape ``(2,)``; each rank moves only its own fish).
Fish ``r`` draws its start and its sensor noise from its own generator
``np.random.default_rng([seed, r])``, and the dynamics use only correctly rounded operations
(no sin/cos/exp on agent-local values), so both modes give the same trajectories, bit for bit.

>>> from fogsim.demos import fish_school as fish
>>> run = fish.simulate(n=50, steps=20, mode="encircle", seed=1)
>>> run.positions.shape, run.errors.shape
((21, 50, 2), (21,))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.spatial import cKDTree

import fogsim as fs
from fogsim._rng import StackedGenerator
from fogsim.topology import Topology, as_topology
from fogsim.topology._exact import exact_rows

from ._school_output import SchoolHistory, animate, length, plot_error

__all__ = [
    "MODES",
    "PREDATOR_PATHS",
    "SchoolHistory",
    "animate",
    "metropolis_hastings",
    "plot_error",
    "predator_path",
    "proximity_pairs",
    "simulate",
]

#: How the school reacts to its estimate of the predator.
MODES = ("escape", "encircle")
#: Built-in predator paths (a callable ``step -> (x, y)`` works too).
PREDATOR_PATHS = ("circle", "line", "still")

_TINY = 1e-12  # guards divisions by a length that may be 0


@dataclass(frozen=True)
class _Params:
    """Validated model parameters (see :func:`simulate`)."""

    radius: float
    speed: float
    max_speed: float
    noise: float
    step_size: float
    mode: str
    switch_step: int | None
    school_radius: float
    ring_radius: float
    alarm_radius: float
    reef_radius: float
    align: float = 0.3
    cohere: float = 0.02
    separate: float = 0.5
    react: float = 0.4
    home: float = 0.3


# -- the proximity graph ----------------------------------------------------------------
def proximity_pairs(
    positions: npt.ArrayLike, radius: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the pairs of fish within ``radius``: ``(i, j, distance)`` with ``i < j``.

    A k-d tree finds them in ``O(n log n + pairs)`` (``cKDTree.query_pairs``); the pairs are
    sorted by ``(i, j)`` and ``distance = |p_i - p_j|``.
    """
    points = _points(positions)
    radius = _positive(radius, "radius")
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray").reshape(-1, 2)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))].astype(np.int64)
    i, j = pairs[:, 0], pairs[:, 1]
    return i, j, length(points[i] - points[j])[:, 0]


def metropolis_hastings(n: int, i: np.ndarray, j: np.ndarray) -> Topology:
    """Return the Metropolis-Hastings weights of the undirected graph with edges ``(i, j)``.

    ``w_ij = 1 / (1 + max(d_i, d_j))`` for neighbors, ``w_ii = 1 - sum_j w_ij``: symmetric and
    doubly stochastic, so diffusion keeps the average of the fish's values (rows and columns
    sum to exactly 1.0). Vectorized; the same weights as
    :func:`fogsim.topology.metropolis_hastings_weights`.
    """
    diag = np.arange(n)
    degree = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    w = 1.0 / (1.0 + np.maximum(degree[i], degree[j]))
    self_weight = 1.0 - (np.bincount(i, w, minlength=n) + np.bincount(j, w, minlength=n))
    rows, cols = np.concatenate([i, j, diag]), np.concatenate([j, i, diag])
    order = np.argsort(rows * n + cols, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    data = np.concatenate([w, w, self_weight])[order]
    rows, cols = rows[order], cols[order]
    data = exact_rows(n, rows, data, pivot=rows == cols)  # the self weight takes the rest
    return as_topology(sp.csr_array((data, cols, indptr), shape=(n, n)))


class _Neighborhood:
    """One step's proximity graph: neighbor sums for boids, weights for diffusion."""

    def __init__(self, positions: np.ndarray, params: _Params) -> None:
        n = positions.shape[0]
        i, j, d = proximity_pairs(positions, params.radius)
        self.weights = metropolis_hastings(n, i, j)
        both_i, both_j = np.concatenate([i, j]), np.concatenate([j, i])
        self.adjacency = sp.csr_array((np.ones(2 * i.shape[0]), (both_i, both_j)), (n, n))
        # Collision avoidance pushes with 1/d^2 from neighbors closer than radius / 2.
        near = d < 0.5 * params.radius
        push = np.tile(1.0 / np.maximum(d[near], 0.05 * params.radius) ** 2, 2)
        rows = np.concatenate([i[near], j[near]])
        cols = np.concatenate([j[near], i[near]])
        self.separation = sp.csr_array((push, (rows, cols)), (n, n))

    def rows(self, matrix: sp.csr_array, me: Any) -> sp.csr_array:
        """Return the rows of ``matrix`` of this process's fish (all of them in simulation)."""
        return matrix if np.ndim(me) else matrix[[int(me)]]


# -- the model ----------------------------------------------------------------------------
def predator_path(
    path: str | Callable[[int], Any], steps: int, speed: float = 0.2, size: float = 10.0
) -> np.ndarray:
    """Return the predator's position at steps ``0..steps``, ``(steps + 1, 2)``.

    ``"circle"``: around the origin at radius ``size / 2``; ``"line"``: along the x axis from
    ``(-1.5 size, 0)``; ``"still"``: at the origin; a callable: ``path(k)`` for each step.
    ``speed`` is the distance covered per step, ``size`` the school's radius.
    """
    steps = _count(steps, "steps", minimum=0)
    t = np.arange(steps + 1, dtype=np.float64)
    if callable(path):
        track = np.array([np.asarray(path(k), dtype=np.float64) for k in range(steps + 1)])
        if track.shape != (steps + 1, 2) or not np.isfinite(track).all():
            raise ValueError("a predator path callable must return finite (x, y) for each step")
        return track
    if path == "circle":
        r = 0.5 * size
        return r * np.stack([np.cos(t * speed / r), np.sin(t * speed / r)], axis=1)
    if path == "line":
        return np.stack([-1.5 * size + speed * t, np.zeros_like(t)], axis=1)
    if path == "still":
        return np.zeros((steps + 1, 2))
    raise ValueError(f"predator must be one of {PREDATOR_PATHS} or a callable, got {path!r}")


def simulate(
    n: int | None = None,
    *,
    steps: int = 200,
    radius: float = 2.0,
    speed: float = 0.5,
    max_speed: float = 1.0,
    noise: float = 1.5,
    predator: str | Callable[[int], Any] = "circle",
    predator_speed: float = 0.2,
    mode: str = "escape",
    switch_step: int | None = None,
    ring_radius: float | None = None,
    step_size: float = 0.3,
    seed: int = 0,
    progress: bool = False,
) -> SchoolHistory:
    """Run the school for ``steps`` steps and return its :class:`SchoolHistory`.

    Parameters
    ----------
    n: number of fish. The school runs in the current fogsim world, one fish per agent
        (under ``fogrun -np N`` one per rank), when that world has ``n`` agents or ``n`` is
        None; otherwise in a private simulated world of ``n`` fish.
    steps: number of steps (one unit of time each).
    radius: sensing radius; fish within it are neighbors. The school starts in a disk of
        radius ``radius * sqrt(n / 10)`` (about ten neighbors per fish).
    speed, max_speed: the fish's cruising (minimum) and maximum speed, per step.
    noise: std of the range error and of the sideways error of each fix (length units).
    predator: the predator's path, see :func:`predator_path`; ``predator_speed`` its speed.
    mode: ``"escape"``: each fish swims away from its estimate while it is within twice the
        school's starting radius; ``"encircle"``: each fish is pulled to ``ring_radius`` from
        its estimate and swims around it. ``switch_step``: the step at which the school
        switches to the other mode (None: never). In both modes fish that stray beyond 2.5
        times the starting radius from the origin (their reef) are pulled back.
    ring_radius: the encircling radius (default: the school's starting radius, at least
        ``2 radius``).
    step_size: the trackers' gain ``alpha`` (the velocity gain is ``alpha^2 / (2 - alpha)``):
        larger follows a turning predator better, smaller averages more noise away.
    seed: fish ``r`` draws its start and its noise from ``np.random.default_rng([seed, r])``.
    progress: show a tqdm progress bar (main process only).
    """
    if n is not None:
        n = _count(n, "n", minimum=1)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if switch_step is not None:
        switch_step = _count(switch_step, "switch_step", minimum=0)
    radius = _positive(radius, "radius")
    speed = _positive(speed, "speed")
    max_speed = _positive(max_speed, "max_speed")
    if max_speed < speed:
        raise ValueError(f"max_speed ({max_speed}) must be >= speed ({speed})")
    noise = _positive(noise, "noise", allow_zero=True)
    predator_speed = _positive(predator_speed, "predator_speed", allow_zero=True)
    if not (0.0 < step_size <= 1.0):
        raise ValueError(f"step_size must be in (0, 1], got {step_size}")
    seed = _count(seed, "seed", minimum=0)
    steps = _count(steps, "steps", minimum=0)

    world = fs.is_initialized() and (n is None or fs.size() == n)
    if world:
        size = fs.size()
    else:
        if n is None:
            raise ValueError("give n, or start a fogsim world first (fs.init)")
        if fs.is_initialized() and not np.ndim(fs.rank()):
            raise ValueError(f"n={n} fish but this distributed job has {fs.size()} agents")
        size = n
    school = radius * math.sqrt(size / 10.0)
    ring = max(2.0 * radius, school) if ring_radius is None else ring_radius
    params = _Params(
        radius=radius,
        speed=speed,
        max_speed=max_speed,
        noise=noise,
        step_size=step_size,
        mode=mode,
        switch_step=switch_step,
        school_radius=school,
        ring_radius=_positive(ring, "ring_radius"),
        alarm_radius=2.0 * school,
        reef_radius=2.5 * school,
    )
    track = predator_path(predator, steps, predator_speed, school)
    if world:
        history = _run(params, track, seed, progress)
    else:
        with fs.Context(backend="sim", size=n) as ctx:
            try:
                history = _run(params, track, seed, progress)
            finally:
                ctx.close()
    history.params = {
        **asdict(params),
        "n": size,
        "steps": steps,
        "seed": seed,
        "predator": predator if isinstance(predator, str) else "custom",
        "predator_speed": predator_speed,
    }
    return history


def _run(params: _Params, track: np.ndarray, seed: int, progress: bool) -> SchoolHistory:
    """Run the school in the current world (every rank returns the same history).

    Each step costs one allgather (``fs.global_view``) and one ``fs.neighbor_allreduce``.
    """
    n, me, steps = fs.size(), fs.rank(), track.shape[0] - 1
    gens = fs.local(lambda r: np.random.default_rng([seed, r]))  # fish r's own generator
    if isinstance(gens, list):  # simulated: one StackedGenerator draws for every fish at once
        gens = StackedGenerator(gens)
    start = fs.vmap(lambda g: _start(g, params))(gens)
    p, v = start[..., :2], start[..., 2:]
    P, V, E, A = (np.empty((steps + 1, n, 2)) for _ in range(4))
    central = np.empty((steps + 1, 2))
    modes = [_mode(params, k) for k in range(steps + 1)]
    # trackers [estimate, velocity estimate], all None before step 0
    mine: np.ndarray | None = None
    alone: np.ndarray | None = None
    center: np.ndarray | None = None
    for k in _progress(range(steps + 1), progress):
        z = _measure(p, track[k], gens.standard_normal(2), params.noise)
        # This step's positions, velocities and fixes, and the estimates of the step before
        # (recorded one step late, so that one allgather per step does).
        before = np.zeros_like(start) if mine is None or alone is None else _estimates(mine, alone)
        shared = fs.global_view(np.concatenate([p, v, z, before], axis=-1))
        P[k], V[k], Z = shared[:, 0:2], shared[:, 2:4], shared[:, 4:6]
        if k:
            E[k - 1], A[k - 1] = shared[:, 6:8], shared[:, 8:10]
        hood = _Neighborhood(P[k], params)
        # step 0: every fish has its first fix only, no velocity yet
        if mine is None or alone is None or center is None:
            mine, alone, center = _pad(z), _pad(z), _pad(Z.mean(axis=0))
        else:  # adapt (own tracker), then combine (average with the neighbors)
            mine = fs.neighbor_allreduce(_track(mine, z, params), src_weights=hood.weights)
            alone = _track(alone, z, params)
            center = _track(center, Z.mean(axis=0), params)  # hears every fish
        central[k] = center[:2]
        if k < steps:
            p, v = _move(me, p, v, mine[..., :2], P[k], V[k], hood, params, modes[k])
    assert mine is not None and alone is not None  # the loop ran step 0 at least
    last = fs.global_view(_estimates(mine, alone))
    E[steps], A[steps] = last[:, :2], last[:, 2:]

    def error(estimates: np.ndarray) -> np.ndarray:
        mean: np.ndarray = length(estimates - track[:, None, :])[..., 0].mean(axis=1)
        return mean

    return SchoolHistory(
        positions=P,
        velocities=V,
        estimates=E,
        estimates_alone=A,
        predator=track,
        errors=error(E),
        errors_alone=error(A),
        errors_central=length(central - track)[:, 0],
        modes=modes,
    )


def _start(gen: np.random.Generator, params: _Params) -> np.ndarray:
    """Return one fish's start ``(x, y, vx, vy)``: uniform in the disk, heading +x."""
    u = gen.random(2)
    r, angle = params.school_radius * math.sqrt(u[0]), 2.0 * math.pi * u[1]
    jitter = 0.1 * params.speed * gen.standard_normal(2)
    return np.array([r * math.cos(angle), r * math.sin(angle), params.speed + jitter[0], jitter[1]])


def _measure(p: np.ndarray, q: np.ndarray, eps: np.ndarray, noise: float) -> np.ndarray:
    """Return each fish's fix of the predator at ``q`` from a noisy range and bearing.

    Range ``d + noise eps_0``; direction ``u`` turned by about ``noise eps_1 / d`` radians,
    so the fix is off by ``noise eps_0`` along ``u`` and ``noise eps_1`` across it.
    """
    offset = q - p
    d = length(offset)
    u = offset / np.maximum(d, _TINY)
    across = _perp(u) * (noise * eps[..., 1:2] / np.maximum(d, _TINY))
    seen = u + across
    fix: np.ndarray = p + (d + noise * eps[..., 0:1]) * seen / length(seen)
    return fix


def _estimates(mine: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """Return the position estimates of the diffusion and the lone trackers side by side."""
    return np.concatenate([mine[..., :2], alone[..., :2]], axis=-1)


def _pad(z: np.ndarray) -> np.ndarray:
    """Return the tracker state ``[z, 0]``: estimate ``z``, velocity 0."""
    return np.concatenate([z, np.zeros_like(z)], axis=-1)


def _track(state: np.ndarray, z: np.ndarray, params: _Params) -> np.ndarray:
    """Return the tracker state ``[e, w]`` moved one step ahead, then corrected by the fix z.

    ``e + w`` predicts the predator; the miss ``z - (e + w)`` corrects the estimate with
    ``alpha = step_size`` and the velocity with ``beta = alpha^2 / (2 - alpha)``.
    """
    guess = state[..., :2] + state[..., 2:]
    miss = z - guess
    alpha = params.step_size
    beta = alpha * alpha / (2.0 - alpha)
    return np.concatenate([guess + alpha * miss, state[..., 2:] + beta * miss], axis=-1)


def _mode(params: _Params, k: int) -> str:
    if params.switch_step is None or k < params.switch_step:
        return params.mode
    return MODES[1 - MODES.index(params.mode)]


def _move(
    me: Any,
    p: np.ndarray,
    v: np.ndarray,
    e: np.ndarray,
    P: np.ndarray,  # noqa: N803 - every fish's positions, as in the module docstring
    V: np.ndarray,  # noqa: N803
    hood: _Neighborhood,
    params: _Params,
    mode: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Return this process's fish's next position and velocity (boids + predator reaction).

    Only the rows of ``me`` are computed (one under MPI), from the shared ``P``, ``V``.
    """
    shape = np.shape(p)
    p, v, e = np.reshape(p, (-1, 2)), np.reshape(v, (-1, 2)), np.reshape(e, (-1, 2))
    ones = np.ones((P.shape[0], 1))
    sums = hood.rows(hood.adjacency, me) @ np.concatenate([P, V, ones], axis=1)
    count = np.maximum(sums[:, 4:5], 1.0)
    alone = sums[:, 4:5] == 0
    align = np.where(alone, 0.0, sums[:, 2:4] / count - v)
    cohere = np.where(alone, 0.0, sums[:, 0:2] / count - p)
    near = hood.rows(hood.separation, me) @ np.concatenate([P, ones], axis=1)
    separate = p * near[:, 2:3] - near[:, 0:2]  # sum_j (p_i - p_j) / d_ij^2

    to_predator = e - p
    d = length(to_predator)
    u = to_predator / np.maximum(d, _TINY)
    if mode == "escape":  # flee at full strength inside alarm / 2, fading out at alarm
        react = -u * np.clip(2.0 - 2.0 * d / params.alarm_radius, 0.0, 1.0)
    else:  # spring towards the ring, and swim around it
        ring = params.ring_radius
        react = u * np.clip((d - ring) / ring * 4.0, -1.0, 1.0) + 0.5 * _perp(u)
    # The reef: fish that stray beyond reef_radius from the origin turn back towards it.
    out = length(p)
    home = -p / np.maximum(out, _TINY) * np.clip(out / params.reef_radius - 1.0, 0.0, 1.0)
    steer = (
        params.align * align
        + params.cohere * cohere
        + params.separate * separate
        + params.react * react
        + params.home * home
    )
    v = v + steer
    s = length(v)
    v = v * (np.clip(s, params.speed, params.max_speed) / np.maximum(s, _TINY))
    return np.reshape(p + v, shape), np.reshape(v, shape)


# -- helpers ------------------------------------------------------------------------------
def _perp(u: np.ndarray) -> np.ndarray:
    """Return ``u`` turned by +90 degrees."""
    return np.concatenate([-u[..., 1:2], u[..., 0:1]], axis=-1)


def _points(positions: Any) -> np.ndarray:
    points = np.asarray(positions, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"positions must be an (n, 2) array, got shape {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError("positions must be finite")
    return points


def _positive(value: Any, name: str, allow_zero: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise ValueError(
            f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {number}"
        )
    return number


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _progress(steps: range, show: bool) -> Iterable[int]:
    if not (show and fs.is_main_process()):
        return steps
    from tqdm.auto import tqdm

    bar: Iterable[int] = tqdm(steps, desc="fish school", unit="step")
    return bar
