"""Graph builders: each returns a :class:`~fogsim.topology.Topology` with row-stochastic weights.

Agents are ``0..n-1``; ``W[i, j]`` is the weight agent ``i`` gives to what it receives from
``j``. Regular graphs use uniform weights ``1 / (degree + 1)``; irregular ones use
Metropolis-Hastings weights (doubly stochastic). As with every weight rule, the rows (and the
columns of the doubly stochastic ones) sum to exactly 1.0 in floating point: the neighbor
weights are multiples of ``2**-53`` and the self weight is one minus them.
"""

from __future__ import annotations

import math

import numpy as np

from ._exact import uniform_split
from ._topology import Topology, _from_coo
from ._util import check_agent, check_positive_int
from .weights import metropolis_hastings_weights

__all__ = [
    "erdos_renyi_graph",
    "exponential_graph",
    "exponential_two_graph",
    "fully_connected_graph",
    "hypercube_graph",
    "mesh_grid_2d_graph",
    "random_geometric_graph",
    "ring_graph",
    "star_graph",
    "symmetric_exponential_graph",
    "torus_2d_graph",
]

_RING_STYLES = ("bidirectional", "left", "right")


def exponential_graph(n: int, base: int = 2) -> Topology:
    """Return the exponential graph: agent i sends to ``(i + base**k) % n`` for ``base**k < n``.

    ``w_ij = 1 / (K + 1)`` for ``j = i - base**k`` and ``j = i``, K the number of powers.
    """
    n = check_positive_int(n, "n")
    base = check_positive_int(base, "base")
    if base < 2:
        raise ValueError(f"base must be >= 2, got {base}")
    powers = _powers_below(n, base)
    return _uniform_circulant(n, [-p for p in powers])


def exponential_two_graph(n: int) -> Topology:
    """Return the exponential-2 graph (BlueFog's default): i sends to ``i + 1, i + 2, i + 4, ...``.

    ``rho = 1 - 2 / (1 + ceil(log2 n))`` for even n.
    """
    return exponential_graph(n, 2)


def symmetric_exponential_graph(n: int, base: int = 2) -> Topology:
    """Return the undirected exponential graph: i exchanges with ``(i +- base**k) % n``.

    Uniform weights ``1 / (K + 1)``, K the number of distinct neighbors; doubly stochastic.
    """
    n = check_positive_int(n, "n")
    base = check_positive_int(base, "base")
    if base < 2:
        raise ValueError(f"base must be >= 2, got {base}")
    powers = np.array(_powers_below(n, base), dtype=np.int64)
    offsets = np.union1d(powers, n - powers)
    return _uniform_circulant(n, offsets.tolist())


def ring_graph(n: int, style: str = "bidirectional") -> Topology:
    """Return the ring with uniform weights.

    ``"bidirectional"``: i exchanges with ``i - 1`` and ``i + 1``, weights 1/3 (``rho = 1/3 +
    2/3 cos(2 pi / n)``); ``"left"``: i sends to ``i - 1`` (receives from ``i + 1``), weights
    1/2; ``"right"``: i sends to ``i + 1``, weights 1/2. With n = 2 both neighbors are the same
    agent, so every style gives weights 1/2; with n = 1 the lone agent keeps weight 1.
    """
    n = check_positive_int(n, "n")
    if style not in _RING_STYLES:
        raise ValueError(f"style must be one of {_RING_STYLES}, got {style!r}")
    if n == 1:
        return Topology.circulant(1, [], 0.0, 1.0)
    offsets = {"bidirectional": {1, n - 1}, "left": {1}, "right": {n - 1}}[style]
    return _uniform_circulant(n, sorted(offsets))


def star_graph(n: int, center: int = 0) -> Topology:
    """Return the star around ``center`` with Metropolis-Hastings weights.

    Leaves: ``w_leaf,center = 1/n``, ``w_leaf,leaf = 1 - 1/n``; center: ``1/n`` everywhere.
    """
    n = check_positive_int(n, "n")
    center = check_agent(center, n, "center")
    leaves = np.delete(np.arange(n), center)
    hub = np.full(leaves.shape[0], center)
    return _mh_from_edges(n, leaves, hub)


def mesh_grid_2d_graph(n: int, shape: tuple[int, int] | None = None) -> Topology:
    """Return the 2-D grid with 4-neighbor links and Metropolis-Hastings weights.

    Agent ``r * cols + c`` sits at row r, column c; ``shape`` defaults to the most square
    ``rows x cols = n`` with ``rows <= cols`` (a path when n is prime).
    """
    n = check_positive_int(n, "n")
    grid = np.arange(n).reshape(_grid_shape(n, shape))
    src = np.concatenate([grid[:, :-1].ravel(), grid[:-1, :].ravel()])
    dst = np.concatenate([grid[:, 1:].ravel(), grid[1:, :].ravel()])
    return _mh_from_edges(n, src, dst)


def torus_2d_graph(n: int, shape: tuple[int, int] | None = None) -> Topology:
    """Return the 2-D grid with wrap-around links and uniform weights (equal to MH: regular).

    Agent ``r * cols + c`` exchanges with ``((r +- 1) % rows, c)`` and ``(r, (c +- 1) % cols)``;
    coinciding neighbors (a side of length 1 or 2) count once.
    """
    n = check_positive_int(n, "n")
    grid = np.arange(n).reshape(_grid_shape(n, shape))
    src = np.tile(grid.ravel(), 4)
    dst = np.concatenate(
        [np.roll(grid, shift, axis).ravel() for axis in (0, 1) for shift in (1, -1)]
    )
    keep = src != dst
    return _from_coo(n, src[keep], dst[keep], np.ones(int(keep.sum()))).uniform()


def hypercube_graph(n: int) -> Topology:
    """Return the hypercube on ``n = 2**d`` agents: i exchanges with ``i XOR 2**k``.

    Uniform weights ``1 / (d + 1)``; doubly stochastic.
    """
    n = check_positive_int(n, "n")
    if n & (n - 1):
        raise ValueError(f"n must be a power of two for a hypercube, got {n}")
    dim = n.bit_length() - 1
    agents = np.arange(n)
    rows = np.tile(agents, dim)
    cols = np.concatenate([agents ^ (1 << k) for k in range(dim)] or [agents[:0]])
    return _from_coo(n, rows, cols, np.ones(rows.shape[0])).uniform()


def fully_connected_graph(n: int) -> Topology:
    """Return the complete graph with ``w_ij = 1/n`` everywhere (exact averaging, ``rho = 0``)."""
    n = check_positive_int(n, "n")
    w, w_self = uniform_split(n - 1)
    matrix = np.full((n, n), w)
    np.fill_diagonal(matrix, w_self)
    return Topology(matrix)


def random_geometric_graph(n: int, radius: float, seed: int | None = None) -> Topology:
    """Return a random geometric graph with Metropolis-Hastings weights.

    Agents are uniform points in the unit square (``np.random.default_rng(seed)``), linked when
    their distance is ``<= radius``. The graph may be disconnected for a small radius.
    """
    from scipy.spatial import cKDTree

    n = check_positive_int(n, "n")
    if not (math.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius must be finite and >= 0, got {radius}")
    points = np.random.default_rng(seed).random((n, 2))
    pairs = cKDTree(points).query_pairs(radius, output_type="ndarray").reshape(-1, 2)
    return _mh_from_edges(n, pairs[:, 0], pairs[:, 1])


def erdos_renyi_graph(n: int, p: float, seed: int | None = None) -> Topology:
    """Return an undirected Erdos-Renyi G(n, p) graph with Metropolis-Hastings weights.

    Draws the edge count ~ Binomial(n (n - 1) / 2, p), then that many distinct pairs, from
    ``np.random.default_rng(seed)``. The graph may be disconnected for a small p.
    """
    n = check_positive_int(n, "n")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    rng = np.random.default_rng(seed)
    pairs = n * (n - 1) // 2
    count = int(rng.binomial(pairs, p))
    keys = rng.choice(pairs, size=count, replace=False) if count else np.zeros(0, np.int64)
    # Pair key k = i (i - 1) / 2 + j with i > j; invert in floating point, then correct.
    i = np.floor((1.0 + np.sqrt(1.0 + 8.0 * keys)) / 2.0).astype(np.int64)
    i -= i * (i - 1) // 2 > keys
    i += (i + 1) * i // 2 <= keys
    j = keys - i * (i - 1) // 2
    return _mh_from_edges(n, i, j)


def _uniform_circulant(n: int, offsets: list[int]) -> Topology:
    w, w_self = uniform_split(len(offsets))
    return Topology.circulant(n, offsets, float(w), float(w_self))


def _powers_below(n: int, base: int) -> list[int]:
    powers, p = [], 1
    while p < n:
        powers.append(p)
        p *= base
    return powers


def _grid_shape(n: int, shape: tuple[int, int] | None) -> tuple[int, int]:
    if shape is None:
        rows = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        return rows, n // rows
    if len(shape) != 2:
        raise ValueError(f"shape must be (rows, cols), got {shape!r}")
    rows = check_positive_int(shape[0], "shape[0]")
    cols = check_positive_int(shape[1], "shape[1]")
    if rows * cols != n:
        raise ValueError(f"shape {(rows, cols)} holds {rows * cols} agents but n is {n}")
    return rows, cols


def _mh_from_edges(n: int, src: np.ndarray, dst: np.ndarray) -> Topology:
    """Return Metropolis-Hastings weights on the undirected edges ``src[k] -- dst[k]``."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    pattern = _from_coo(
        n, np.concatenate([src, dst]), np.concatenate([dst, src]), np.ones(2 * src.shape[0])
    )
    return metropolis_hastings_weights(pattern)
