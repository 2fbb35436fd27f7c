"""Tests of fogsim.topology's graph builders, weight rules and checks."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import fogsim.topology as ft
import fogsim.topology.checks as checks
from fogsim.topology import Topology


def pattern(topo: Topology) -> np.ndarray:
    dense = topo.to_dense() != 0
    np.fill_diagonal(dense, False)
    return dense


def reference_mh(adjacency: np.ndarray) -> np.ndarray:
    """Metropolis-Hastings weights entry by entry."""
    sym = adjacency | adjacency.T
    np.fill_diagonal(sym, False)
    deg = sym.sum(axis=1)
    n = len(sym)
    w = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if sym[i, j]:
                w[i, j] = 1.0 / (1 + max(deg[i], deg[j]))
        w[i, i] = 1.0 - w[i].sum()
    return w


BUILDERS = {
    "exponential_two": lambda n: ft.exponential_two_graph(n),
    "exponential_3": lambda n: ft.exponential_graph(n, base=3),
    "symmetric_exponential": lambda n: ft.symmetric_exponential_graph(n),
    "ring": lambda n: ft.ring_graph(n),
    "ring_left": lambda n: ft.ring_graph(n, "left"),
    "ring_right": lambda n: ft.ring_graph(n, "right"),
    "star": lambda n: ft.star_graph(n),
    "mesh": lambda n: ft.mesh_grid_2d_graph(n),
    "torus": lambda n: ft.torus_2d_graph(n),
    "fully_connected": lambda n: ft.fully_connected_graph(n),
    "geometric": lambda n: ft.random_geometric_graph(n, 2.0, seed=0),
    "erdos_renyi": lambda n: ft.erdos_renyi_graph(n, 1.0, seed=0),
}
SYMMETRIC = {"symmetric_exponential", "ring", "star", "mesh", "torus", "fully_connected"}
SYMMETRIC |= {"geometric", "erdos_renyi"}


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 12, 17])
def test_builders_are_stochastic_and_connected(name, n):
    topo = BUILDERS[name](n)
    assert isinstance(topo, Topology) and topo.size == n
    assert ft.is_row_stochastic(topo)
    assert ft.is_strongly_connected(topo)
    if name in SYMMETRIC:
        assert ft.is_doubly_stochastic(topo)
        np.testing.assert_allclose(topo.to_dense(), topo.to_dense().T, atol=1e-15)


def test_hypercube_structure():
    for n in [1, 2, 8, 32]:
        topo = ft.hypercube_graph(n)
        dim = n.bit_length() - 1
        for i in range(n):
            assert topo.in_neighbors(i) == sorted(i ^ (1 << k) for k in range(dim))
        assert ft.is_doubly_stochastic(topo)
        np.testing.assert_allclose(topo.self_weights, 1.0 / (dim + 1))
    with pytest.raises(ValueError, match="n must be a power of two for a hypercube, got 6"):
        ft.hypercube_graph(6)


@pytest.mark.parametrize(("n", "base"), [(8, 2), (10, 2), (27, 3), (30, 3), (5, 7)])
def test_exponential_graph_sends_to_powers(n, base):
    topo = ft.exponential_graph(n, base)
    powers = [base**k for k in range(n) if base**k < n]
    for i in range(n):
        assert topo.out_neighbors(i) == sorted({(i + p) % n for p in powers})
        assert topo.in_neighbors(i) == sorted({(i - p) % n for p in powers})
    np.testing.assert_allclose(topo.to_sparse().data, 1.0 / (len(powers) + 1))
    assert topo.circulant_form() is not None
    sym = ft.symmetric_exponential_graph(n, base)
    for i in range(n):
        expected = sorted({(i + s * p) % n for p in powers for s in (1, -1)} - {i})
        assert sym.in_neighbors(i) == sym.out_neighbors(i) == expected
    assert ft.exponential_two_graph(n) == ft.exponential_graph(n, 2)


def test_ring_styles_and_small_rings():
    n = 7
    both, left, right = (ft.ring_graph(n, s) for s in ("bidirectional", "left", "right"))
    for i in range(n):
        assert both.in_neighbors(i) == sorted({(i - 1) % n, (i + 1) % n})
        assert left.out_neighbors(i) == [(i - 1) % n]
        assert right.out_neighbors(i) == [(i + 1) % n]
    np.testing.assert_allclose(both.to_sparse().data, 1 / 3)
    np.testing.assert_allclose(left.to_sparse().data, 1 / 2)
    np.testing.assert_array_equal(ft.ring_graph(1).to_dense(), [[1.0]])
    for style in ("bidirectional", "left", "right"):
        np.testing.assert_array_equal(ft.ring_graph(2, style).to_dense(), np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="style must be one of"):
        ft.ring_graph(4, "up")


def test_star_graph_weights():
    topo = ft.star_graph(5, center=2)
    dense = topo.to_dense()
    assert topo.in_neighbors(2) == [0, 1, 3, 4]
    assert topo.in_neighbors(0) == [2]
    np.testing.assert_allclose(dense[2], 0.2)
    np.testing.assert_allclose(dense[:, 2], 0.2)
    np.testing.assert_allclose(np.diag(dense)[[0, 1, 3, 4]], 0.8)
    with pytest.raises(ValueError, match="center 5 is out of range for 5 agents"):
        ft.star_graph(5, center=5)


def test_mesh_grid_structure_and_shape():
    topo = ft.mesh_grid_2d_graph(12)  # 3 x 4
    degrees = topo.in_degrees().reshape(3, 4)
    np.testing.assert_array_equal(degrees, [[2, 3, 3, 2], [3, 4, 4, 3], [2, 3, 3, 2]])
    assert topo.in_neighbors(5) == [1, 4, 6, 9]
    np.testing.assert_allclose(topo.to_dense(), reference_mh(pattern(topo)), atol=1e-15)
    tall = ft.mesh_grid_2d_graph(12, shape=(6, 2))
    assert tall.in_neighbors(5) == [3, 4, 7]
    np.testing.assert_array_equal(ft.mesh_grid_2d_graph(7).in_degrees(), [1, 2, 2, 2, 2, 2, 1])
    with pytest.raises(ValueError, match=r"shape \(3, 3\) holds 9 agents but n is 8"):
        ft.mesh_grid_2d_graph(8, shape=(3, 3))
    with pytest.raises(ValueError, match=r"shape must be \(rows, cols\)"):
        ft.torus_2d_graph(8, shape=(8,))
    with pytest.raises(ValueError, match=r"shape\[1\] must be >= 1"):
        ft.torus_2d_graph(8, shape=(8, 0))


def test_torus_structure():
    topo = ft.torus_2d_graph(16, shape=(4, 4))
    assert topo.in_neighbors(0) == [1, 3, 4, 12]
    mh = ft.metropolis_hastings_weights(topo).to_dense()
    np.testing.assert_allclose(topo.to_dense(), mh, rtol=0, atol=1e-15)
    np.testing.assert_allclose(topo.to_sparse().data, 0.2)
    narrow = ft.torus_2d_graph(6, shape=(2, 3))  # up and down coincide
    assert narrow.in_neighbors(0) == [1, 2, 3]
    np.testing.assert_allclose(narrow.to_sparse().data, 0.25)
    assert ft.torus_2d_graph(5) == ft.ring_graph(5)


def test_fully_connected():
    np.testing.assert_array_equal(ft.fully_connected_graph(4).to_dense(), np.full((4, 4), 0.25))
    assert ft.rho(ft.fully_connected_graph(4)) < 1e-15


def test_random_geometric_graph():
    n, radius = 60, 0.25
    topo = ft.random_geometric_graph(n, radius, seed=7)
    points = np.random.default_rng(7).random((n, 2))
    close = np.linalg.norm(points[:, None] - points[None, :], axis=-1) <= radius
    np.fill_diagonal(close, False)
    np.testing.assert_array_equal(pattern(topo), close)
    np.testing.assert_allclose(topo.to_dense(), reference_mh(close), atol=1e-15)
    assert topo == ft.random_geometric_graph(n, radius, seed=7)
    assert topo != ft.random_geometric_graph(n, radius, seed=8)
    np.testing.assert_array_equal(ft.random_geometric_graph(5, 0.0, seed=0).to_dense(), np.eye(5))
    with pytest.raises(ValueError, match="radius must be finite and >= 0, got -1"):
        ft.random_geometric_graph(5, -1)


def test_erdos_renyi_graph():
    n, p = 200, 0.1
    topo = ft.erdos_renyi_graph(n, p, seed=3)
    adjacency = pattern(topo)
    np.testing.assert_array_equal(adjacency, adjacency.T)
    edges = adjacency.sum() // 2
    mean, std = p * n * (n - 1) / 2, math.sqrt(p * (1 - p) * n * (n - 1) / 2)
    assert abs(edges - mean) < 5 * std
    # every pair is equally likely: the degree spread matches Binomial(n - 1, p)
    assert abs(adjacency.sum(axis=1).var() - (n - 1) * p * (1 - p)) < 8
    assert topo == ft.erdos_renyi_graph(n, p, seed=3)
    assert topo != ft.erdos_renyi_graph(n, p, seed=4)
    np.testing.assert_array_equal(ft.erdos_renyi_graph(6, 0.0, seed=0).to_dense(), np.eye(6))
    assert pattern(ft.erdos_renyi_graph(6, 1.0, seed=0)).sum() == 30
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\], got 1.5"):
        ft.erdos_renyi_graph(5, 1.5)


@pytest.mark.parametrize(
    "build",
    [
        ft.exponential_two_graph,
        lambda n: ft.exponential_graph(n, 3),
        ft.symmetric_exponential_graph,
        ft.ring_graph,
        ft.star_graph,
        ft.mesh_grid_2d_graph,
        ft.torus_2d_graph,
        ft.hypercube_graph,
        ft.fully_connected_graph,
        lambda n: ft.random_geometric_graph(n, 0.5),
        lambda n: ft.erdos_renyi_graph(n, 0.5),
    ],
)
def test_builders_validate_n(build):
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        build(0)
    with pytest.raises(TypeError, match="n must be an integer, got float"):
        build(4.0)


def test_exponential_base_is_validated():
    with pytest.raises(ValueError, match="base must be >= 2, got 1"):
        ft.exponential_graph(8, base=1)
    with pytest.raises(ValueError, match="base must be >= 1, got 0"):
        ft.symmetric_exponential_graph(8, base=0)


# --- rho and the other checks -----------------------------------------------------------------


def relabelled(topo: Topology, seed: int = 0) -> Topology:
    """Return P W P^T for a random permutation P: the same spectrum, no longer circulant."""
    for attempt in range(10):
        perm = np.random.default_rng([seed, attempt]).permutation(topo.size)
        result = Topology(topo.to_dense()[np.ix_(perm, perm)])
        if result.circulant_form() is None:
            return result
    raise AssertionError("every relabelling stayed circulant")


@pytest.mark.parametrize("n", [3, 4, 5, 8, 13, 64])
def test_ring_rho_formula(n):
    expected = 1 / 3 + 2 / 3 * math.cos(2 * math.pi / n)
    assert ft.rho(ft.ring_graph(n)) == pytest.approx(expected, abs=1e-12)
    if n >= 5:  # smaller rings are circulant under every labelling
        assert ft.rho(relabelled(ft.ring_graph(n))) == pytest.approx(expected, abs=1e-12)
    assert ft.spectral_gap(ft.ring_graph(n)) == pytest.approx(1 - expected, abs=1e-12)


@pytest.mark.parametrize("n", [2, 4, 6, 8, 10, 12, 16, 32, 100, 4096])
def test_exponential_two_rho_formula(n):
    expected = 1 - 2 / (1 + math.ceil(math.log2(n)))
    assert ft.rho(ft.exponential_two_graph(n)) == pytest.approx(expected, abs=1e-12)
    if 4 <= n <= 100:
        assert ft.rho(relabelled(ft.exponential_two_graph(n))) == pytest.approx(expected, abs=1e-12)


def test_rho_of_per_row_circulant_and_sparse_path(monkeypatch):
    weights = np.random.default_rng(0).random((2, 30)) * 0.4
    circ = ft.row_normalize(Topology.circulant(30, [1, 7], weights, 0.3))
    assert circ.circulant_form().weights.ndim == 2
    expected = np.linalg.svd(circ.to_dense() - 1 / 30, compute_uv=False)[0]
    assert ft.rho(circ) == pytest.approx(expected, abs=1e-12)
    topo = ft.erdos_renyi_graph(80, 0.1, seed=1)
    dense_rho = ft.rho(topo)
    exact = np.linalg.svd(topo.to_dense() - 1 / 80, compute_uv=False)[0]
    assert dense_rho == pytest.approx(exact, abs=1e-12)
    monkeypatch.setattr(checks, "DENSE_SVD_MAX", 10)
    assert ft.rho(topo) == pytest.approx(exact, abs=1e-8)
    directed = Topology(np.random.default_rng(2).random((50, 50)))
    exact = np.linalg.svd(directed.to_dense() - 1 / 50, compute_uv=False)[0]
    assert ft.rho(directed) == pytest.approx(exact, rel=1e-8)


def test_mixing_time():
    ring = ft.ring_graph(10)
    r = ft.rho(ring)
    t = ft.mixing_time(ring, eps=1e-3)
    assert r**t <= 1e-3 < r ** (t - 1)
    assert ft.mixing_time(ring, eps=0.5) == math.ceil(math.log(0.5) / math.log(r))
    assert ft.mixing_time(ft.fully_connected_graph(5)) == 1
    assert ft.mixing_time(np.eye(3)) == math.inf
    assert ft.mixing_time(sp.block_diag([ft.ring_graph(4).to_sparse()] * 2)) == math.inf
    assert ft.mixing_time(ring, eps=1.0) == 0
    with pytest.raises(ValueError, match="eps must be > 0, got 0"):
        ft.mixing_time(ring, eps=0)


def test_stochasticity_and_connectivity_checks():
    push = np.array([[0.5, 0.2], [0.5, 0.8]])
    assert ft.is_column_stochastic(push) and not ft.is_row_stochastic(push)
    assert ft.is_row_stochastic(push.T) and not ft.is_doubly_stochastic(push)
    assert not ft.is_row_stochastic([[1.5, -0.5], [0.5, 0.5]])  # rows sum to 1, not >= 0
    assert ft.is_row_stochastic([[1 + 1e-13, 0], [0, 1]])
    assert not ft.is_row_stochastic([[1 + 1e-13, 0], [0, 1]], tol=1e-14)
    path = nx.DiGraph([(0, 1), (1, 2)])
    assert not ft.is_strongly_connected(path)
    assert ft.is_strongly_connected(nx.DiGraph([(0, 1), (1, 2), (2, 0)]))
    assert ft.is_strongly_connected(ft.ring_graph(5, "left"))
    with pytest.raises(TypeError, match="W must be a Topology"):
        ft.rho(None)


# --- weight rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_metropolis_hastings_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    adjacency = rng.random((25, 25)) < 0.15  # directed: MH symmetrizes it
    topo = ft.metropolis_hastings_weights(adjacency.astype(float))
    assert ft.is_doubly_stochastic(topo)
    np.testing.assert_allclose(topo.to_dense(), reference_mh(adjacency), atol=1e-15)
    assert (topo.self_weights > 0).all()


def test_metropolis_hastings_on_circulant_stays_lazy():
    n = 10**6
    topo = ft.metropolis_hastings_weights(ft.exponential_two_graph(n))
    assert topo._csr is None
    offsets = {s * 2**k % n for k in range(20) for s in (1, -1)}
    assert topo.in_degrees()[0] == len(offsets) == 40
    small = ft.exponential_two_graph(12)
    np.testing.assert_allclose(
        ft.metropolis_hastings_weights(small).to_dense(), reference_mh(pattern(small)), atol=1e-15
    )


def test_uniform_and_max_degree_weights():
    adjacency = np.zeros((4, 4))
    adjacency[0, [1, 2, 3]] = 1  # agent 0 receives from everyone
    adjacency[1, 2] = 1
    uniform = ft.uniform_weights(adjacency).to_dense()
    np.testing.assert_allclose(uniform[0], 0.25)
    np.testing.assert_allclose(uniform[1], [0, 0.5, 0.5, 0])
    np.testing.assert_allclose(uniform[2], [0, 0, 1, 0])
    maxdeg = ft.max_degree_weights(adjacency).to_dense()
    np.testing.assert_allclose(maxdeg[0], 0.25)
    np.testing.assert_allclose(maxdeg[1], [0, 0.75, 0.25, 0])
    np.testing.assert_allclose(maxdeg[3], [0, 0, 0, 1])
    star = ft.max_degree_weights(ft.star_graph(6))
    assert ft.is_doubly_stochastic(star)
    np.testing.assert_allclose(star.self_weights, [1 / 6] + [5 / 6] * 5)
    assert ft.max_degree_weights(ft.ring_graph(8, "left")) == ft.ring_graph(8, "left")


def test_row_and_column_normalize():
    dense = np.random.default_rng(0).random((6, 6)) * (
        np.random.default_rng(1).random((6, 6)) < 0.5
    )
    dense += np.eye(6)
    np.testing.assert_allclose(
        ft.row_normalize(dense).to_dense(), dense / dense.sum(axis=1, keepdims=True)
    )
    np.testing.assert_allclose(ft.column_normalize(dense).to_dense(), dense / dense.sum(axis=0))
    weights = np.random.default_rng(2).random((3, 9))
    circ = Topology.circulant(9, [1, 2, 5], weights, np.arange(1.0, 10.0))
    ref = circ.to_dense()
    for rule, axis in ((ft.row_normalize, 1), (ft.column_normalize, 0)):
        result = rule(circ)
        assert result.circulant_form() is not None
        np.testing.assert_allclose(
            result.to_dense(), ref / ref.sum(axis=axis, keepdims=True), atol=1e-15
        )
    assert ft.is_column_stochastic(ft.column_normalize(ft.ring_graph(5, "left").to_networkx()))
    with pytest.raises(ValueError, match="row 1 of the topology sums to 0"):
        ft.row_normalize([[1.0, 0.0], [0.5, -0.5]])
    with pytest.raises(ValueError, match="column 0 of the topology sums to 0"):
        ft.column_normalize([[0.0, 1.0], [0.0, 1.0]])


@pytest.mark.parametrize("seed", range(3))
def test_doubly_stochastic_sinkhorn(seed):
    rng = np.random.default_rng(seed)
    adjacency = (rng.random((30, 30)) < 0.15) | np.roll(np.eye(30, dtype=bool), 1, axis=1)
    topo = ft.doubly_stochastic(adjacency.astype(float))
    assert ft.is_doubly_stochastic(topo, tol=1e-11)
    expected = adjacency | np.eye(30, dtype=bool)
    np.testing.assert_array_equal(topo.to_dense() != 0, expected)
    assert not ft.is_doubly_stochastic(ft.uniform_weights(adjacency.astype(float)), tol=1e-3)


def test_doubly_stochastic_special_cases_and_errors():
    circ = ft.doubly_stochastic(ft.exponential_two_graph(10))
    assert circ == ft.exponential_two_graph(10)
    blocks = sp.block_diag([ft.ring_graph(3, "left").to_sparse(), np.ones((2, 2))])
    assert ft.is_doubly_stochastic(ft.doubly_stochastic(blocks))
    with pytest.raises(ValueError, match="edge 0 -> 1 joins two strongly connected components"):
        ft.doubly_stochastic(nx.DiGraph([(0, 1)]))
    star = ft.star_graph(6)
    with pytest.raises(ValueError, match="Sinkhorn scaling did not converge in 1 iterations"):
        ft.doubly_stochastic(star.uniform(), max_iter=1)
    with pytest.raises(ValueError, match="tol must be > 0"):
        ft.doubly_stochastic(star, tol=0)
    with pytest.raises(ValueError, match="max_iter must be >= 1"):
        ft.doubly_stochastic(star, max_iter=0)
