"""Fault injection in simulation, and what theory says survives it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import fogsim as fs
from fogsim import faults
from fogsim import topology as T
from tests import environment

N = 12


@pytest.fixture
def world():
    fs.init(backend="sim", size=N, seed=0, topology=T.exponential_two_graph)
    yield
    fs.shutdown()


def _messages(W):
    """The number of messages one step of ``W`` carries: its nonzero off-diagonal entries."""
    return np.count_nonzero(W) - np.count_nonzero(np.diag(W))


def _drawn_drops(W, p, seed, steps):
    """The drop masks the documented rule draws: per step, one uniform number per nonzero
    entry of ``W`` in CSR order; an off-diagonal entry is lost when its number is below p."""
    S = sp.csr_array(W)
    rows, cols = S.nonzero()
    rng = np.random.default_rng(seed)
    masks = []
    for _ in range(steps):
        mask = np.zeros(W.shape, dtype=bool)
        lost = (rows != cols) & (rng.random(S.nnz) < p)
        mask[rows[lost], cols[lost]] = True
        masks.append(mask)
    return masks


def _with_losses(W, lost, dropped_weight="self"):
    """``W`` with the entries in ``lost`` moved to the receiver, the sender, or nowhere."""
    moved = np.where(lost, W, 0.0)
    out = np.where(lost, 0.0, W)
    if dropped_weight == "self":
        out += np.diag(moved.sum(axis=1))
    elif dropped_weight == "sender":
        out += np.diag(moved.sum(axis=0))
    return out


def _within_binomial(count, trials, p):
    """Whether ``count`` lies within 5 standard deviations of a Binomial(trials, p)."""
    return abs(count - p * trials) <= 5.0 * np.sqrt(trials * p * (1.0 - p))


def test_consensus_converges_with_random_link_drops(world):
    x0 = fs.local(lambda r: np.array([float(r), r**2 / 10]))
    faults.inject(link_drop=0.3, seed=1)  # the dropped weight goes to the receiver itself
    x = x0
    for _ in range(300):
        x = fs.neighbor_allreduce(x)
    assert np.ptp(x, axis=0).max() < 1e-9  # agreement
    # rows stay stochastic, so the value is a convex combination, near (not at) the average
    assert np.all(x[0] >= x0.min(axis=0)) and np.all(x[0] <= x0.max(axis=0))
    f = faults.current()
    assert f.step == 300
    messages = 300 * _messages(T.exponential_two_graph(N).uniform().to_dense())
    assert (f.messages, f.unsent, f.delayed) == (messages, 0, 0)
    assert f.dropped > 0 and _within_binomial(f.dropped, messages, 0.3)
    assert f.delivered == messages - f.dropped


def test_seeded_drops_are_the_ones_the_seed_draws(world):
    W = T.exponential_two_graph(N).uniform().to_dense()
    x0 = fs.local(lambda r: np.array([float(r), r**2 / 10]))
    p, steps = 0.3, 12
    masks = _drawn_drops(W, p, seed=5, steps=steps)
    f = faults.inject(link_drop=p, seed=5)
    xs = [x0]
    for t in range(steps):
        xs.append(fs.neighbor_allreduce(xs[-1]))
        assert f.last.step == t
        np.testing.assert_array_equal(f.last.dropped.toarray(), masks[t])
        np.testing.assert_allclose(xs[-1], _with_losses(W, masks[t]) @ xs[-2], rtol=1e-13)
    expected = int(sum(m.sum() for m in masks))
    assert f.dropped == expected > 0
    assert (f.messages, f.delivered) == (steps * _messages(W), steps * _messages(W) - expected)
    # the drops change the result: three steps differ from three fault-free ones
    plain = np.linalg.matrix_power(W, 3) @ x0
    assert np.abs(xs[3] - plain).max() > 1e-3
    # the same seed draws the same drops; another seed other ones
    again = faults.inject(link_drop=p, seed=5)
    x = x0
    for _ in range(steps):
        x = fs.neighbor_allreduce(x)
    assert again.dropped == f.dropped
    np.testing.assert_array_equal(x, xs[-1])
    other = faults.inject(link_drop=p, seed=6)
    fs.neighbor_allreduce(x0)
    assert not np.array_equal(other.last.dropped.toarray(), masks[0])


@pytest.mark.parametrize("dropped_weight", ["self", "sender", "none"])
def test_link_drop_one_loses_every_message_and_zero_none(world, dropped_weight):
    W = T.exponential_two_graph(N).uniform().to_dense()
    x0 = fs.local(lambda r: np.array([float(r) + 1.0]))
    everything = faults.inject(link_drop=1.0, dropped_weight=dropped_weight)
    x = x0
    for _ in range(3):
        x = fs.neighbor_allreduce(x)
    assert everything.dropped == everything.messages == 3 * _messages(W) > 0
    assert everything.delivered == everything.unsent == 0
    lost = (W != 0) & ~np.eye(N, dtype=bool)
    np.testing.assert_array_equal(everything.last.dropped.toarray(), lost)
    want = np.linalg.matrix_power(_with_losses(W, lost, dropped_weight), 3) @ x0
    np.testing.assert_allclose(x, want, rtol=1e-13)
    assert np.abs(x - np.linalg.matrix_power(W, 3) @ x0).max() > 0.1  # not the fault-free x
    nothing = faults.inject(link_drop=0.0, dropped_weight=dropped_weight)
    x = x0
    for _ in range(3):
        x = fs.neighbor_allreduce(x)
    assert nothing.messages == nothing.delivered == 3 * _messages(W)
    assert nothing.dropped == 0
    assert nothing.last.dropped.nnz == 0
    np.testing.assert_allclose(x, np.linalg.matrix_power(W, 3) @ x0, rtol=1e-13)


def test_push_sum_keeps_the_mass_under_link_drops(world):
    g = T.exponential_two_graph(N)  # directed: push to r + 1, r + 2, r + 4, r + 8
    A = (g.to_dense() != 0).astype(float)
    np.fill_diagonal(A, 1.0)
    W = A / A.sum(axis=0, keepdims=True)  # column-stochastic: each agent splits its mass
    x0 = np.random.default_rng(3).standard_normal(N)
    z = np.stack([x0, np.ones(N)], axis=1)
    f = faults.inject(link_drop=0.4, dropped_weight="sender", seed=2)  # lost shares come back
    for t in range(400):
        z = fs.neighbor_allreduce(z, src_weights=W)
        if t == 4:
            z5 = z.copy()
    np.testing.assert_allclose(z.sum(axis=0), [x0.sum(), N], rtol=1e-12)  # mass conserved
    np.testing.assert_allclose(z[:, 0] / z[:, 1], x0.mean(), rtol=1e-9)
    assert f.dropped > 0 and _within_binomial(f.dropped, 400 * _messages(W), 0.4)
    # the same mass, but not the fault-free iterates
    plain = np.linalg.matrix_power(W, 5) @ np.stack([x0, np.ones(N)], axis=1)
    np.testing.assert_allclose(z5.sum(axis=0), plain.sum(axis=0), rtol=1e-12)
    assert np.abs(z5 - plain).max() > 1e-2


def test_without_returning_the_weight_push_sum_loses_mass(world):
    g = T.exponential_two_graph(N)
    A = (g.to_dense() != 0).astype(float)
    np.fill_diagonal(A, 1.0)
    W = A / A.sum(axis=0, keepdims=True)
    z = np.stack([np.arange(N, dtype=float), np.ones(N)], axis=1)
    f = faults.inject(link_drop=0.4, dropped_weight="none", seed=2)
    for _ in range(20):
        before = z
        z = fs.neighbor_allreduce(z, src_weights=W)
        # exactly the lost shares are gone: sum over lost (i, j) of W[i, j] z_j
        lost = f.last.dropped.toarray()
        gone = np.where(lost, W, 0.0).sum(axis=0) @ before
        np.testing.assert_allclose(z.sum(axis=0), before.sum(axis=0) - gone, rtol=1e-12)
    assert f.dropped > 0
    assert z[:, 1].sum() < 0.5 * N  # what theory says too: dropped mass is gone


def test_dgd_with_a_failed_agent_reaches_the_optimum_of_the_others():
    n, dim = 10, 3
    fs.init(backend="sim", size=n, seed=0, topology=T.ring_graph)  # symmetric, 1/3 weights
    try:
        rng = np.random.default_rng(0)
        A = rng.standard_normal((n, 8, dim))
        b = rng.standard_normal((n, 8)) + 3.0 * (np.arange(n) == 4)[:, None]  # agent 4 differs

        def optimum(agents):
            return np.linalg.lstsq(A[agents].reshape(-1, dim), b[agents].reshape(-1), rcond=None)[0]

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
        f = faults.current()
        W = T.ring_graph(n).uniform().to_dense()
        # every step, agent 4's two messages out and two in are not sent
        assert f.unsent == 6000 * (np.count_nonzero(W[4]) + np.count_nonzero(W[:, 4]) - 2) > 0
        assert f.dropped == 0 and f.delivered == f.messages - f.unsent
        np.testing.assert_array_equal(f.last.down, np.arange(n) == 4)
        # agent 4 ran alone: gradient steps on its own data, towards its own optimum
        assert np.linalg.norm(x[4] - optimum([4])) < np.linalg.norm(x[4] - target)
    finally:
        fs.shutdown()


def test_a_failed_agent_keeps_its_value_and_is_not_heard(world):
    f = faults.inject(fail={2: 1})
    x0 = fs.local(lambda r: np.array([float(r)]))
    W = T.exponential_two_graph(N).uniform().to_dense()
    x1 = fs.neighbor_allreduce(x0)  # step 0: agent 2 still up
    np.testing.assert_allclose(x1, W @ x0, rtol=1e-14)
    assert f.unsent == 0 and not f.last.down.any()
    x2 = fs.neighbor_allreduce(x1)  # step 1: agent 2 down
    links = np.count_nonzero(W[2]) + np.count_nonzero(W[:, 2]) - 2  # its messages out and in
    assert f.unsent == links > 0
    assert (f.messages, f.delivered, f.dropped) == (2 * _messages(W), 2 * _messages(W) - links, 0)
    np.testing.assert_array_equal(f.last.down, np.arange(N) == 2)
    assert np.abs(x2 - W @ x1).max() > 0.1  # not the fault-free step
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
    f = faults.inject(stragglers={0: 2})
    W = T.exponential_two_graph(N).uniform().to_dense()
    xs = [fs.local(lambda r: np.array([float(r) + 1.0]))]
    delays = []
    for _ in range(4):
        xs.append(fs.neighbor_allreduce(xs[-1]))
        delays.append(f.last.delay.copy())
    # agent 0 is heard min(2, t) steps late; its messages out are delayed from step 1 on
    np.testing.assert_array_equal(delays, [[min(2, t)] + [0] * (N - 1) for t in range(4)])
    assert f.delayed == 3 * (np.count_nonzero(W[:, 0]) - 1) > 0
    assert (f.dropped, f.unsent, f.delivered) == (0, 0, 4 * _messages(W))
    assert np.abs(xs[3] - W @ xs[2]).max() > 1e-3  # not the fault-free step
    for t in range(4):  # step t: the others see agent 0 as it was at step max(t - 2, 0)
        stale = xs[t].copy()
        stale[0] = xs[max(t - 2, 0)][0]
        want = (W - np.diag(np.diag(W))) @ stale + np.diag(W)[:, None] * xs[t]
        np.testing.assert_allclose(xs[t + 1], want, rtol=1e-14)


def test_noise_is_reproducible_from_the_seed_and_zero_faults_change_nothing(world):
    x0 = fs.local(lambda r: np.array([float(r), 1.0]))
    plain = fs.neighbor_allreduce(x0)
    none = faults.inject()  # nothing at all
    assert (none.messages, none.last) == (0, None)
    np.testing.assert_allclose(fs.neighbor_allreduce(x0), plain, rtol=1e-15)
    assert none.messages == _messages(T.exponential_two_graph(N).uniform().to_dense())
    assert (none.dropped, none.unsent, none.delayed) == (0, 0, 0)
    assert none.delivered == none.messages
    assert none.last.dropped.nnz == 0 and not none.last.down.any() and not none.last.delay.any()
    runs = []
    for _ in range(2):
        faults.inject(noise=0.1, link_drop=0.2, seed=7)
        runs.append(fs.neighbor_allreduce(fs.neighbor_allreduce(x0)))
    np.testing.assert_array_equal(runs[0], runs[1])
    faults.inject(noise=0.1, seed=8)
    noisy = fs.neighbor_allreduce(fs.neighbor_allreduce(x0))
    assert not np.array_equal(noisy, runs[0])
    quiet = fs.neighbor_allreduce(plain)
    assert np.abs(noisy - quiet).max() > 1e-3  # the noise changed the result
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

    fault_tolerance = environment.load_example("fault_tolerance")
    curves = fault_tolerance.main(
        ["--steps", "200", "--fail-at", "30", "--plot", str(tmp_path / "f.png")]
    )
    server, dec = curves["parameter server"], curves["decentralized"]
    assert server[-1] == server[30] > 10 * dec[-1]  # frozen at the failure; DGD went on
    assert (tmp_path / "f.png").stat().st_size > 5_000


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_noise_adds_the_same_numbers(world, monkeypatch, dtype):
    pytest.importorskip("numba")
    x0 = fs.local(lambda r: np.array([float(r), 1.0, -2.0 * r], dtype=dtype))
    runs = []
    for compile_after in (1 << 62, 0, 200):  # np.add.at, numba, numba from the third step
        monkeypatch.setattr(faults, "_COMPILE_AFTER", compile_after)
        faults.inject(noise=0.1, link_drop=0.3, stragglers={2: 1}, fail={5: 1}, seed=3)
        x = x0
        for _ in range(4):
            x = fs.neighbor_allreduce(x)
        runs.append(x)
    assert runs[0].dtype == dtype
    np.testing.assert_array_equal(runs[1], runs[0])
    np.testing.assert_array_equal(runs[2], runs[0])
