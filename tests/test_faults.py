"""Fault injection in simulation, and what theory says survives it."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import faults
from fogsim import topology as T

N = 12


@pytest.fixture
def world():
    fs.init(backend="sim", size=N, seed=0, topology=T.exponential_two_graph)
    yield
    fs.shutdown()


def test_consensus_converges_with_random_link_drops(world):
    x0 = fs.local(lambda r: np.array([float(r), r**2 / 10]))
    faults.inject(link_drop=0.3, seed=1)  # the dropped weight goes to the receiver itself
    x = x0
    for _ in range(300):
        x = fs.neighbor_allreduce(x)
    assert np.ptp(x, axis=0).max() < 1e-9  # agreement
    # rows stay stochastic, so the value is a convex combination, near (not at) the average
    assert np.all(x[0] >= x0.min(axis=0)) and np.all(x[0] <= x0.max(axis=0))
    assert faults.current().step == 300


def test_push_sum_keeps_the_mass_under_link_drops(world):
    g = T.exponential_two_graph(N)  # directed: push to r + 1, r + 2, r + 4, r + 8
    A = (g.to_dense() != 0).astype(float)
    np.fill_diagonal(A, 1.0)
    W = A / A.sum(axis=0, keepdims=True)  # column-stochastic: each agent splits its mass
    x0 = np.random.default_rng(3).standard_normal(N)
    z = np.stack([x0, np.ones(N)], axis=1)
    faults.inject(link_drop=0.4, dropped_weight="sender", seed=2)  # lost shares come back
    for _ in range(400):
        z = fs.neighbor_allreduce(z, src_weights=W)
    np.testing.assert_allclose(z.sum(axis=0), [x0.sum(), N], rtol=1e-12)  # mass conserved
    np.testing.assert_allclose(z[:, 0] / z[:, 1], x0.mean(), rtol=1e-9)


def test_without_returning_the_weight_push_sum_loses_mass(world):
    g = T.exponential_two_graph(N)
    A = (g.to_dense() != 0).astype(float)
    np.fill_diagonal(A, 1.0)
    W = A / A.sum(axis=0, keepdims=True)
    z = np.stack([np.arange(N, dtype=float), np.ones(N)], axis=1)
    faults.inject(link_drop=0.4, dropped_weight="none", seed=2)
    for _ in range(20):
        z = fs.neighbor_allreduce(z, src_weights=W)
    assert z[:, 1].sum() < 0.5 * N  # what theory says too: dropped mass is gone


def test_dgd_with_a_failed_agent_reaches_the_optimum_of_the_others():
    n, dim = 10, 3
    fs.init(backend="sim", size=n, seed=0, topology=T.ring_graph)  # symmetric, 1/3 weights
    try:
        rng = np.random.default_rng(0)
        A = rng.standard_normal((n, 8, dim))
        b = rng.standard_normal((n, 8)) + 3.0 * (np.arange(n) == 4)[:, None]  # agent 4 differs

        def optimum(agents):
            return np.linalg.lstsq(A[agents].reshape(-1, dim), b[agents].reshape(-1),
                                   rcond=None)[0]  # fmt: skip

        live = [i for i in range(n) if i != 4]
        faults.inject(fail={4: 0})  # agent 4 is down from the first step
        x = np.zeros((n, dim))
        for t in range(6000):
            grad = np.einsum("aji,aj->ai", A, np.einsum("aij,aj->ai", A, x) - b)
            x = fs.neighbor_allreduce(x - 0.02 / (1 + t / 100) * grad)
        mean_live = x[live].mean(axis=0)
        target, everyone = optimum(live), optimum(list(range(n)))
        assert np.linalg.norm(mean_live - target) < 0.05 * np.linalg.norm(everyone - target)
        assert np.ptp(x[live], axis=0).max() < 0.05  # the live agents agree
        # agent 4 ran alone: gradient steps on its own data, towards its own optimum
        assert np.linalg.norm(x[4] - optimum([4])) < np.linalg.norm(x[4] - target)
    finally:
        fs.shutdown()


def test_a_failed_agent_keeps_its_value_and_is_not_heard(world):
    faults.inject(fail={2: 1})
    x0 = fs.local(lambda r: np.array([float(r)]))
    W = T.exponential_two_graph(N).uniform().to_dense()
    x1 = fs.neighbor_allreduce(x0)  # step 0: agent 2 still up
    np.testing.assert_allclose(x1, W @ x0, rtol=1e-14)
    x2 = fs.neighbor_allreduce(x1)  # step 1: agent 2 down
    Wf = W.copy()
    for i in range(N):  # receivers keep the weight they gave agent 2
        if i != 2:
            Wf[i, i] += Wf[i, 2]
            Wf[i, 2] = 0.0
    Wf[2] = 0.0
    Wf[2, 2] = 1.0
    np.testing.assert_allclose(x2, Wf @ x1, rtol=1e-14)
    assert x2[2, 0] == x1[2, 0]
    np.testing.assert_array_equal(faults.current().failed(), np.arange(N) == 2)


def test_stragglers_are_heard_late(world):
    faults.inject(stragglers={0: 2})
    W = T.exponential_two_graph(N).uniform().to_dense()
    xs = [fs.local(lambda r: np.array([float(r) + 1.0]))]
    for _ in range(4):
        xs.append(fs.neighbor_allreduce(xs[-1]))
    for t in range(4):  # step t: the others see agent 0 as it was at step max(t - 2, 0)
        stale = xs[t].copy()
        stale[0] = xs[max(t - 2, 0)][0]
        want = (W - np.diag(np.diag(W))) @ stale + np.diag(W)[:, None] * xs[t]
        np.testing.assert_allclose(xs[t + 1], want, rtol=1e-14)


def test_noise_is_reproducible_from_the_seed_and_zero_faults_change_nothing(world):
    x0 = fs.local(lambda r: np.array([float(r), 1.0]))
    plain = fs.neighbor_allreduce(x0)
    faults.inject()  # nothing at all
    np.testing.assert_allclose(fs.neighbor_allreduce(x0), plain, rtol=1e-15)
    runs = []
    for _ in range(2):
        faults.inject(noise=0.1, link_drop=0.2, seed=7)
        runs.append(fs.neighbor_allreduce(fs.neighbor_allreduce(x0)))
    np.testing.assert_array_equal(runs[0], runs[1])
    faults.inject(noise=0.1, seed=8)
    assert not np.array_equal(fs.neighbor_allreduce(fs.neighbor_allreduce(x0)), runs[0])
    faults.clear()
    assert faults.current() is None
    np.testing.assert_array_equal(fs.neighbor_allreduce(x0), plain)


def test_bad_fault_arguments_are_named(world):
    with pytest.raises(ValueError, match=r"link_drop must be in \[0, 1\], got 1.5"):
        faults.inject(link_drop=1.5)
    with pytest.raises(TypeError, match="link_drop must be a number"):
        faults.inject(link_drop="often")
    with pytest.raises(ValueError, match=f"fail: agent {N} is out of range for {N} agents"):
        faults.inject(fail={N: 3})
    with pytest.raises(ValueError, match="stragglers: delay for agent 1 must be >= 0"):
        faults.inject(stragglers={1: -2})
    with pytest.raises(TypeError, match=r"fail must be a dict \{agent: step\}"):
        faults.inject(fail=[1, 2])
    with pytest.raises(ValueError, match="dropped_weight must be one of"):
        faults.inject(dropped_weight="receiver")
    with pytest.raises(ValueError, match="noise must be a standard deviation >= 0"):
        faults.inject(noise=-1)
    assert faults.current() is None  # nothing half-installed


def test_the_example_keeps_learning_after_the_failure_that_stops_the_server(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    try:
        import fault_tolerance
    finally:
        sys.path.pop(0)
    curves = fault_tolerance.main(["--steps", "200", "--fail-at", "30",
                                   "--plot", str(tmp_path / "f.png")])  # fmt: skip
    server, dec = curves["parameter server"], curves["decentralized"]
    assert server[-1] == server[30] > 10 * dec[-1]  # frozen at the failure; DGD went on
    assert (tmp_path / "f.png").stat().st_size > 5_000
