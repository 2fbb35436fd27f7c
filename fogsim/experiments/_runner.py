"""A world per run, and the built-in run: a reference algorithm on random least squares."""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import fogsim as fs
from fogsim import algorithms as _algorithms
from fogsim import topology as _topology
from fogsim.algorithms import LeastSquares, Result

if TYPE_CHECKING:
    from fogsim._types import TopologyLike

__all__ = ["ALGORITHMS", "DEFAULTS", "TOPOLOGIES", "optimize", "unstack", "world"]

#: The algorithms :func:`optimize` runs, by name.
ALGORITHMS = ("dgd", "gradient_tracking", "exact_diffusion")
#: The topologies :func:`optimize` builds (``fogsim.topology.<name>_graph(n)``), by name.
TOPOLOGIES = (
    "ring",
    "exponential_two",
    "symmetric_exponential",
    "exponential",
    "fully_connected",
    "hypercube",
    "mesh_grid_2d",
    "torus_2d",
    "star",
)
#: :func:`optimize`'s settings and their defaults (``alpha`` has none).
DEFAULTS: dict[str, Any] = {
    "algorithm": "dgd",
    "topology": "ring",
    "n": 8,
    "m": 10,
    "d": 5,
    "noise": 0.1,
    "heterogeneity": 0.0,
    "alpha": None,
    "iters": 100,
    "seed": 0,
    "latency": None,
    "bandwidth": None,
}


@contextlib.contextmanager
def world(
    size: int, topology: TopologyLike | None = None, seed: int | None = None
) -> Iterator[fs.Context]:
    """Run the block in a new simulated world of ``size`` agents, all in this process;
    close it afterwards.

    The world is current for this thread only (``with fs.Context(...)``), so a world the
    caller has open (``fs.init``) stays open and current outside the block, and runs in
    threads each see their own. ``topology`` and ``seed`` are those of :func:`fogsim.init`.

    >>> import fogsim as fs
    >>> from fogsim.experiments import world
    >>> with world(4, fs.topology.ring_graph):
    ...     print(fs.size())
    4
    """
    # every agent in this process (shards=1): under a launcher a plain "sim" world would be
    # split over the launched processes, which do not run this run
    ctx = fs.Context(backend="sim", size=size, topology=topology, seed=seed, shards=1)
    try:
        with ctx:
            yield ctx
    finally:
        ctx.close()


def optimize(config: Mapping[str, Any]) -> Result | list[Result]:
    """Run one reference algorithm on random least squares; the sweep's ready-made run.

    Agent i of ``n`` holds ``m`` rows of ``d`` unknowns: ``A_i`` standard normal and
    ``b_i = A_i (x_true + h z_i) + noise e_i`` (``x_true``, ``z_i``, ``e_i`` standard
    normal, drawn as :meth:`fogsim.algorithms.LeastSquares.random` draws them, from
    ``seed`` and the agent's rank; ``z_i`` after the rest, so ``h = 0`` is exactly
    ``LeastSquares.random(m, d, seed, noise)``). ``h``, the heterogeneity, moves each
    agent's local optimum away from the others'.

    Parameters
    ----------
    config : dict
        ``alpha`` (the step size, required) and any of (defaults in :data:`DEFAULTS`):
        ``algorithm`` (``"dgd"``, ``"gradient_tracking"``, ``"exact_diffusion"``),
        ``topology`` (a name of :data:`TOPOLOGIES`), ``n``, ``m``, ``d``, ``noise``,
        ``heterogeneity``, ``iters``, ``seed``; ``latency`` (s) and ``bandwidth``
        (bytes/s) start a :mod:`fogsim.clock` on ``Platform.uniform`` so that the history
        has ``"time"`` (communication time; no compute is charged). Other keys are refused.
        ``seed`` may be a list of seeds: the runs then share one simulation whose state is
        ``(n, S, d)`` (not with a clock: a message then carries all S problems), and a list
        of results comes back, one per seed (:func:`unstack`).

    Returns
    -------
    Result, or a list of them (one per seed when ``seed`` is a list)
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"config: unknown key {unknown[0]!r} (known: {sorted(DEFAULTS)})")
    c = {**DEFAULTS, **config}
    if c["alpha"] is None:
        raise ValueError("config: 'alpha' (the step size) is required")
    algorithm = c["algorithm"]
    if algorithm not in ALGORITHMS:
        raise ValueError(f"config['algorithm'] must be one of {ALGORITHMS}, got {algorithm!r}")
    name = c["topology"]
    if name not in TOPOLOGIES:
        raise ValueError(f"config['topology'] must be one of {TOPOLOGIES}, got {name!r}")
    n, m, d = (_count(c[k], k) for k in ("n", "m", "d"))
    h = _nonnegative(c["heterogeneity"], "heterogeneity")
    noise = _nonnegative(c["noise"], "noise")
    seeds = c["seed"]
    stacked = isinstance(seeds, Sequence) and not isinstance(seeds, str)
    timed = c["latency"] is not None or c["bandwidth"] is not None
    if stacked and timed:
        raise ValueError(
            "config: seeds cannot be stacked with a clock (latency/bandwidth): one message "
            "would carry every seed's values and take longer than each run's own"
        )
    builder = getattr(_topology, f"{name}_graph")
    method = getattr(_algorithms, algorithm)
    with world(n, builder):
        if timed:
            platform = fs.clock.Platform.uniform(
                n,
                latency=1e-5 if c["latency"] is None else c["latency"],
                bandwidth=1.25e9 if c["bandwidth"] is None else c["bandwidth"],
            )
            fs.clock.start(platform)
        if stacked:
            parts = [_problem(m, d, s, noise, h) for s in seeds]
            problem = LeastSquares(
                np.stack([p.A for p in parts], axis=1), np.stack([p.b for p in parts], axis=1)
            )
        else:
            problem = _problem(m, d, seeds, noise, h)
        result: Result = method(problem, alpha=c["alpha"], iters=c["iters"])
        if timed:
            fs.clock.stop()
    return unstack(result) if stacked else result


def _problem(m: int, d: int, seed: Any, noise: float, h: float) -> LeastSquares:
    """Return the least-squares problem of one seed (see :func:`optimize`)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"config['seed'] must be an int >= 0 (or a list of them), got {seed!r}")
    x_true = np.random.default_rng(np.random.SeedSequence(int(seed))).standard_normal(d)

    def data(r: int) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(int(r),)))
        A = rng.standard_normal((m, d))
        e = rng.standard_normal(m)
        z = rng.standard_normal(d)
        b = A @ (x_true + h * z) + noise * e
        return np.concatenate([A, b[:, None]], axis=1)

    both = np.asarray(fs.local(data))
    return LeastSquares(both[..., :d], both[..., d])


def unstack(result: Result, agents: bool = True) -> list[Result]:
    """Split the result of a batch of S problems (state ``(n, S, d)``) into S results.

    Metrics recorded per problem (``history[key]`` of shape ``(iters + 1, S)``) give each
    result its column. ``"bytes"`` (what the agents sent for all S together) is divided by
    S: each problem's share, what its own run sends. Other one-column metrics are copied.
    ``x`` and the ``state`` arrays are split along the batch axis: axis 1 after the
    agents' in simulation (``agents=True``), axis 0 for one agent's value.
    """
    counts = {v.shape[1] for v in result.history.values() if np.ndim(v) == 2}
    if len(counts) != 1:
        raise ValueError(
            "result: no history of a batch of problems (metrics of shape (iters + 1, S))"
        )
    (count,) = counts
    axis = 1 if agents else 0

    def part(value: Any, s: int) -> Any:
        arr = np.asarray(value)
        if arr.ndim > axis and arr.shape[axis] == count:
            return np.take(arr, s, axis=axis)
        return value

    out = []
    for s in range(count):
        history = {}
        for key, values in result.history.items():
            if np.ndim(values) == 2:
                history[key] = values[:, s].copy()
            elif key == "bytes":
                history[key] = values / count
            else:
                history[key] = values.copy()
        state = {k: part(v, s) for k, v in result.state.items()}
        out.append(Result(part(result.x, s), history, state))
    return out


def _count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"config[{key!r}] must be an int >= 1, got {value!r}")
    return int(value)


def _nonnegative(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
        raise ValueError(f"config[{key!r}] must be a number >= 0, got {value!r}")
    return float(value)
