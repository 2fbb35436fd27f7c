"""A batch of S least-squares problems solved at once (state ``(n, S, d)``) equals S runs.

``LeastSquares.random(m, d, seed=[...])`` stacks one problem per seed after the agent
axis; the optimization methods then record every metric per problem. Each problem's
iterates and metrics must be those of its own run, to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A

SEEDS = [3, 0, 7]


@pytest.fixture
def ring8():
    fs.init(size=8, topology=fs.topology.ring_graph)
    yield
    fs.shutdown()


def test_random_with_seeds_stacks_each_seeds_problem(ring8):
    batch = A.LeastSquares.random(m=6, d=3, seed=SEEDS, noise=0.2)
    assert batch.A.shape == (8, 3, 6, 3) and batch.b.shape == (8, 3, 6)
    assert batch.batch_shape == (3,)
    assert A.LeastSquares.random(m=6, d=3, seed=1).batch_shape == ()
    for s, seed in enumerate(SEEDS):
        one = A.LeastSquares.random(m=6, d=3, seed=seed, noise=0.2)
        np.testing.assert_array_equal(batch.A[:, s], one.A)
        np.testing.assert_array_equal(batch.b[:, s], one.b)
        np.testing.assert_array_equal(batch.x_true[s], one.x_true)


def test_solution_of_a_batch_is_each_problems_least_squares_solution(ring8):
    batch = A.LeastSquares.random(m=6, d=3, seed=SEEDS)
    x = batch.solution()
    assert x.shape == (8, 3, 3)
    for s in range(3):
        # the global least-squares solution from all agents' rows, by numpy's lstsq
        rows = batch.A[:, s].reshape(-1, 3)
        rhs = batch.b[:, s].reshape(-1)
        expected = np.linalg.lstsq(rows, rhs, rcond=None)[0]
        np.testing.assert_allclose(x[:, s], np.broadcast_to(expected, (8, 3)), rtol=1e-10)


@pytest.mark.parametrize(
    "method", [A.dgd, A.gradient_tracking, A.exact_diffusion], ids=lambda f: f.__name__
)
def test_a_batch_runs_as_its_problems_run_one_by_one(ring8, method):
    batch = A.LeastSquares.random(m=10, d=4, seed=SEEDS)
    stacked = method(batch, alpha=0.01, iters=30)
    assert stacked.x.shape == (8, 3, 4)
    for s, seed in enumerate(SEEDS):
        alone = method(A.LeastSquares.random(m=10, d=4, seed=seed), alpha=0.01, iters=30)
        np.testing.assert_allclose(stacked.x[:, s], alone.x, rtol=1e-12, atol=1e-15)
        for key in ("consensus_error", "distance", "grad_norm"):
            assert stacked.history[key].shape == (31, 3)
            np.testing.assert_allclose(
                stacked.history[key][:, s], alone.history[key], rtol=1e-12, atol=1e-15
            )
        # one message carries all three problems: three times each run's bytes
        np.testing.assert_allclose(stacked.history["bytes"], 3 * alone.history["bytes"])


def test_dgd_awc_with_a_diminishing_step_on_a_batch(ring8):
    batch = A.LeastSquares.random(m=5, d=2, seed=[1, 2])
    stacked = A.dgd(batch, alpha=lambda k: 0.02 / (1 + k), iters=20, form="awc")
    for s, seed in enumerate([1, 2]):
        alone = A.dgd(
            A.LeastSquares.random(m=5, d=2, seed=seed),
            alpha=lambda k: 0.02 / (1 + k),
            iters=20,
            form="awc",
        )
        np.testing.assert_allclose(stacked.history["distance"][:, s], alone.history["distance"])


def test_a_batch_refuses_bad_seeds_and_shapes(ring8):
    with pytest.raises(ValueError, match="seed must be an int >= 0 or a non-empty sequence"):
        A.LeastSquares.random(m=5, d=2, seed=[])
    with pytest.raises(ValueError, match="seed must be an int >= 0 or a non-empty sequence"):
        A.LeastSquares.random(m=5, d=2, seed=[0, [1, 2]])
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        A.LeastSquares.random(m=5, d=2, seed=[0, -1])
    with pytest.raises(ValueError, match=r"A_local must be stacked \(n, m, d\)"):
        A.LeastSquares(np.zeros((8, 2, 2, 5, 2)), np.zeros((8, 2, 2, 5)))
