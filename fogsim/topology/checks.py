"""Properties of a weight matrix ``W``: stochasticity, connectivity, mixing rate.

Every check accepts anything :func:`~fogsim.topology.as_topology` accepts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.sparse.linalg import LinearOperator, svds

from ._topology import Topology, as_topology

if TYPE_CHECKING:
    from ._topology import TopologyData

__all__ = [
    "is_column_stochastic",
    "is_doubly_stochastic",
    "is_row_stochastic",
    "is_strongly_connected",
    "mixing_time",
    "rho",
    "spectral_gap",
]

#: Largest n for which rho() takes a dense SVD; larger matrices use sparse svds.
DENSE_SVD_MAX = 2048

#: rho within this of 1 counts as 1 (a disconnected graph's rho is 1 up to round-off).
_RHO_ONE_TOL = 1e-12


def is_row_stochastic(W: TopologyData, tol: float = 1e-12) -> bool:
    """Return whether ``W`` is nonnegative with rows summing to 1 (pull weights).

    ``w_ij >= 0`` and ``|sum_j w_ij - 1| <= tol`` for every i.
    """
    return _is_stochastic(as_topology(W, argname="W"), tol, axis=1)


def is_column_stochastic(W: TopologyData, tol: float = 1e-12) -> bool:
    """Return whether ``W`` is nonnegative with columns summing to 1 (push weights).

    ``w_ij >= 0`` and ``|sum_i w_ij - 1| <= tol`` for every j.
    """
    return _is_stochastic(as_topology(W, argname="W"), tol, axis=0)


def is_doubly_stochastic(W: TopologyData, tol: float = 1e-12) -> bool:
    """Return whether ``W`` is both row- and column-stochastic."""
    topo = as_topology(W, argname="W")
    return _is_stochastic(topo, tol, axis=1) and _is_stochastic(topo, tol, axis=0)


def is_strongly_connected(W: TopologyData) -> bool:
    """Return whether every agent's value reaches every other agent through ``W``."""
    topo = as_topology(W, argname="W")
    count, _ = connected_components(topo.to_sparse(), directed=True, connection="strong")
    return bool(count == 1)


def rho(W: TopologyData) -> float:
    """Return the consensus contraction factor of ``W``.

    ``rho = ||W - 1 1^T / n||_2``, the largest singular value of ``W`` minus the average.
    """
    topo = as_topology(W, argname="W")
    n = topo.size
    form = topo.circulant_form()
    if form is not None and form.weights.ndim == 1 and form.self_weight.ndim == 0:
        # A circulant matrix is normal: its singular values are |eigenvalues| = |DFT of a row|.
        row = np.zeros(n)
        row[0] = form.self_weight
        row[form.offsets] = form.weights
        eigenvalues = np.fft.fft(row)
        eigenvalues[0] -= 1.0  # the average 1 1^T / n removes 1 from the eigenvalue of 1
        return float(np.abs(eigenvalues).max())
    if n <= DENSE_SVD_MAX:
        return float(np.linalg.norm(topo.to_dense() - 1.0 / n, 2))
    return _sparse_rho(topo)


def spectral_gap(W: TopologyData) -> float:
    """Return ``1 - rho(W)``."""
    return 1.0 - rho(W)


def mixing_time(W: TopologyData, eps: float = 1e-3) -> int | float:
    """Return the smallest number of steps t with ``rho(W)**t <= eps`` (inf if ``rho >= 1``).

    A ``rho`` within 1e-12 of 1 counts as 1 (round-off of a disconnected graph's rho).
    """
    if not (isinstance(eps, (int, float, np.floating)) and eps > 0):
        raise ValueError(f"eps must be > 0, got {eps!r}")
    r = rho(W)
    if eps >= 1:
        return 0
    if r >= 1.0 - _RHO_ONE_TOL:
        return math.inf
    if r == 0.0:
        return 1
    t = max(1, math.ceil(math.log(eps) / math.log(r)))
    while r**t > eps:  # the logarithms may round t one step either way
        t += 1
    while t > 1 and r ** (t - 1) <= eps:
        t -= 1
    return t


def _is_stochastic(topo: Topology, tol: float, axis: int) -> bool:
    csr = topo.to_sparse()
    if csr.data.size and csr.data.min() < 0:
        return False
    sums = np.asarray(csr.sum(axis=axis)).ravel()
    return bool(np.abs(sums - 1.0).max() <= tol)


def _sparse_rho(topo: Topology) -> float:
    n = topo.size
    matrix = topo.to_sparse()
    transposed = matrix.T.tocsr()

    def matvec(x: np.ndarray) -> np.ndarray:
        product: np.ndarray = matrix @ x - x.sum(axis=0) / n
        return product

    def rmatvec(x: np.ndarray) -> np.ndarray:
        product: np.ndarray = transposed @ x - x.sum(axis=0) / n
        return product

    operator = LinearOperator(
        (n, n), matvec=matvec, rmatvec=rmatvec, matmat=matvec, rmatmat=rmatvec, dtype=np.float64
    )
    # A fixed start keeps the result reproducible; ones would lie in the null space.
    start = np.random.default_rng(0).standard_normal(n)
    values = svds(operator, k=1, v0=start, return_singular_vectors=False)
    return float(values[0])
