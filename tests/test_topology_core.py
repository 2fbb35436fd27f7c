"""Tests of fogsim.topology's Topology class, its conversions and its weight convention."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import fogsim.topology as ft
from fogsim.topology import Topology, as_topology


def random_matrix(n: int, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.random((n, n)) * (rng.random((n, n)) < density)
    return matrix


# --- the convention --------------------------------------------------------------------------


def test_digraph_edge_j_to_i_is_w_ij():
    graph = nx.DiGraph()
    graph.add_nodes_from([0, 1])
    graph.add_edge(0, 1, weight=0.3)
    topo = as_topology(graph)
    dense = topo.to_dense()
    assert dense[1, 0] == 0.3
    assert dense[0, 1] == 0.0
    assert topo.in_neighbors(1) == [0]
    assert topo.out_neighbors(0) == [1]
    assert topo.in_neighbors(0) == []
    assert topo.out_neighbors(1) == []
    assert list(topo.in_degrees()) == [0, 1]
    assert list(topo.out_degrees()) == [1, 0]


def test_to_networkx_puts_w_ij_on_edge_j_to_i_and_self_loops():
    dense = np.array([[0.5, 0.0, 0.5], [0.2, 0.8, 0.0], [0.0, 0.7, 0.3]])
    graph = Topology(dense).to_networkx()
    assert sorted(graph.nodes) == [0, 1, 2]
    assert graph.edges[2, 0]["weight"] == 0.5
    assert graph.edges[0, 1]["weight"] == 0.2
    assert graph.edges[1, 2]["weight"] == 0.7
    assert graph.edges[0, 0]["weight"] == 0.5
    assert not graph.has_edge(0, 2)
    assert graph.number_of_edges() == 6


def test_networkx_defaults_undirected_zero_edges_and_self_loops():
    graph = nx.Graph()
    graph.add_nodes_from(range(4))
    graph.add_edge(0, 1)  # no weight attribute -> 1.0, both directions
    graph.add_edge(1, 2, weight=0.25)
    graph.add_edge(2, 3, weight=0.0)  # dropped
    graph.add_edge(3, 3, weight=0.5)  # self loop counted once
    dense = as_topology(graph).to_dense()
    expected = np.zeros((4, 4))
    expected[0, 1] = expected[1, 0] = 1.0
    expected[1, 2] = expected[2, 1] = 0.25
    expected[3, 3] = 0.5
    np.testing.assert_array_equal(dense, expected)
    assert as_topology(graph).in_neighbors(3) == []


def test_networkx_nodes_may_be_numpy_integers_and_in_any_order():
    graph = nx.DiGraph()
    graph.add_nodes_from([np.int64(2), 0, 1])
    graph.add_edge(2, 0, weight=2.0)
    assert as_topology(graph).to_dense()[0, 2] == 2.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trips_networkx_dense_sparse(seed):
    dense = random_matrix(9, 0.4, seed)
    topo = Topology(dense)
    np.testing.assert_array_equal(topo.to_dense(), dense)
    assert as_topology(topo.to_networkx()) == topo
    assert Topology(topo.to_sparse()) == topo
    assert as_topology(sp.coo_matrix(dense)) == topo
    assert as_topology(sp.csc_array(dense)) == topo
    assert as_topology(dense.tolist()) == topo
    np.testing.assert_array_equal(as_topology(topo.to_networkx()).to_dense(), dense)


def test_as_topology_returns_the_same_topology_object():
    topo = ft.ring_graph(5)
    assert as_topology(topo) is topo
    assert as_topology(topo, size=5) is topo


# --- canonical storage ------------------------------------------------------------------------


def test_to_sparse_is_canonical_readonly_float64():
    rows = np.array([0, 0, 1, 2, 2])
    cols = np.array([1, 1, 0, 2, 0])
    data = np.array([0.25, 0.5, 0.0, 1, 3])  # duplicate (0, 1), explicit zero (1, 0)
    topo = Topology(sp.coo_array((data, (rows, cols)), shape=(3, 3)))
    csr = topo.to_sparse()
    assert isinstance(csr, sp.csr_array)
    assert csr.dtype == np.float64
    assert csr.nnz == 3
    np.testing.assert_array_equal(csr.indptr, [0, 1, 1, 3])
    np.testing.assert_array_equal(csr.indices, [1, 0, 2])
    np.testing.assert_array_equal(csr.data, [0.75, 3.0, 1.0])
    assert topo.to_sparse() is csr
    with pytest.raises(ValueError, match="read-only"):
        csr.data[0] = 1.0
    assert topo.in_neighbors(1) == []


def test_topology_copies_its_input():
    dense = np.eye(3)
    topo = Topology(dense)
    dense[0, 1] = 5.0
    assert topo.to_dense()[0, 1] == 0.0


def test_offdiag_csr_and_self_weights():
    dense = random_matrix(12, 0.5, 3)
    dense[np.arange(12), np.arange(12)] = np.where(np.arange(12) % 3 == 0, 0.0, 0.5)
    topo = Topology(dense)
    indptr, indices, data = topo.offdiag_csr()
    assert (indptr.dtype, indices.dtype, data.dtype) == (np.int64, np.int32, np.float64)
    rebuilt = sp.csr_array((data, indices, indptr), shape=(12, 12)).toarray()
    offdiag = dense.copy()
    offdiag[np.arange(12), np.arange(12)] = 0.0
    np.testing.assert_array_equal(rebuilt, offdiag)
    for i in range(12):
        row = indices[indptr[i] : indptr[i + 1]]
        assert np.all(np.diff(row) > 0) and i not in row
        assert topo.in_neighbors(i) == [j for j in range(12) if j != i and dense[i, j] != 0]
        assert topo.out_neighbors(i) == [j for j in range(12) if j != i and dense[j, i] != 0]
    np.testing.assert_array_equal(topo.self_weights, np.diag(dense))
    np.testing.assert_array_equal(topo.in_degrees(), (offdiag != 0).sum(axis=1))
    np.testing.assert_array_equal(topo.out_degrees(), (offdiag != 0).sum(axis=0))
    assert topo.in_degrees().dtype == np.int64 and topo.out_degrees().dtype == np.int64


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "exc", "match"),
    [
        (5, TypeError, "W must be a Topology, a networkx graph or an n x n weight matrix, got int"),
        ("abc", TypeError, "W must be a Topology, .*got str"),
        ({0: [1]}, TypeError, "W must be a Topology, .*got dict"),
        ([["a", "b"], ["c", "d"]], TypeError, "W weights must be real numbers"),
        (np.ones((2, 2)) * 1j, TypeError, "W weights must be real"),
        (np.ones((2, 3)), ValueError, r"W must be a square n x n matrix, got shape \(2, 3\)"),
        (np.ones((2, 2, 2)), ValueError, r"W must be a square n x n matrix, got shape \(2, 2, 2\)"),
        (np.ones(3), ValueError, r"W must be a square n x n matrix, got shape \(3,\)"),
        (np.zeros((0, 0)), ValueError, "W must have at least one agent"),
        (np.array([[1.0, 0.0], [np.nan, 1.0]]), ValueError, r"W weight W\[1, 0\] is nan"),
        (sp.csr_array(np.array([[1.0, np.inf], [0, 1]])), ValueError, r"W weight W\[0, 1\] is inf"),
        (
            sp.csr_array(np.ones((2, 3))),
            ValueError,
            r"W must be a square n x n matrix, got shape \(2, 3\)",
        ),
    ],
)
def test_as_topology_errors(obj, exc, match):
    with pytest.raises(exc, match=match):
        as_topology(obj, argname="W")


def test_topology_constructor_names_the_bad_weight():
    with pytest.raises(ValueError, match=r"topology weight W\[3, 5\] is nan"):
        dense = np.eye(6)
        dense[3, 5] = np.nan
        Topology(dense)
    with pytest.raises(ValueError, match=r"topology weight W\[0, 0\] is -inf"):
        Topology([[-np.inf]])


def test_size_mismatch_and_bad_graphs():
    with pytest.raises(ValueError, match="topology has 6 agents but the world has 8"):
        as_topology(ft.ring_graph(6), size=8)
    with pytest.raises(ValueError, match="size must be >= 1"):
        as_topology(ft.ring_graph(6), size=0)
    graph = nx.DiGraph()
    graph.add_edge(1, 2)
    with pytest.raises(ValueError, match=r"graph nodes must be exactly 0\.\.1"):
        as_topology(graph, argname="graph")
    with pytest.raises(ValueError, match=r"nodes must be exactly 0\.\.1"):
        as_topology(nx.DiGraph([("a", "b")]))
    with pytest.raises(ValueError, match="topology must have at least one agent"):
        as_topology(nx.DiGraph())
    bad = nx.DiGraph()
    bad.add_edge(0, 1, weight=float("nan"))
    with pytest.raises(ValueError, match="topology edge 0 -> 1 has weight nan"):
        as_topology(bad)
    bad.edges[0, 1]["weight"] = "heavy"
    with pytest.raises(TypeError, match="edge weights must be real numbers"):
        as_topology(bad)


@pytest.mark.parametrize("topo", [ft.ring_graph(4), ft.star_graph(4)])
def test_neighbor_queries_check_the_agent(topo):
    with pytest.raises(ValueError, match="agent 4 is out of range for 4 agents"):
        topo.in_neighbors(4)
    with pytest.raises(ValueError, match="agent -1 is out of range for 4 agents"):
        topo.out_neighbors(-1)
    with pytest.raises(TypeError, match="agent must be an integer, got bool"):
        topo.in_neighbors(True)
    assert topo.in_neighbors(np.int64(1)) == topo.in_neighbors(1)


# --- the package ----------------------------------------------------------------------------


def test_public_namespace():
    assert sorted(ft.__all__) == sorted(
        [
            "CirculantForm",
            "DynamicStep",
            "Topology",
            "as_topology",
            "column_normalize",
            "doubly_stochastic",
            "erdos_renyi_graph",
            "exponential_graph",
            "exponential_two_graph",
            "fully_connected_graph",
            "hypercube_graph",
            "inner_outer_exponential_two",
            "is_column_stochastic",
            "is_doubly_stochastic",
            "is_row_stochastic",
            "is_strongly_connected",
            "max_degree_weights",
            "mesh_grid_2d_graph",
            "metropolis_hastings_weights",
            "mixing_time",
            "one_peer_exponential_two",
            "one_peer_schedule",
            "random_geometric_graph",
            "random_matching",
            "rho",
            "ring_graph",
            "row_normalize",
            "spectral_gap",
            "star_graph",
            "symmetric_exponential_graph",
            "torus_2d_graph",
            "uniform_weights",
        ]
    )
    for name in ft.__all__:
        assert getattr(ft, name).__doc__, name
    for module in (ft.builders, ft.checks, ft.schedules, ft.weights):
        assert set(module.__all__) <= set(ft.__all__)


def test_import_is_pure_data():
    code = (
        "import sys, fogsim.topology as t; t.ring_graph(4).to_sparse(); "
        "print(sorted(m for m in ('mpi4py', 'torch') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_topology_modules_import_only_numpy_scipy_and_lazy_networkx():
    allowed = {"__future__", "collections", "dataclasses", "functools", "math", "numpy"}
    allowed |= {"operator", "scipy", "sys", "typing"}
    for path in sorted(Path(ft.__file__).parent.glob("*.py")):
        source = path.read_text()
        assert len(source.splitlines()) <= 400, path.name
        for node in ast.parse(source).body:  # module level only: networkx must be lazy
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, (path.name, roots)
