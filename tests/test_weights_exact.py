"""Exact stochasticity: every weight rule's promised sums are exactly 1.0, so consensus keeps
its mean (issue 17, point 10).

Property tests over random graphs, the builders and every rule: (a) the rows, and the columns
where the rule promises them, sum to exactly 1.0: exactly in real numbers (``math.fsum`` of the
line and -1 is 0; ``math.fsum`` alone rounds ``1 - 2**-54`` to 1.0) and as computed by
``numpy.sum`` and by plain sums in ascending and descending order; (b) ``10**4`` steps of
``neighbor_allreduce`` with a column-stochastic rule keep the network mean within ``8 n``
ulps. A control shows that the bound bites: the ring with every weight ``1/3`` (three stored
values summing to ``1 - 2**-54``) drifts past it. The same check runs under MPI in
``dual_cases.case_weight_rules_preserve_the_mean_over_10k_steps``.

Exact weights remove the drift's bias, not the rounding of the products ``w_ij x_j``: while
the agents still disagree, each step moves the mean by a fraction of an ulp, so the drift
grows with the time the graph takes to mix (a path of 13 agents ends up some 20 n ulps away).
Property (b) therefore draws graphs whose second largest eigenvalue modulus is at most 0.9
(agreement within some 350 steps); within 10**4 steps they all reach a fixed point.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import fogsim as fs
from fogsim import topology as T
from fogsim.algorithms import push_weights
from fogsim.demos import fish_school as fish

STEPS = 10_000
#: The mean may move by this many ulps per agent over STEPS steps (rounding of the products).
ULPS_PER_AGENT = 8
#: Property (b) keeps graphs that mix at least this fast (second largest |eigenvalue|).
MAX_SLEM = 0.9

EXACT = settings(max_examples=150, deadline=None, derandomize=True, database=None)
CONSENSUS = settings(max_examples=24, deadline=None, derandomize=True, database=None)


def _sums_to_one(lines: np.ndarray, what: str) -> None:
    """Assert every line sums to exactly 1.0, whatever the order of the additions."""
    for i, line in enumerate(lines.tolist()):
        nonzero = [v for v in line if v]
        assert math.fsum([*line, -1.0]) == 0.0, (what, i, math.fsum([*line, -1.0]))
        assert np.sum(np.asarray(line)) == 1.0, (what, i)
        assert sum(sorted(nonzero)) == 1.0 and sum(sorted(nonzero, reverse=True)) == 1.0, (what, i)
    assert (lines.sum(axis=1) == 1.0).all(), what


def _check_exact(topo: T.Topology, rows: bool, columns: bool) -> None:
    W = topo.to_dense()
    if rows:
        _sums_to_one(W, "row")
    if columns:
        _sums_to_one(np.ascontiguousarray(W.T), "column")


# -- random graphs ------------------------------------------------------------------------
@st.composite
def patterns(draw, symmetric=None, connected=False, dense=False):
    """A 0/1 adjacency (zero diagonal): random, undirected or directed (strongly connected)."""
    n = draw(st.integers(1, 13))
    p = draw(st.sampled_from([0.5, 0.7, 1.0] if dense else [0.15, 0.3, 0.6, 1.0]))
    seed = draw(st.integers(0, 2**16))
    sym = draw(st.booleans()) if symmetric is None else symmetric
    rng = np.random.default_rng(seed)
    A = rng.random((n, n)) < p
    if sym:
        A = np.triu(A, 1)
        A = A | A.T
    np.fill_diagonal(A, False)
    if connected and n > 1:  # a directed cycle through a random order
        order = rng.permutation(n)
        A[np.roll(order, -1), order] = True
    return A.astype(np.float64), seed


def _is_regular_symmetric(A: np.ndarray) -> bool:
    degrees = A.sum(axis=1)
    return bool((A == A.T).all() and (degrees == degrees[0]).all())


BUILDERS = {
    "ring": T.ring_graph,
    "ring-left": lambda n: T.ring_graph(n, "left"),
    "ring-right": lambda n: T.ring_graph(n, "right"),
    "exp2": T.exponential_two_graph,
    "exp3": lambda n: T.exponential_graph(n, 3),
    "sym-exp2": T.symmetric_exponential_graph,
    "torus": T.torus_2d_graph,
    "hypercube": lambda n: T.hypercube_graph(1 << (n.bit_length() - 1)),
    "full": T.fully_connected_graph,
    "star": T.star_graph,
    "mesh": T.mesh_grid_2d_graph,
    "erdos-renyi": lambda n: T.erdos_renyi_graph(n, 0.4, seed=n),
    "geometric": lambda n: T.random_geometric_graph(n, 0.5, seed=n),
}
#: Builders whose weights are doubly stochastic (the rest are circulant: columns too).
SYMMETRIC_BUILDERS = {
    "ring",
    "sym-exp2",
    "torus",
    "hypercube",
    "full",
    "star",
    "mesh",
    "erdos-renyi",
    "geometric",
}


# -- (a) exact sums -----------------------------------------------------------------------
@EXACT
@given(st.sampled_from(sorted(BUILDERS)), st.integers(1, 70))
@example("ring", 3)
@example("sym-exp2", 64)  # 11 neighbors: 1/12 does not add up in every order unrounded
def test_builders_have_exact_rows_and_columns(name, n):
    topo = BUILDERS[name](n)
    # Circulant weights with one weight per offset have equal row and column multisets.
    circulant = topo.circulant_form() is not None
    _check_exact(topo, rows=True, columns=circulant or name in SYMMETRIC_BUILDERS)


@EXACT
@given(patterns())
def test_pattern_rules_are_exact(drawn):
    A, _ = drawn
    symmetric = bool((A == A.T).all())
    _check_exact(T.uniform_weights(A), rows=True, columns=_is_regular_symmetric(A))
    _check_exact(T.Topology(A).uniform(), rows=True, columns=_is_regular_symmetric(A))
    _check_exact(T.metropolis_hastings_weights(A), rows=True, columns=True)
    _check_exact(T.max_degree_weights(A), rows=True, columns=symmetric)
    _check_exact(push_weights(A), rows=False, columns=True)  # push-sum's equal shares
    i, j = np.nonzero(np.triu(np.maximum(A, A.T), 1))
    _check_exact(fish.metropolis_hastings(A.shape[0], i, j), rows=True, columns=True)


@EXACT
@given(patterns())
def test_pattern_rules_keep_their_formulas_to_the_rounding(drawn):
    """Exactness moves a weight by at most 2**-54 (its row's pivot by one per other weight)."""
    A, _ = drawn
    n = A.shape[0]
    eye = np.eye(n, dtype=bool)
    d_in = A.sum(axis=1)
    S = np.maximum(A, A.T)  # Metropolis-Hastings and max-degree: the symmetrized pattern
    d = S.sum(axis=1)
    formulas = {
        "uniform_weights": (T.uniform_weights(A), (A + eye) / (d_in + 1)[:, None]),
        "metropolis_hastings_weights": (
            T.metropolis_hastings_weights(A),
            S / (1 + np.maximum(d[:, None], d[None, :])),
        ),
        "max_degree_weights": (T.max_degree_weights(A), A / (1 + d_in.max(initial=0))),
    }
    for name, (topo, off) in formulas.items():
        W = topo.to_dense()
        want = np.where(eye, 0.0, off)
        if name == "uniform_weights":
            want = off
        else:
            want = want + np.diag(1.0 - want.sum(axis=1))
        tol = 2.0**-54 * (1 + n * eye)  # the pivot (diagonal) absorbs the others' rounding
        assert (np.abs(W - want) <= tol).all(), (name, np.abs(W - want).max())
        assert ((W != 0) == (want != 0)).all(), name


@EXACT
@given(patterns(), st.booleans())
def test_normalizations_are_exact(drawn, self_loops):
    A, seed = drawn
    n = A.shape[0]
    weights = A * np.random.default_rng(seed).random((n, n))
    if self_loops or n == 1:
        weights += np.diag(np.random.default_rng(seed + 1).random(n) + 0.01)
    rows_ok = (weights.sum(axis=1) > 0).all()
    cols_ok = (weights.sum(axis=0) > 0).all()
    if rows_ok:
        _check_exact(T.row_normalize(weights), rows=True, columns=False)
    if cols_ok:
        _check_exact(T.column_normalize(weights), rows=False, columns=True)


@EXACT
@given(patterns(connected=True))
def test_doubly_stochastic_is_exact_both_ways(drawn):
    A, _ = drawn
    _check_exact(T.doubly_stochastic(A), rows=True, columns=True)


@EXACT
@given(patterns(symmetric=True), st.sampled_from(range(1, 9)))
def test_circulant_normalizations_are_exact(drawn, k):
    """Per-agent circulant weights (the compact form) normalize exactly too."""
    _, seed = drawn
    rng = np.random.default_rng(seed)
    n = 2 * k + 1
    offsets = rng.choice(np.arange(1, n), size=min(k, n - 1), replace=False)
    topo = T.Topology.circulant(
        n, offsets, rng.random((offsets.shape[0], n)) + 0.01, rng.random(n) + 0.01
    )
    rows = T.row_normalize(topo)
    columns = T.column_normalize(topo)
    assert rows.circulant_form() is not None and columns.circulant_form() is not None
    _check_exact(rows, rows=True, columns=False)
    _check_exact(columns, rows=False, columns=True)


@EXACT
@given(patterns(), st.integers(0, 5))
def test_one_peer_steps_are_exact(drawn, start):
    A, _ = drawn
    step = next(T.one_peer_schedule(A, start=start))
    _check_exact(step.weights, rows=True, columns=False)


# -- (b) the mean over 10**4 consensus steps ----------------------------------------------
def _slem(topo: T.Topology) -> float:
    """Return the second largest eigenvalue modulus of W (0 for one agent)."""
    moduli = np.sort(np.abs(np.linalg.eigvals(topo.to_dense())))
    return float(moduli[-2]) if moduli.shape[0] > 1 else 0.0


def _consensus(topo: T.Topology, weighted: bool = True, steps: int = STEPS) -> tuple:
    """Run ``steps`` of neighbor_allreduce from 8 vectors x0 in [1, 2); return (x0, x)."""
    n = topo.size
    x0 = 1.0 + np.random.default_rng(n).random((n, 8))
    with fs.Context(backend="sim", size=n) as world:
        fs.set_topology(topo, is_weighted=weighted)
        x = x0
        for _ in range(steps):
            x = fs.neighbor_allreduce(x)
    world.close()
    return x0, x


def _drift_ulps(x0: np.ndarray, x: np.ndarray) -> float:
    """Return the largest change of a column's mean, in ulps of its initial mean."""
    n = x0.shape[0]
    drifts = []
    for c in range(x0.shape[1]):
        m0 = math.fsum(x0[:, c]) / n
        drifts.append(abs(math.fsum(x[:, c]) / n - m0) / np.spacing(m0))
    return max(drifts)


def _assert_mean_kept(topo: T.Topology, weighted: bool = True) -> None:
    assume(_slem(topo if weighted else topo.uniform()) <= MAX_SLEM)
    x0, x = _consensus(topo, weighted)
    assert np.isfinite(x).all()
    drift = _drift_ulps(x0, x)
    assert drift <= ULPS_PER_AGENT * topo.size, (drift, topo)


MEAN_RULES = {
    "metropolis-hastings": lambda A: T.metropolis_hastings_weights(A),
    "max-degree (symmetric)": lambda A: T.max_degree_weights(np.maximum(A, A.T)),
    "doubly-stochastic": lambda A: T.doubly_stochastic(A),
    "column-normalize": lambda A: T.column_normalize(A + np.eye(A.shape[0])),
}


@CONSENSUS
@given(patterns(connected=True, dense=True), st.sampled_from(sorted(MEAN_RULES)))
def test_column_stochastic_rules_keep_the_mean(drawn, rule):
    A, _ = drawn
    _assert_mean_kept(MEAN_RULES[rule](A))


@CONSENSUS
@given(st.sampled_from(sorted(SYMMETRIC_BUILDERS | {"exp2", "ring-left"})), st.integers(3, 24))
@example("ring", 11)
@example("exp2", 24)
def test_builders_keep_the_mean(name, n):
    _assert_mean_kept(BUILDERS[name](n))


@pytest.mark.parametrize(
    "pattern",
    [T.ring_graph(8), T.torus_2d_graph(12), T.hypercube_graph(16)],
    ids=["ring", "torus", "hypercube"],
)
def test_default_uniform_weights_keep_the_mean(pattern):
    """The backends' weights for ``is_weighted=False`` (``1/(d+1)``) on regular graphs."""
    assert _slem(pattern.uniform()) <= MAX_SLEM
    x0, x = _consensus(pattern, weighted=False)
    assert _drift_ulps(x0, x) <= ULPS_PER_AGENT * pattern.size


def test_the_mean_check_catches_inexact_weights():
    """Control: every weight ``1/3`` on the ring (rows sum to ``1 - 2**-54``) fails the bound."""
    n = 11
    inexact = T.Topology.circulant(n, [1, n - 1], 1 / 3, 1 / 3)
    assert _slem(inexact) <= MAX_SLEM
    assert math.fsum([*inexact.to_dense()[0], -1.0]) == -(2.0**-54)
    x0, x = _consensus(inexact)
    assert _drift_ulps(x0, x) > ULPS_PER_AGENT * n
    x0, x = _consensus(T.ring_graph(n))
    assert _drift_ulps(x0, x) <= ULPS_PER_AGENT * n
