"""fogsim.algorithms in simulation, against theory and independent numpy computations.

References are built from dense weight matrices and the raw data with numpy only (linear
systems, lstsq, explicit recursions), never from the code under test.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim import topology as T

PUBLIC = {
    "LeastSquares",
    "MovingTarget",
    "Result",
    "choco_gossip",
    "choco_sgd",
    "consensus",
    "dgd",
    "diffusion_lms",
    "exact_diffusion",
    "gradient_tracking",
    "push_diging",
    "push_sum",
    "push_sum_estimate",
    "push_weights",
}


@pytest.fixture(autouse=True)
def _clean():
    yield
    fs.shutdown()


def world(n: int, topology=T.exponential_two_graph, weighted: bool = False) -> None:
    fs.init(backend="sim", size=n)
    fs.set_topology(topology(n) if callable(topology) else topology, is_weighted=weighted)


def lstsq(problem: A.LeastSquares) -> np.ndarray:
    d = problem.dim
    return np.linalg.lstsq(problem.A.reshape(-1, d), problem.b.reshape(-1), rcond=None)[0]


def scaled_problem(m: int = 30, d: int = 3, seed: int = 1) -> A.LeastSquares:
    """A.LeastSquares.random with rows scaled by 1/sqrt(m): local Hessians near I."""
    p = A.LeastSquares.random(m, d, seed=seed)
    return A.LeastSquares(p.A / np.sqrt(m), p.b / np.sqrt(m))


def local_grads(p: A.LeastSquares, x: np.ndarray) -> np.ndarray:
    """Return A_i^T (A_i x_i - b_i) for every agent, agent by agent."""
    return np.stack([p.A[i].T @ (p.A[i] @ x[i] - p.b[i]) for i in range(len(x))])


def hub_digraph(n: int) -> np.ndarray:
    """0/1 pattern P[i, j] = 1 for j -> i: a directed ring plus agent 0 sending to everyone."""
    P = np.roll(np.eye(n), 1, axis=0)  # j -> j + 1
    P[:, 0] = 1.0
    np.fill_diagonal(P, 0.0)
    return P


def random_push_schedule(n: int, seed: int):
    """Yield column-stochastic steps: a directed ring plus random extra edges each step."""
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(16):
        P = np.roll(np.eye(n), 1, axis=0) + (rng.random((n, n)) < 0.3)
        np.fill_diagonal(P, 0.0)
        pool.append(A.push_weights(P))
    while True:
        yield pool[rng.integers(len(pool))]


def test_public_namespace_is_pinned_and_documented():
    assert set(A.__all__) == PUBLIC
    for name in A.__all__:
        assert getattr(A, name).__doc__, name
    assert doctest.testmod(A).failed == 0  # the package docstring's example


# -- problems -----------------------------------------------------------------------------
def test_least_squares_gradient_and_solution_match_numpy():
    world(5)
    p = A.LeastSquares.random(7, 3, seed=3)
    assert p.A.shape == (5, 7, 3) and p.b.shape == (5, 7) and p.dim == 3
    x = np.random.default_rng(0).standard_normal((5, 3))
    want = local_grads(p, x)
    np.testing.assert_allclose(p.grad(x), want, rtol=1e-13, atol=1e-13)
    values = [0.5 * np.sum((p.A[i] @ x[i] - p.b[i]) ** 2) for i in range(5)]
    np.testing.assert_allclose(p.value(x), values, rtol=1e-13)
    sol = p.solution()
    assert sol.shape == (5, 3)
    np.testing.assert_allclose(sol, np.broadcast_to(lstsq(p), (5, 3)), rtol=1e-12, atol=1e-13)
    L = max(np.linalg.norm(p.A[i], 2) ** 2 for i in range(5))
    assert p.lipschitz() == pytest.approx(L, rel=1e-12)


def test_least_squares_random_is_per_agent_reproducible():
    world(3)
    small = A.LeastSquares.random(4, 2, seed=7, noise=0.0)
    fs.shutdown()
    world(6)
    large = A.LeastSquares.random(4, 2, seed=7, noise=0.0)
    np.testing.assert_array_equal(large.A[:3], small.A)  # agent r's data ignore n
    np.testing.assert_array_equal(large.x_true, small.x_true)
    np.testing.assert_allclose(large.solution()[0], large.x_true, rtol=1e-12)  # no noise
    assert not np.array_equal(A.LeastSquares.random(4, 2, seed=8).A, large.A)


def test_least_squares_rejects_bad_data():
    world(4)
    with pytest.raises(ValueError, match="A_local must be stacked over the 4"):
        A.LeastSquares(np.zeros((3, 5, 2)), np.zeros((3, 5)))
    with pytest.raises(ValueError, match="b_local must have shape"):
        A.LeastSquares(np.zeros((4, 5, 2)), np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"A_local must be stacked \(n, m, d\)"):
        A.LeastSquares(np.zeros((4, 5)), np.zeros((4, 5)))
    with pytest.raises(TypeError, match="A_local must hold real numbers"):
        A.LeastSquares(np.full((4, 2, 2), "a"), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="A_local holds values that are not finite"):
        A.LeastSquares(np.full((4, 2, 2), np.nan), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"sum_i A_i\^T A_i is singular"):
        A.LeastSquares(np.zeros((4, 2, 2)), np.zeros((4, 2))).solution()
    with pytest.raises(ValueError, match="m must be"):
        A.LeastSquares.random(0, 2)


# -- consensus ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 6, 8, 10, 12, 16, 20, 32])
def test_exponential_graph_rho_formula(n):
    assert T.rho(T.exponential_two_graph(n)) == pytest.approx(
        1 - 2 / (1 + math.ceil(math.log2(n))), abs=1e-12
    )


@pytest.mark.parametrize("n", [6, 12])
def test_static_consensus_matches_powers_of_w_and_contracts_at_rho(n):
    world(n)
    W = T.exponential_two_graph(n).uniform().to_dense()
    x0 = np.random.default_rng(n).standard_normal((n, 3))
    iters = 25
    result = A.consensus(x0, iters)
    ref, avg, want = x0.copy(), x0.mean(axis=0), []
    for _ in range(iters + 1):
        want.append(np.sqrt(np.mean(np.sum((ref - avg) ** 2, axis=1))))
        ref = W @ ref
    np.testing.assert_allclose(result.x, np.linalg.matrix_power(W, iters) @ x0, rtol=1e-12)
    np.testing.assert_allclose(result.history["distance"], want, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(result.history["consensus_error"], want, rtol=1e-9, atol=1e-15)
    err = result.history["consensus_error"]
    rho = 1 - 2 / (1 + math.ceil(math.log2(n)))
    assert np.all(err[1:] <= rho ** np.arange(1, iters + 1) * err[0] * (1 + 1e-12))
    assert err[-1] / err[-2] == pytest.approx(rho, rel=1e-3)  # the slowest mode dominates


def test_one_peer_dynamic_consensus_is_exact_after_log2_n_steps():
    world(8)
    x0 = np.random.default_rng(1).standard_normal((8, 2))
    result = A.consensus(x0, 6, schedule=T.one_peer_exponential_two(8))
    assert np.all(result.history["distance"][3:] < 1e-15)  # the 3 steps multiply to 11^T/n
    assert result.history["distance"][2] > 1e-3
    np.testing.assert_allclose(result.x, np.broadcast_to(x0.mean(0), (8, 2)), atol=1e-15)


def test_push_sum_reaches_the_average_where_plain_averaging_does_not():
    n = 6
    world(n)
    P = hub_digraph(n)
    C = A.push_weights(P)
    C_dense = C.to_dense()
    assert T.is_column_stochastic(C) and not T.is_row_stochastic(C)
    shares = P + np.eye(n)  # each agent splits equally between itself and its out-neighbors
    # equal shares, to the rounding that makes each column sum to exactly 1.0 (the self
    # share takes the others' rounding: at most 2**-54 each)
    np.testing.assert_allclose(C_dense, shares / shares.sum(axis=0), rtol=0, atol=n * 2.0**-54)
    assert (C_dense.sum(axis=0) == 1.0).all()
    x0 = np.random.default_rng(2).standard_normal((n, 3))
    avg = x0.mean(axis=0)
    pushed = A.push_sum(x0, 150, C)
    assert pushed.history["distance"][-1] < 1e-12
    np.testing.assert_allclose(pushed.x, np.broadcast_to(avg, (n, 3)), atol=1e-12)
    np.testing.assert_allclose(pushed.state["p"].sum(), n, rtol=1e-13)
    np.testing.assert_allclose(pushed.state["z"].sum(0), x0.sum(0), rtol=1e-12, atol=1e-13)
    # the ratio recursion against numpy
    z, p = x0.copy(), np.ones(n)
    for _ in range(10):
        z, p = C_dense @ z, C_dense @ p
    np.testing.assert_allclose(A.push_sum(x0, 10, C).x, z / p[:, None], rtol=1e-13)

    pulled = A.consensus(x0, 150, schedule=T.uniform_weights(P))  # agree, on the wrong value
    assert pulled.history["consensus_error"][-1] < 1e-12
    assert pulled.history["distance"][-1] > 1e-2
    plain = A.consensus(x0, 150, schedule=C)  # push weights without p: no agreement
    assert plain.history["consensus_error"][-1] > 1e-2


def test_push_sum_defaults_to_push_shares_of_the_current_topology():
    n = 6
    world(n, T.Topology(hub_digraph(n)))
    x0 = np.random.default_rng(3).standard_normal((n, 2))
    default = A.push_sum(x0, 30)
    explicit = A.push_sum(x0, 30, A.push_weights(hub_digraph(n)))
    np.testing.assert_array_equal(default.x, explicit.x)
    fs.set_topology(T.uniform_weights(hub_digraph(n)), is_weighted=True)
    with pytest.raises(ValueError, match="topology is weighted but its weights are not column-"):
        A.push_sum(x0, 3)
    with pytest.raises(ValueError, match="step 2: the weights are not column-stochastic"):
        steps = iter([A.push_weights(hub_digraph(n)), T.uniform_weights(hub_digraph(n))])
        A.push_sum(x0, 3, steps)


def test_push_sum_holds_the_estimate_of_an_agent_whose_p_underflows():
    n = 4
    world(n)
    x0 = np.random.default_rng(4).standard_normal((n, 2))
    away = np.eye(n)  # agent 0 keeps half and pushes half to agent 1; nothing reaches it
    away[:2, 0] = 0.5
    hub = A.push_weights(hub_digraph(n))

    def schedule(alone: int):
        yield from [away] * alone
        while True:
            yield hub

    ahead = A.push_sum(x0, 1100, schedule(1100))
    assert ahead.state["p"][0] == 0.0  # 2**-1100: z / p is 0 / 0 there
    assert all(np.isfinite(h).all() for h in ahead.history.values())
    np.testing.assert_array_equal(ahead.x[0], x0[0])  # halving is exact: the ratio is x0
    after = A.push_sum(x0, 1300, schedule(1100))
    assert np.isfinite(after.history["distance"]).all()
    np.testing.assert_allclose(after.x, np.broadcast_to(x0.mean(0), x0.shape), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_push_sum_estimate_divides_where_p_is_not_tiny(dtype):
    floor = np.sqrt(np.finfo(dtype).tiny)
    below = np.nextafter(floor, 0.0)
    x = np.array([[3.0, -6.0], [1.0, 2.0], [0.0, 0.0], [0.5, 0.25]], dtype=dtype)
    p = np.array([1.5, floor, below, 0.0])
    previous = np.full((4, 2), 7.0)
    z = A.push_sum_estimate(x, p, previous)
    assert z.dtype == np.float64 and z.shape == (4, 2)
    np.testing.assert_array_equal(z[0], [2.0, -4.0])
    np.testing.assert_array_equal(z[1], x[1] / floor)
    np.testing.assert_array_equal(z[2:], 7.0)  # held: p below the floor, or 0
    # one agent's value and float p, as distributed
    np.testing.assert_array_equal(A.push_sum_estimate(x[0], 1.5, x[0]), [2.0, -4.0])
    np.testing.assert_array_equal(A.push_sum_estimate(x[0], 0.0, 5.0), [5.0, 5.0])
    np.testing.assert_array_equal(A.push_sum_estimate(x[0, 0], 0.0, x[0, 0]), x[0, 0])
    assert previous.tolist() == [[7.0] * 2] * 4  # not written to


def test_push_sum_estimate_refuses_what_it_cannot_divide():
    with pytest.raises(TypeError, match="x must hold floats, got dtype int64"):
        A.push_sum_estimate(np.arange(4), np.ones(4), np.zeros(4))
    with pytest.raises(ValueError, match=r"p has shape \(3,\); expected one weight per agent"):
        A.push_sum_estimate(np.ones((4, 2)), np.ones(3), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"previous has shape \(3,\); expected x's shape"):
        A.push_sum_estimate(np.ones((4, 2)), np.ones(4), np.ones(3))


# -- decentralized gradient descent ------------------------------------------------------
def _blocks(p: A.LeastSquares) -> tuple[np.ndarray, np.ndarray]:
    """Return blkdiag(A_i^T A_i) and blkdiag(A_i^T) b."""
    n, _, d = p.A.shape
    H = np.zeros((n * d, n * d))
    rhs = np.zeros(n * d)
    for i in range(n):
        H[i * d : (i + 1) * d, i * d : (i + 1) * d] = p.A[i].T @ p.A[i]
        rhs[i * d : (i + 1) * d] = p.A[i].T @ p.b[i]
    return H, rhs


@pytest.mark.parametrize("topology", [T.exponential_two_graph, T.ring_graph])
def test_dgd_fixed_points_solve_their_linear_systems(topology):
    n, d, alpha = 6, 3, 0.02
    world(n, topology)
    p = A.LeastSquares.random(10, d, seed=1)
    W = topology(n).uniform().to_dense()
    H, rhs = _blocks(p)
    I_W = np.kron(np.eye(n) - W, np.eye(d))
    Wk = np.kron(W, np.eye(d))
    # x = W x - alpha grad(x):
    #   ((I - W) kron I + alpha blkdiag(A_i^T A_i)) x = alpha blkdiag(A_i^T) b
    awc_fixed = np.linalg.solve(I_W + alpha * H, alpha * rhs)
    # x = W (x - alpha grad(x)): ((I - W) kron I + alpha (W kron I) H) x = alpha (W kron I) rhs
    atc_fixed = np.linalg.solve(I_W + alpha * Wk @ H, alpha * Wk @ rhs)
    for form, fixed in (("awc", awc_fixed), ("atc", atc_fixed)):
        x = A.dgd(p, alpha, 800, form=form).x
        np.testing.assert_allclose(x.reshape(-1), fixed, rtol=0, atol=1e-10 * np.abs(fixed).max())
        assert np.abs(fixed.reshape(n, d) - lstsq(p)).max() > 1e-3  # biased: not x*
    assert np.abs(awc_fixed - atc_fixed).max() > 1e-4  # the two forms differ


def test_dgd_bias_is_proportional_to_the_step_size():
    n, d = 6, 3
    world(n)
    p = scaled_problem(30, d)
    W = T.exponential_two_graph(n).uniform().to_dense()
    x_star = lstsq(p)
    # First order: x(alpha) = 1 x* + alpha z + O(alpha^2), with (I - W) z = -g* (g* the local
    # gradients at x*) and sum_i H_i z_i = 0 fixing z's average.
    g = np.einsum("kji,kj->ki", p.A, np.einsum("kij,j->ki", p.A, x_star) - p.b)
    Hs = np.einsum("kji,kjl->kil", p.A, p.A)
    zp = np.linalg.lstsq(np.eye(n) - W, -g, rcond=None)[0]
    z = zp - np.linalg.solve(Hs.sum(0), np.einsum("kij,kj->i", Hs, zp))
    biases, deviations = [], []
    for alpha in (0.1, 0.05, 0.025):
        result = A.dgd(p, alpha, int(50 / alpha), form="awc")
        biases.append(result.history["distance"][-1])
        deviations.append(np.abs((result.x - x_star) / alpha - z).max() / np.abs(z).max())
        assert deviations[-1] < 2 * alpha
    assert biases[0] > 1e-4
    assert biases[0] / biases[1] == pytest.approx(2, rel=0.06)
    assert biases[1] / biases[2] == pytest.approx(2, rel=0.03)
    assert deviations[0] / deviations[1] == pytest.approx(2, rel=0.1)  # the error is O(alpha)


@pytest.mark.parametrize("form", ["atc", "awc"])
def test_dgd_steps_and_metrics_match_numpy(form):
    n, d, alpha = 5, 2, 0.05
    world(n, T.ring_graph)
    p = A.LeastSquares.random(4, d, seed=2)
    W = T.ring_graph(n).uniform().to_dense()
    x0 = np.random.default_rng(5).standard_normal((n, d))
    result = A.dgd(p, alpha, 4, form=form, x0=x0)
    x_star, x = lstsq(p), x0.copy()
    for k in range(5):
        if k:
            grad = local_grads(p, x)
            x = W @ (x - alpha * grad) if form == "atc" else W @ x - alpha * grad
        xbar = x.mean(axis=0)
        rms = np.sqrt(np.mean(np.sum((x - xbar) ** 2, axis=1)))
        dist = np.sqrt(np.mean(np.sum((x - x_star) ** 2, axis=1)))
        gbar = np.mean([p.A[i].T @ (p.A[i] @ xbar - p.b[i]) for i in range(n)], axis=0)
        assert result.history["consensus_error"][k] == pytest.approx(rms, rel=1e-10)
        assert result.history["distance"][k] == pytest.approx(dist, rel=1e-10)
        assert result.history["grad_norm"][k] == pytest.approx(np.linalg.norm(gbar), rel=1e-10)
    np.testing.assert_allclose(result.x, x, rtol=1e-12)


def test_dgd_takes_a_step_size_rule_and_a_gradient_function():
    world(4)
    p = A.LeastSquares.random(5, 2, seed=4)
    constant = A.dgd(p, 0.03, 20)
    ruled = A.dgd(p, lambda k: 0.03, 20)
    oracle = A.dgd(p.grad, 0.03, 20, x0=np.zeros((4, 2)), x_star=lstsq(p))
    np.testing.assert_array_equal(ruled.x, constant.x)
    np.testing.assert_array_equal(oracle.x, constant.x)
    np.testing.assert_allclose(oracle.history["distance"], constant.history["distance"], rtol=1e-12)
    diminishing = A.dgd(p, lambda k: 0.05 / (1 + k) ** 0.5, 20)
    assert not np.array_equal(diminishing.x, constant.x)


# -- exact methods ----------------------------------------------------------------------
@pytest.mark.parametrize("topology", [T.ring_graph, T.exponential_two_graph])
def test_exact_diffusion_reaches_the_least_squares_optimum(topology):
    world(8, topology)
    p = A.LeastSquares.random(10, 3, seed=0)
    result = A.exact_diffusion(p, 0.03, 500)
    x_star = lstsq(p)
    assert np.abs(result.x - x_star).max() < 1e-10
    assert result.history["distance"][-1] < 1e-10
    assert result.history["grad_norm"][-1] < 1e-9
    assert A.dgd(p, 0.03, 500).history["distance"][-1] > 1e-3  # where DGD stays biased


def test_exact_diffusion_steps_match_numpy():
    n, d, alpha = 4, 2, 0.05
    world(n, T.ring_graph)
    p = A.LeastSquares.random(3, d, seed=6)
    Wbar = (np.eye(n) + T.ring_graph(n).uniform().to_dense()) / 2
    x0 = np.random.default_rng(1).standard_normal((n, d))

    x, psi = x0, x0
    for _ in range(5):
        psi_next = x - alpha * local_grads(p, x)
        x, psi = Wbar @ (psi_next + x - psi), psi_next
    result = A.exact_diffusion(p, alpha, 5, x0=x0)
    np.testing.assert_allclose(result.x, x, rtol=1e-12)
    np.testing.assert_allclose(result.state["psi"], psi, rtol=1e-12)


@pytest.mark.parametrize("schedule", ["static", "one-peer"])
def test_gradient_tracking_reaches_the_least_squares_optimum(schedule):
    n = 8
    world(n)
    p = A.LeastSquares.random(10, 3, seed=5)
    sched = T.one_peer_exponential_two(n) if schedule == "one-peer" else None
    result = A.gradient_tracking(p, 0.02, 400, schedule=sched)
    assert np.abs(result.x - lstsq(p)).max() < 1e-10
    # y tracks the average gradient: its average equals mean_i grad f_i(x_i) at every step
    np.testing.assert_allclose(result.state["y"].mean(0), p.grad(result.x).mean(0), atol=1e-12)


def test_gradient_tracking_steps_match_numpy():
    n, d, alpha = 4, 2, 0.05
    world(n)
    p = A.LeastSquares.random(3, d, seed=6)
    schedule = T.one_peer_exponential_two(n)
    Ws = [next(schedule).weights.to_dense() for _ in range(5)]

    x = np.zeros((n, d))
    y = local_grads(p, x)
    for W in Ws:
        x_next = W @ (x - alpha * y)
        y = W @ (y + local_grads(p, x_next) - local_grads(p, x))
        x = x_next
    result = A.gradient_tracking(p, alpha, 5, schedule=T.one_peer_exponential_two(n))
    np.testing.assert_allclose(result.x, x, rtol=1e-12)
    np.testing.assert_allclose(result.state["y"], y, rtol=1e-12, atol=1e-14)


def test_push_diging_reaches_the_optimum_on_time_varying_digraphs():
    n = 6
    world(n)
    p = scaled_problem(20, 3, seed=2)
    result = A.push_diging(p, 0.1, 700, random_push_schedule(n, seed=0))
    assert np.abs(result.x - lstsq(p)).max() < 1e-10
    assert result.history["distance"][-1] < 1e-10
    np.testing.assert_allclose(result.state["v"].sum(), n, rtol=1e-12)
    # on the same directed steps, gradient tracking with pull weights misses the optimum
    pulled = (T.row_normalize(s) for s in random_push_schedule(n, seed=0))
    assert A.gradient_tracking(p, 0.1, 700, schedule=pulled).history["distance"][-1] > 1e-3


def test_push_diging_steps_match_numpy():
    n, d, alpha = 5, 2, 0.05
    world(n)
    p = A.LeastSquares.random(3, d, seed=7)
    Cs = [s.to_dense() for _, s in zip(range(4), random_push_schedule(n, seed=1), strict=False)]

    x = np.zeros((n, d))
    u, v, y = x, np.ones(n), local_grads(p, x)
    for C in Cs:
        u, v = C @ (u - alpha * y), C @ v
        x_next = u / v[:, None]
        y = C @ y + local_grads(p, x_next) - local_grads(p, x)
        x = x_next
    result = A.push_diging(p, alpha, 4, random_push_schedule(n, seed=1))
    np.testing.assert_allclose(result.x, x, rtol=1e-12)
    np.testing.assert_allclose(result.state["v"], v, rtol=1e-13)
    np.testing.assert_allclose(result.state["y"], y, rtol=1e-12, atol=1e-14)


# -- diffusion LMS -----------------------------------------------------------------------
@pytest.mark.parametrize("form", ["atc", "cta"])
@pytest.mark.parametrize("topology", [T.ring_graph, T.fully_connected_graph])
def test_diffusion_lms_matches_the_numpy_recursion(form, topology):
    n, d, mu, iters = 5, 3, 0.05, 30
    world(n, topology)
    W = topology(n).uniform().to_dense()
    stream = A.MovingTarget(d, batch=2, noise=0.1, period=50, seed=3)
    result = A.diffusion_lms(stream, mu, iters, form=form)
    x, want = np.zeros((n, d)), []
    want.append(np.sqrt(np.mean(np.sum((x - stream.target(0)) ** 2, axis=1))))
    for k in range(iters):
        u, dk, target = stream(k)
        if form == "cta":
            x = W @ x
        corr = np.stack([u[i].T @ (dk[i] - u[i] @ x[i]) for i in range(n)])
        x = W @ (x + mu * corr) if form == "atc" else x + mu * corr
        want.append(np.sqrt(np.mean(np.sum((x - target) ** 2, axis=1))))
    np.testing.assert_allclose(result.x, x, rtol=1e-12)
    np.testing.assert_allclose(result.history["distance"], want, rtol=1e-10)
    if topology is T.fully_connected_graph and form == "atc":  # one centralized LMS
        assert result.history["consensus_error"][-1] < 1e-14


def test_moving_target_stream_is_a_linear_model():
    world(4)
    stream = A.MovingTarget(3, batch=5, noise=0.0, amplitude=2.0, period=8, seed=1)
    u, d, w = stream(2)
    assert u.shape == (4, 5, 3) and d.shape == (4, 5) and w.shape == (3,)
    np.testing.assert_allclose(d, u @ w, rtol=1e-13)
    np.testing.assert_allclose(w, stream.center + 2.0 * np.sin(np.pi / 2 + stream.phase))
    np.testing.assert_array_equal(stream(2)[0], u)  # a function of k


def test_diffusion_lms_tracks_and_cooperation_helps():
    n, d = 10, 4
    world(n)
    still = A.MovingTarget(d, noise=0.0, period=math.inf, seed=2)
    assert A.diffusion_lms(still, 0.1, 600).history["distance"][-1] < 1e-10
    # steady-state mean-square deviation: noise-driven, so up to n-fold lower together
    for period, factor in ((math.inf, 6), (4000, 3)):
        moving = A.MovingTarget(d, noise=1.0, period=period, seed=2)
        together = A.diffusion_lms(moving, 0.02, 800).history["distance"][400:] ** 2
        alone = A.diffusion_lms(moving, 0.02, 800, schedule=np.eye(n)).history["distance"][400:]
        assert together.mean() < alone.mean() ** 2 / factor


# -- arguments, results, progress ----------------------------------------------------------
def test_bad_arguments_raise_clear_errors():
    world(4)
    p = A.LeastSquares.random(3, 2)
    x0 = np.zeros((4, 2))
    cases = [
        (TypeError, "iters must be an int", lambda: A.consensus(x0, 2.5)),
        (ValueError, "iters must be >= 0", lambda: A.consensus(x0, -1)),
        (ValueError, "x0 must be stacked over the 4", lambda: A.consensus(np.zeros((3, 2)), 2)),
        (ValueError, "alpha must be a finite number > 0", lambda: A.dgd(p, 0.0, 2)),
        (ValueError, "alpha must be a finite number > 0", lambda: A.exact_diffusion(p, np.nan, 2)),
        (TypeError, "alpha must be a real number", lambda: A.gradient_tracking(p, "0.1", 2)),
        (ValueError, "alpha(1) must be", lambda: A.dgd(p, lambda k: 0.1 - 0.1 * k, 3)),
        (ValueError, "form must be one of", lambda: A.dgd(p, 0.1, 2, form="cta")),
        (TypeError, "problem must have a grad", lambda: A.dgd(3, 0.1, 2)),
        (ValueError, "x0 is required", lambda: A.dgd(p.grad, 0.1, 2)),
        (
            ValueError,
            "problem.grad returned shape",
            lambda: A.dgd(lambda x: x[:, :1], 0.1, 2, x0=x0),
        ),
        (
            ValueError,
            "schedule ran out after 2 steps",
            lambda: A.consensus(x0, 3, iter([np.eye(4)] * 2)),
        ),
        (
            TypeError,
            "schedule must be a weight matrix or an iterator",
            lambda: A.consensus(x0, 3, [T.ring_graph(4)]),
        ),
        (
            ValueError,
            "schedule has 5 agents but the world has 4",
            lambda: A.consensus(x0, 3, np.eye(5)),
        ),
        (TypeError, "progress must be a bool", lambda: A.consensus(x0, 3, progress="yes")),
        (ValueError, "x_star of shape (3,)", lambda: A.dgd(p, 0.1, 2, x_star=np.zeros(3))),
        (
            ValueError,
            "schedule: the weights are not column-stochastic",
            lambda: A.push_diging(p, 0.1, 2, np.full((4, 4), 0.5)),
        ),
        (TypeError, "stream must be a function", lambda: A.diffusion_lms([], 0.1, 2)),
        (TypeError, "stream(0) must return (u, d)", lambda: A.diffusion_lms(lambda k: 1.0, 0.1, 2)),
        (ValueError, "mu must be", lambda: A.diffusion_lms(A.MovingTarget(2), -1.0, 2)),
        (ValueError, "period must be", lambda: A.MovingTarget(2, period=0)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc) as info:
            call()
        assert match in str(info.value), (match, str(info.value))


def test_result_plot_and_repr():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    world(4)
    result = A.gradient_tracking(A.LeastSquares.random(5, 2), 0.02, 10)
    assert set(result.history) == {"consensus_error", "distance", "grad_norm", "bytes"}
    assert all(v.shape == (11,) for v in result.history.values())
    ax = result.plot()
    assert len(ax.get_lines()) == 3 and ax.get_yscale() == "log"
    fig, ax2 = plt.subplots()
    assert result.plot(ax=ax2, keys="distance", logy=False) is ax2
    assert len(ax2.get_lines()) == 1 and ax2.get_yscale() == "linear"
    with pytest.raises(ValueError, match="no metric 'loss'"):
        result.plot(keys=["loss"])
    plt.close("all")
    assert "iters=10" in repr(result) and "distance=" in repr(result)


def test_progress_bar_on_request_changes_nothing(capsys):
    world(4)
    p = A.LeastSquares.random(5, 2)
    quiet = A.exact_diffusion(p, 0.02, 30)
    assert capsys.readouterr().err == ""
    shown = A.exact_diffusion(p, 0.02, 30, progress=True)
    err = capsys.readouterr().err
    assert "exact diffusion" in err and "30/30" in err
    np.testing.assert_array_equal(shown.x, quiet.x)
    for key in quiet.history:
        np.testing.assert_array_equal(shown.history[key], quiet.history[key])
