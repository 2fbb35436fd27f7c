"""Tests of circulant fogsim.topology topologies: lazy storage, detection, equality."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

import fogsim.topology as ft
from fogsim.topology import CirculantForm, Topology, as_topology


def random_matrix(n: int, density: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.random((n, n)) * (rng.random((n, n)) < density)
    return matrix


def circulant_dense(n, offsets, weights, self_weight):
    """Reference: W[i, (i + o_k) % n] = w_k[i], W[i, i] = s[i], built entry by entry."""
    dense = np.zeros((n, n))
    weights = np.asarray(weights, float)
    if weights.ndim == 0:
        weights = np.full(len(offsets), float(weights))
    for k, o in enumerate(offsets):
        for i in range(n):
            dense[i, (i + o) % n] = weights[k] if weights.ndim == 1 else weights[k, i]
    dense[np.arange(n), np.arange(n)] = np.broadcast_to(self_weight, (n,))
    return dense


# --- circulant topologies ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "offsets", "weights", "self_weight"),
    [
        (8, [1, -1], [0.25, 0.5], 0.25),
        (7, [3, 9, -2], 0.2, np.linspace(0.1, 0.7, 7)),
        (6, [5, 2], np.arange(12.0).reshape(2, 6) + 1, 0.0),
        (1, [], [], 1.0),
        (2, [1], [0.5], 0.5),
    ],
)
def test_circulant_matches_reference_and_matrix_built_twin(n, offsets, weights, self_weight):
    lazy = Topology.circulant(n, offsets, weights, self_weight)
    dense = circulant_dense(n, offsets, weights, self_weight)
    eager = Topology(dense)
    np.testing.assert_array_equal(lazy.to_dense(), dense)
    for attr in ("indptr", "indices", "data"):
        left, right = getattr(lazy.to_sparse(), attr), getattr(eager.to_sparse(), attr)
        assert left.dtype == right.dtype
        np.testing.assert_array_equal(left, right)
    fresh = Topology.circulant(n, offsets, weights, self_weight)
    for left, right in zip(fresh.offdiag_csr(), eager.offdiag_csr(), strict=True):
        assert left.dtype == right.dtype
        np.testing.assert_array_equal(left, right)
    assert lazy == eager and eager == lazy
    assert fresh == Topology(dense)  # compares forms after detection
    assert eager.circulant_form() == fresh.circulant_form()
    np.testing.assert_array_equal(fresh.self_weights, np.diag(dense))
    for i in range(n):
        assert fresh.in_neighbors(i) == eager.in_neighbors(i)
        assert fresh.out_neighbors(i) == eager.out_neighbors(i)


def test_circulant_form_is_normalised():
    form = Topology.circulant(8, [-1, 10, 3], [0.1, 0.2, 0.3], np.full(8, 0.4)).circulant_form()
    np.testing.assert_array_equal(form.offsets, [2, 3, 7])
    np.testing.assert_array_equal(form.weights, [0.2, 0.3, 0.1])
    assert form.self_weight.shape == ()
    assert form.offsets.dtype == np.int64 and form.weights.dtype == np.float64
    assert not form.offsets.flags.writeable
    per_row = Topology.circulant(4, [1], np.array([[0.5, 0.5, 0.5, 0.5]]), 0.5).circulant_form()
    assert per_row.weights.shape == (1,)
    varying = Topology.circulant(4, [1], np.array([[0.5, 0.5, 0.5, 0.25]]), 0.5)
    assert varying.circulant_form().weights.shape == (1, 4)


def test_circulant_stays_lazy_for_a_million_agents():
    n = 10**6
    topo = Topology.circulant(n, [-1, -2, -4], 0.25, 0.25)
    assert topo.in_neighbors(0) == [n - 4, n - 2, n - 1]
    assert topo.out_neighbors(n - 1) == [0, 1, 3]
    assert topo.in_degrees()[5] == 3 and topo.out_degrees()[5] == 3
    assert topo.self_weights[7] == 0.25
    assert topo.uniform().circulant_form().weights.tolist() == [0.25] * 3
    assert topo.transpose().in_neighbors(0) == [1, 2, 4]
    assert "size=1000000" in repr(topo)
    assert topo == Topology.circulant(n, [n - 4, n - 2, -1], [0.25] * 3, 0.25)
    assert topo._csr is None  # nothing above needed the n x n matrix


def test_circulant_zero_weights():
    dropped = Topology.circulant(5, [1, 2], [0.0, 0.5], 0.5)
    np.testing.assert_array_equal(dropped.circulant_form().offsets, [2])
    weights = np.array([[0.5, 0.0, 0.5, 0.5, 0.5]])
    partial = Topology.circulant(5, [1], weights, 0.5)
    assert partial.to_sparse().nnz == 9
    assert partial.in_neighbors(1) == []
    assert partial.circulant_form() is None
    np.testing.assert_array_equal(partial.to_dense(), circulant_dense(5, [1], weights, 0.5))
    no_self = Topology.circulant(4, [1], 1.0, np.array([0.0, 1.0, 0.0, 1.0]))
    assert no_self.to_sparse().nnz == 6
    np.testing.assert_array_equal(no_self.self_weights, [0.0, 1.0, 0.0, 1.0])


def test_detects_circulant_exponential_and_ring_but_not_torus():
    exp_form = Topology(ft.exponential_two_graph(16).to_dense()).circulant_form()
    np.testing.assert_array_equal(exp_form.offsets, [8, 12, 14, 15])
    np.testing.assert_allclose(exp_form.weights, [0.2] * 4)
    ring_form = as_topology(ft.ring_graph(6).to_networkx()).circulant_form()
    np.testing.assert_array_equal(ring_form.offsets, [1, 5])
    assert Topology(ft.torus_2d_graph(16, (4, 4)).to_sparse()).circulant_form() is None
    assert ft.star_graph(5).circulant_form() is None
    assert Topology(random_matrix(10, 0.3, 0)).circulant_form() is None
    assert Topology(np.array([[0.5]])).circulant_form() == CirculantForm(
        np.zeros(0, np.int64), np.zeros(0), np.array(0.5)
    )


def test_detection_of_per_row_weights_and_the_offset_limit():
    dense = ft.ring_graph(6).to_dense()
    dense[2, 3] = 0.1
    dense[4, 4] = 0.9
    form = Topology(dense).circulant_form()
    assert form.weights.shape == (2, 6) and form.self_weight.shape == (6,)
    assert form.weights[0, 2] == 0.1 and form.self_weight[4] == 0.9
    assert Topology.circulant(6, form.offsets, form.weights, form.self_weight) == Topology(dense)
    assert ft.fully_connected_graph(65).circulant_form().num_offsets == 64
    assert ft.fully_connected_graph(66).circulant_form() is None
    missing = ft.ring_graph(6).to_dense()
    missing[0, 1] = 0.0  # offset 1 appears only 5 times
    assert Topology(missing).circulant_form() is None


def test_uniform_and_transpose():
    dense = random_matrix(10, 0.3, 5)
    topo = Topology(dense)
    pattern = (dense != 0) & ~np.eye(10, dtype=bool)
    expected = (pattern | np.eye(10, dtype=bool)) / (pattern.sum(axis=1, keepdims=True) + 1)
    uniform = topo.uniform().to_dense()
    # 1/(d+1) rounded to a multiple of 2**-53 and the self weight 1 - d w: rows sum exactly
    np.testing.assert_allclose(uniform, expected, rtol=0, atol=1e-15)
    assert (uniform.sum(axis=1) == 1.0).all() and ((uniform != 0) == (expected != 0)).all()
    np.testing.assert_array_equal(topo.transpose().to_dense(), dense.T)
    weights = np.arange(1.0, 13.0).reshape(2, 6)
    circ = Topology.circulant(6, [1, 4], weights, np.arange(6.0))
    transposed = circ.transpose()
    assert transposed.circulant_form() is not None
    np.testing.assert_array_equal(transposed.to_dense(), circ.to_dense().T)
    assert circ.transpose().transpose() == circ


def test_equality_with_more_offsets_than_detection_reports():
    eager = ft.fully_connected_graph(70)
    w, w_self = eager.to_dense()[0, 1], eager.to_dense()[0, 0]  # exact: not 1/70 both
    lazy = Topology.circulant(70, list(range(1, 70)), w, w_self)
    assert eager.circulant_form() is None and lazy.circulant_form().num_offsets == 69
    assert lazy == eager and eager == lazy


def test_pickle_round_trip():
    for topo in (ft.exponential_two_graph(9), ft.star_graph(5)):
        topo.to_sparse()
        clone = pickle.loads(pickle.dumps(topo))
        assert clone == topo
        np.testing.assert_array_equal(clone.to_dense(), topo.to_dense())
        assert clone.in_neighbors(1) == topo.in_neighbors(1)


def test_equality_and_repr():
    ring = ft.ring_graph(5)
    assert ring != ft.ring_graph(6)
    assert ring != ft.ring_graph(5, "left")
    assert ring != Topology(np.eye(5))
    assert Topology(np.eye(5)) == Topology(sp.eye_array(5))
    assert (ring == 5) is False
    assert "size=5" in repr(ring) and "circulant" in repr(ring)
    assert repr(ft.star_graph(4)) == "Topology(size=4, edges=6)"
    with pytest.raises(TypeError, match="unhashable type: 'Topology'"):
        hash(ring)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((0, [1], 0.5, 0.5), ValueError, "size must be >= 1, got 0"),
        ((4.0, [1], 0.5, 0.5), TypeError, "size must be an integer, got float"),
        ((8, [1, 8], 0.5, 0.5), ValueError, "circulant offset 8 is 0 mod size 8"),
        ((8, [1, 9], 0.5, 0.5), ValueError, "circulant offsets 1 and 9 coincide mod size 8"),
        ((8, [3, -5, 2], [1, 2, 3], 0.5), ValueError, "offsets 3 and -5 coincide"),
        ((8, [1.5], 0.5, 0.5), TypeError, "circulant offsets must be integers"),
        ((8, [[1]], 0.5, 0.5), ValueError, "circulant offsets must be 1-D"),
        ((8, [1, 2], [0.5], 0.5), ValueError, r"shape \(2,\) or \(2, 8\) .* got \(1,\)"),
        ((8, [1], np.ones((1, 7)), 0.5), ValueError, r"circulant weights must .* got \(1, 7\)"),
        ((8, [1, 2], [0.5, np.nan], 0.5), ValueError, "circulant weight for offset 2 is nan"),
        ((4, [1], [[1, 1, np.inf, 1]], 0.5), ValueError, r"offset 1 \(agent 2\) is inf"),
        (
            (4, [1], 0.5, [1, 1, 1]),
            ValueError,
            r"self_weight must be a scalar or have shape \(4,\)",
        ),
        ((4, [1], 0.5, [1, np.nan, 1, 1]), ValueError, "self_weight of agent 1 is nan"),
        ((4, [1], 0.5, np.inf), ValueError, "self_weight of agent 0 is inf"),
        ((4, [1], 1j, 0.5), TypeError, "circulant weights must be real"),
    ],
)
def test_circulant_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        Topology.circulant(*args)
