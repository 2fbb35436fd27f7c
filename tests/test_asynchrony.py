"""The simulator's model of asynchrony for window ops: activation, delays, losses, seeds."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import _api_windows as W
from fogsim import _context
from fogsim import topology as T
from fogsim._asynchrony import Asynchrony


@pytest.fixture
def world():
    def make(topo, seed=None):
        fs.init(size=topo.size, topology=topo, seed=seed)
        return _context.current().backend

    yield make
    fs.shutdown()


def data(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3))


def push_sum(topo, x, rounds, barrier_every=False, name="ps"):
    """Run push-sum rounds on window ``name`` (created zero-initialized, p carried)."""
    n = topo.size
    share = np.array([1.0 / (len(topo.out_neighbors(j)) + 1) for j in range(n)])
    dst = [dict.fromkeys(topo.out_neighbors(j), share[j]) for j in range(n)]
    for _ in range(rounds):
        W.win_accumulate(x, name, self_weight=share, dst_weights=dst)
        if barrier_every:
            fs.barrier()
        W.win_update_then_collect(name)


def gossip_script(topo, x, rounds=30):
    """Puts, gets and updates with the default weights; returns x after every round."""
    W.win_create(x, "g", zero_init=True)
    seen = []
    for k in range(rounds):
        if k % 3 == 2:
            W.win_get("g")
        else:
            W.win_put(x, "g", self_weight=0.9)
        seen.append(np.array(W.win_update("g")))
    return np.stack(seen)


# -- the model's arguments ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (("sometimes",), {}, ValueError, "activation must be one of"),
        ((3,), {}, TypeError, "activation must be a string"),
        (("bernoulli",), {"p_active": 0.0}, ValueError, r"p_active must be in \(0, 1\]"),
        (("bernoulli",), {"p_active": 1.5}, ValueError, r"p_active must be in \(0, 1\], got 1.5"),
        (("bernoulli",), {"p_active": "half"}, TypeError, "p_active must be a real"),
        (("bernoulli",), {"p_active": np.nan}, ValueError, "p_active must be finite"),
        (("speeds",), {}, ValueError, "activation='speeds' needs speeds"),
        (("speeds",), {"speeds": [1.0, 2.0]}, ValueError, r"speeds has shape \(2,\).*\(4,\)"),
        (("speeds",), {"speeds": [1.0, 0.0, 1.0, 1.0]}, ValueError, r"speeds\[1\] is 0.0"),
        (("speeds",), {"speeds": [1.0, np.inf, 1.0, 1.0]}, ValueError, r"speeds\[1\] is inf"),
        (("speeds",), {"speeds": ["a"] * 4}, TypeError, "speeds must hold real numbers"),
        (("one",), {"speeds": [1.0] * 4}, ValueError, "only used with activation='speeds'"),
        (("all",), {"max_delay": -1}, ValueError, "max_delay must be >= 0"),
        (("all",), {"max_delay": 1.5}, TypeError, "max_delay must be an integer"),
        (("all",), {"max_delay": True}, TypeError, "max_delay must be an integer"),
        (("all",), {"loss": 1.0}, ValueError, r"loss must be in \[0, 1\)"),
        (("all",), {"loss": -0.1}, ValueError, r"loss must be in \[0, 1\), got -0.1"),
        (("all",), {"seed": -3}, ValueError, "seed must be >= 0"),
        (("all",), {"seed": "x"}, TypeError, "seed must be an integer"),
        (("all",), {"jitter": 2}, TypeError, "unexpected keyword argument 'jitter'"),
    ],
)
def test_bad_arguments_are_refused(world, args, kwargs, exc, match):
    world(T.ring_graph(4))
    with pytest.raises(exc, match=match):
        Asynchrony(4, *args, **kwargs)
    with pytest.raises(exc, match=match):
        W.set_asynchrony(*args, **kwargs)


def test_the_model_draws_what_it_says():
    a = Asynchrony(5, "speeds", speeds=[1, 1, 1, 1, 1e-9], max_delay=2, loss=0.5, seed=1)
    active = np.zeros(5)
    for _ in range(400):
        active[a.draw_active()] += 1
    assert active[4] == 0 and (active[:4] == 400).all()  # speed 1 = the fastest: always
    delays = a.draw_delays(10_000)
    assert set(np.unique(delays).tolist()) == {0, 1, 2}
    assert abs(a.draw_lost(10_000).mean() - 0.5) < 0.03
    one = Asynchrony(5, "one", seed=2)
    assert {int(one.draw_active()[0]) for _ in range(200)} == set(range(5))
    lock = Asynchrony(5)
    assert lock.lock_step and lock.draw_active() is None and lock.draw_delays(3) is None
    assert lock.draw_lost(3) is None and "activation='all'" in repr(lock)


# -- reproducibility ------------------------------------------------------------------------
def run_async(seed_call=None, seed_world=None, activation="bernoulli"):
    topo = T.exponential_two_graph(6)
    fs.init(size=6, topology=topo, seed=seed_world)
    try:
        W.set_asynchrony(activation, max_delay=3, loss=0.1, seed=seed_call)
        return gossip_script(topo, data(6))
    finally:
        fs.shutdown()


def test_same_seed_same_run_different_seed_different_run():
    a, b, c = run_async(seed_call=1), run_async(seed_call=1), run_async(seed_call=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # without a seed in the call, the world's seed decides; without either, a fixed one
    np.testing.assert_array_equal(run_async(seed_world=7), run_async(seed_world=7))
    assert not np.array_equal(run_async(seed_world=7), run_async(seed_world=8))
    np.testing.assert_array_equal(run_async(), run_async())
    np.testing.assert_array_equal(run_async(seed_world=7), run_async(seed_call=7))


# -- activation ------------------------------------------------------------------------------
def test_one_activation_changes_exactly_one_row_per_round(world):
    topo = T.exponential_two_graph(8)
    world(topo)
    W.set_asynchrony("one", seed=3)
    x = data(8) + 5.0  # no zeros: scaling or combining always changes a row
    W.win_create(x, "w", zero_init=True)
    changed_agents = set()
    for _ in range(60):
        before = x.copy()
        W.win_put(x, "w", self_weight=0.5)
        W.win_update("w")
        changed = np.flatnonzero((x != before).any(axis=1))
        assert changed.size == 1
        changed_agents.add(int(changed[0]))
    assert len(changed_agents) > 4


def test_a_barrier_makes_every_agent_act_until_the_round_ends(world):
    topo = T.ring_graph(6)
    world(topo)
    W.set_asynchrony("one", max_delay=3, seed=12)
    x = data(6) + 5.0
    W.win_create(x, "w", zero_init=True)
    W.win_put(x, "w", self_weight=0.5)  # one agent puts (its messages may be late)
    fs.barrier()
    before = x.copy()
    W.win_put(x, "w", self_weight=0.5)
    W.win_update("w")  # every agent put and updated
    assert (x != before).all(axis=1).all()
    before = x.copy()
    W.win_put(x, "w", self_weight=0.5)
    W.win_update("w")  # a new round: one agent again
    assert (x != before).any(axis=1).sum() == 1


def test_inactive_agents_neither_send_nor_update(world):
    topo = T.ring_graph(6)
    backend = world(topo)
    W.set_asynchrony("speeds", speeds=[1, 1e-12, 1, 1e-12, 1, 1e-12], seed=0)  # evens act
    x = data(6)
    before = x.copy()
    W.win_create(x, "w", zero_init=True)
    W.win_put(x, "w", self_weight=0.5)
    W.win_get("w")
    win = backend.window("w")
    recv, send = win.edges
    evens = np.arange(0, 6, 2)
    np.testing.assert_array_equal(x[1::2], before[1::2])  # odd agents did not scale x
    np.testing.assert_array_equal(x[evens], before[evens] * 0.5)
    # puts came from even senders only, gets went to even receivers only
    from_even = (send % 2 == 0).astype(int)
    np.testing.assert_array_equal(win.versions, from_even + (recv % 2 == 0))
    clone = W.win_update("w", clone=True)  # the whole stacked array, odd rows unchanged
    assert clone.shape == x.shape
    np.testing.assert_array_equal(clone[1::2], x[1::2])


# -- delays and losses -----------------------------------------------------------------------
def advance(n, name="w"):
    """End a round without reading any buffer."""
    W.win_update(name, self_weight=1.0, neighbor_weights=[{}] * n)


def test_messages_arrive_within_max_delay_rounds(world):
    topo = T.exponential_two_graph(8)
    backend = world(topo)
    W.set_asynchrony("all", max_delay=3, seed=4)
    x = data(8)
    W.win_create(x, "w", zero_init=True)
    W.win_put(x, "w")
    win = backend.window("w")
    in_flight = [win.in_flight()]
    assert 0 < in_flight[0] < win.versions.size  # some messages late, some not
    assert (win.versions == 0).sum() == in_flight[0]
    for _ in range(3):
        advance(8)
        in_flight.append(win.in_flight())
        assert (win.versions == 0).sum() == in_flight[-1]
    assert in_flight == sorted(in_flight, reverse=True) and in_flight[-1] == 0
    assert (win.versions == 1).all()  # all landed, none twice
    np.testing.assert_array_equal(win.buffers, x[win.edges[1]])


def test_arrival_by_round_and_send_order_at_a_barrier(world, monkeypatch):
    topo = T.ring_graph(5)
    backend = world(topo)
    W.set_asynchrony("all", max_delay=3)
    delays = iter([3, 1, 2, 2, 1])  # of the five puts below, every message alike
    monkeypatch.setattr(
        backend.windows.asynchrony, "draw_delays", lambda m: np.full(m, next(delays))
    )
    x = data(5)
    W.win_create(x, "w", zero_init=True)
    win = backend.window("w")
    send = win.edges[1]

    def put(k):
        W.win_put(
            x, "w", dst_weights=[dict.fromkeys(topo.out_neighbors(j), float(k)) for j in range(5)]
        )

    for k in (1, 2, 3):
        put(k)
    np.testing.assert_array_equal(win.buffers, 0)  # all late
    for k in (2, 3, 1):  # put 2 lands in round 1, put 3 in round 2, put 1 in round 3
        advance(5)
        np.testing.assert_array_equal(win.buffers, x[send] * float(k))
    put(4)  # due in 2 rounds
    put(5)  # due in 1 round
    fs.barrier()  # delivers in send order, not arrival order: the last put wins
    np.testing.assert_array_equal(win.buffers, x[send] * 5.0)
    assert (win.versions == 5).all() and win.in_flight() == 0


def test_a_delayed_get_carries_the_value_as_of_the_send(world):
    topo = T.ring_graph(6)
    backend = world(topo)
    W.set_asynchrony("all", max_delay=2, seed=5)
    x = data(6)
    old = x.copy()
    W.win_create(x, "w", zero_init=True)
    W.win_get("w", src_weights=[{j: 2.0 for j in topo.in_neighbors(i)} for i in range(6)])
    win = backend.window("w")
    assert 0 < win.in_flight() < win.versions.size
    W.win_put(x, "w", self_weight=3.0, dst_weights=[[] for _ in range(6)])  # exposes 3 x
    fs.barrier()
    recv, send = win.edges
    np.testing.assert_array_equal(win.buffers, old[send] * 2.0)
    assert win.in_flight() == 0 and (win.versions == 1).all()


@pytest.mark.parametrize(
    ("topo", "rounds"),
    [(T.exponential_two_graph(8), 10_000), (T.star_graph(6), 2_000)],
    ids=["exp2-8", "star-6"],
)
def test_asynchronous_push_sum_conserves_mass(world, topo, rounds):
    world(topo)
    n = topo.size
    W.set_asynchrony("bernoulli", p_active=0.6, max_delay=5, seed=8)
    W.set_win_ops_with_associated_p(True)
    x = data(n, seed=9)
    initial = x.sum(axis=0)
    W.win_create(x, "ps", zero_init=True)
    win = _context.current().backend.window("ps")
    saw_in_flight = False
    for k in range(rounds // 20):
        push_sum(topo, x, 20)
        xf, pf = win.in_flight_mass()
        saw_in_flight |= pf > 0
        total_p = W.win_associated_p("ps").sum() + win.p_buffers.sum() + pf
        assert abs(total_p - n) < 1e-12 * n, k
        total_x = x.sum(axis=0) + win.buffers.sum(axis=0) + xf
        np.testing.assert_allclose(total_x, initial, rtol=1e-12, atol=1e-12)
    assert saw_in_flight
    fs.barrier()  # every agent catches up: this round's collect is everyone's
    W.win_update_then_collect("ps")
    p = W.win_associated_p("ps")
    assert abs(p.sum() - n) < 1e-12 * n
    np.testing.assert_allclose(x.sum(axis=0), initial, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x / p[:, None], np.broadcast_to(initial / n, x.shape), atol=1e-9)


def test_lost_messages_lose_mass(world):
    topo = T.exponential_two_graph(8)
    world(topo)
    W.set_asynchrony("all", max_delay=2, loss=0.2, seed=10)
    W.set_win_ops_with_associated_p(True)
    x = data(8)
    W.win_create(x, "ps", zero_init=True)
    push_sum(topo, x, 50)
    fs.barrier()
    W.win_update_then_collect("ps")
    assert W.win_associated_p("ps").sum() < 8 - 1e-3


# -- lock-step ------------------------------------------------------------------------------
def lock_step_run(configure):
    topo = T.exponential_two_graph(7)
    fs.init(size=7, topology=topo)
    try:
        configure()
        W.set_win_ops_with_associated_p(True)
        x = data(7).astype(np.float32)
        out = gossip_script(topo, x)
        y = data(7, seed=1)
        W.win_create(y, "ps", zero_init=True)
        push_sum(topo, y, 20, barrier_every=True)
        return out, y, W.win_associated_p("ps")
    finally:
        fs.shutdown()


@pytest.mark.parametrize(
    "configure",
    [
        lambda: W.set_asynchrony("all", seed=3),
        lambda: W.set_asynchrony("bernoulli", p_active=1.0, seed=4),
        lambda: W.set_asynchrony("speeds", speeds=[2.0] * 7),
    ],
    ids=["all", "bernoulli-1", "equal-speeds"],
)
def test_all_active_without_delay_is_lock_step(configure):
    base = lock_step_run(lambda: None)
    for got, want in zip(lock_step_run(configure), base, strict=True):
        np.testing.assert_array_equal(got, want)


def test_delays_flushed_by_barriers_are_lock_step():
    """With a barrier after every send, delays change nothing (push-sum barriers each op)."""
    topo = T.exponential_two_graph(7)
    results = []
    for delay in (0, 4):
        fs.init(size=7, topology=topo)
        W.set_asynchrony("all", max_delay=delay, seed=11)
        W.set_win_ops_with_associated_p(True)
        y = data(7, seed=1)
        W.win_create(y, "ps", zero_init=True)
        push_sum(topo, y, 30, barrier_every=True)
        results.append((y, W.win_associated_p("ps")))
        fs.shutdown()
    for got, want in zip(*results, strict=True):
        np.testing.assert_array_equal(got, want)
