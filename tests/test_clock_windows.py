"""Window ops in virtual time (fogsim.clock): expected times worked out by hand.

The model (see fogsim.clock's docstring): a put, accumulate or get of N bytes is a message
that leaves its origin (the sender; a get's reader) at the origin's clock and lands after
``alpha + c N / w`` (``c`` the op's messages sharing one link); the origin's clock moves on
until its last message has landed; a receiver's window ops see exactly the messages that
have landed by its clock. A barrier lands everything: every agent leaves at the last
arrival or landing plus ``ceil(lg n) alpha``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fogsim as fs
from fogsim import clock as C
from fogsim import topology as T
from fogsim._asynchrony import Asynchrony
from fogsim.hierarchy import Level, Network
from tests.test_clock import ALPHA, W, ring_world  # latency (s), bandwidth (B/s), a ring

D = 100  # float64 per agent: N = 800 bytes per message
N = 8 * D


@pytest.fixture(autouse=True)
def _shutdown():
    yield
    fs.shutdown()


def window(name: str):
    return fs._context.current().backend.window(name)


def only(n: int, sender: int, dst: dict) -> list[dict]:
    return [dst if r == sender else {} for r in range(n)]


def test_a_put_lands_at_the_senders_clock_plus_its_message_time():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, float(r + 1)))
    fs.win_create(x, "w", zero_init=True)
    C.compute(np.array([1e-4, 0, 0, 0]))
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 1.0}))
    land = 1e-4 + ALPHA + N / W  # one message on agent 0's link
    np.testing.assert_allclose(C.now(), [land, 0, 0, 0], rtol=1e-15)  # blocking: until it lands
    recv, send = window("w").edges
    edge = int(np.flatnonzero((recv == 1) & (send == 0))[0])

    fs.win_update("w", self_weight=1.0, neighbor_weights=only(n, 1, {0: 1.0, 2: 0.0}))
    assert fs.get_win_version("w")[1][0] == 0  # agent 1 at t = 0 does not see it
    np.testing.assert_array_equal(window("w").buffers[edge], 0.0)
    np.testing.assert_array_equal(x[1], 2.0)

    C.compute(np.array([0, land * (1 - 1e-9), 0, 0]))  # just before the landing
    assert fs.get_win_version("w")[1][0] == 0
    C.compute(np.array([0, land * 1e-9, 0, 0]))  # at the landing (rounding aside)
    C.compute(np.array([0, 1e-12, 0, 0]))
    assert fs.get_win_version("w")[1][0] == 1
    np.testing.assert_array_equal(window("w").buffers[edge], 1.0)
    fs.win_update("w", self_weight=1.0, neighbor_weights=only(n, 1, {0: 1.0, 2: 0.0}))
    np.testing.assert_array_equal(x[1], 3.0)  # 2 + agent 0's 1
    assert window("w").in_flight() == 0


def test_lock_step_puts_share_the_link_and_give_the_same_numbers():
    n = 6

    def run(clock: bool):
        fs.init(size=n, topology=T.ring_graph)
        if clock:
            C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W))
        x = fs.local(lambda r: np.linspace(0, 1, D) * (r + 1))
        fs.win_create(x, "w")
        for _ in range(3):
            fs.win_put(x, "w")
            fs.win_update("w")
        out = (x.copy(), C.now() if clock else None)
        fs.shutdown()
        return out

    plain, _ = run(False)
    timed, now = run(True)
    np.testing.assert_array_equal(timed, plain)  # every message lands before each update
    m = ALPHA + 2 * N / W  # two messages share each agent's link
    np.testing.assert_allclose(now, 3 * m, rtol=1e-14)


def test_a_message_between_machines_takes_the_slower_levels_time():
    n = 4  # two machines of two agents
    fs.init(size=n, topology=T.fully_connected_graph)
    fast, slow = Level(2, alpha=1e-6, bandwidth=1e10), Level(2, alpha=1e-4, bandwidth=1e8)
    C.start(C.Platform(Network([fast, slow])))
    x = fs.local(lambda r: np.full(D, float(r)))
    fs.win_create(x, "w", zero_init=True)
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 1.0}))  # within its machine
    inside = 1e-6 + N / 1e10
    np.testing.assert_allclose(C.now(), [inside, 0, 0, 0], rtol=1e-15)
    fs.win_put(x, "w", dst_weights=only(n, 1, {2: 1.0}))  # across machines: levels 0 and 1
    across = max(1e-6 + N / 1e10, 1e-4 + N / 1e8)
    np.testing.assert_allclose(C.now(), [inside, across, 0, 0], rtol=1e-15)
    C.compute(np.array([0, 0, across * (1 - 1e-9), 0]))
    assert fs.get_win_version("w")[2][1] == 0
    C.compute(np.array([0, 0, across * 2e-9, 0]))
    assert fs.get_win_version("w")[2][1] == 1
    assert fs.get_win_version("w")[1][0] == 1  # agent 1, at across > inside, has it: both
    assert window("w").versions.sum() == 2


def test_a_get_moves_the_readers_clock_and_fills_its_buffers():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, float(r)))
    fs.win_create(x, "w", zero_init=True)
    C.compute(np.array([0, 0, 5e-5, 0]))
    fs.win_get("w", src_weights=only(n, 2, {1: 1.0, 3: 1.0}))
    m = ALPHA + 2 * N / W  # two messages into agent 2's link
    np.testing.assert_allclose(C.now(), [0, 0, 5e-5 + m, 0], rtol=1e-15)
    assert fs.get_win_version("w")[2] == {1: 1, 3: 1}
    out = fs.win_update("w", self_weight=0.0, neighbor_weights=only(n, 2, {1: 0.5, 3: 0.5}))
    np.testing.assert_array_equal(out[2], 2.0)  # (1 + 3) / 2


def test_puts_to_one_buffer_land_in_order_and_the_last_one_wins():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, float(r)))
    fs.win_create(x, "w", zero_init=True)
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 1.0}))  # lands at m
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 2.0}))  # leaves at m, lands at 2m
    m = ALPHA + N / W
    np.testing.assert_allclose(C.now()[0], 2 * m, rtol=1e-15)
    C.compute(np.array([0, 3 * m, 0, 0]))
    assert fs.get_win_version("w")[1][0] == 2
    recv, send = window("w").edges
    edge = int(np.flatnonzero((recv == 1) & (send == 0))[0])
    np.testing.assert_array_equal(window("w").buffers[edge], 0.0)  # agent 0's x is 0
    x[0] = 1.0
    fs.win_accumulate(x, "w", dst_weights=only(n, 0, {1: 1.0}))
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 5.0}))
    fs.win_accumulate(x, "w", dst_weights=only(n, 0, {1: 1.0}))
    C.compute(np.array([0, 10 * m, 0, 0]))
    np.testing.assert_array_equal(window("w").buffers[edge], 6.0)  # put 5, then add 1


def test_barrier_and_free_land_everything_and_the_agents_leave_together():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, 1.0))
    fs.win_create(x, "w", zero_init=True)
    fs.win_create(x, "v", zero_init=True)
    C.compute(np.array([3e-4, 0, 1e-4, 0]))
    fs.win_accumulate_nonblocking(x, "w", dst_weights=only(n, 2, {3: 1.0}))
    land = 1e-4 + ALPHA + N / W
    assert window("w").in_flight() == 1
    fs.barrier()  # the last arrival (3e-4) is later than the landing
    lg = math.ceil(math.log2(n)) * ALPHA
    np.testing.assert_allclose(C.now(), 3e-4 + lg, rtol=1e-15)
    assert window("w").in_flight() == 0
    assert fs.get_win_version("w")[3][2] == 1
    # a message still in flight when its window is freed lands first: the free waits for it
    fs.win_put(x, "v", dst_weights=only(n, 1, {0: 1.0}))
    t1 = float(C.now()[1])
    assert t1 > land
    fs.win_free("v")
    np.testing.assert_allclose(C.now(), t1 + lg, rtol=1e-15)
    assert fs.win_names() == ["w"]


def test_accumulate_keeps_the_mass_exact_with_messages_in_flight():
    n = 6
    speed = np.array([1.0, 3.0, 0.5, 1.0, 2.0, 1.0])
    ring_world(n, speed=speed)
    x = fs.local(lambda r: np.array([float(r)]))
    fs.set_win_ops_with_associated_p(True)
    fs.win_create(x, "x", zero_init=True)
    fs.set_asynchrony("clock")
    dst = fs.local(lambda r: {(r - 1) % n: 1 / 3, (r + 1) % n: 1 / 3})
    in_flight_seen = False
    for _ in range(200):
        C.compute(1e-5)  # a computation as short as a message: much in flight
        fs.win_accumulate(x, "x", self_weight=1 / 3, dst_weights=dst, require_mutex=True)
        fs.win_update_then_collect("x")
        win = window("x")
        xs, ps = win.in_flight_mass()
        in_flight_seen |= win.in_flight() > 0
        mass_p = float(np.sum(fs.win_associated_p("x")) + win.p_buffers.sum() + ps)
        mass_x = float(x.sum() + win.buffers.sum() + xs.sum())
        assert mass_p == pytest.approx(n, rel=1e-13)
        assert mass_x == pytest.approx(15.0, rel=1e-13)
    assert in_flight_seen
    fs.barrier()
    fs.win_update_then_collect("x")
    p = fs.win_associated_p("x")
    assert window("x").in_flight() == 0
    assert float(np.sum(p)) == pytest.approx(n, rel=1e-13)
    np.testing.assert_allclose(x.ravel() / p, 2.5, rtol=1e-3)


def test_async_push_sum_lets_a_k_times_faster_agent_make_k_times_more_updates():
    """Agent 0 computes k times faster. No agent waits for another in push-sum over
    windows, so an agent's iteration is its computation c / speed plus its accumulate's
    transfer m (blocking: until its messages have landed), and in virtual time T it makes
    T / (c / speed + m) updates: (c + m) / (c / k + m) times as many as a slow one."""
    n, k, c = 8, 4.0, 1e-3
    speed = np.ones(n)
    speed[0] = k
    ring_world(n, speed=speed)
    x = fs.local(lambda r: np.array([float(r)]))
    fs.set_win_ops_with_associated_p(True)
    fs.win_create(x, "x", zero_init=True)
    fs.set_asynchrony("clock")
    dst = fs.local(lambda r: {(r - 1) % n: 1 / 3, (r + 1) % n: 1 / 3})
    for _ in range(500):
        C.compute(c)
        fs.win_accumulate(x, "x", self_weight=1 / 3, dst_weights=dst, require_mutex=True)
        fs.win_update_then_collect("x")
    parts = C.breakdown()
    updates = parts["computing"] * speed / c  # one computation per update
    m = ALPHA + 2 * 8 / W
    iteration = c / speed + m
    # each agent's clock: its updates' iterations (one more started where it is busy)
    assert np.all(np.abs(parts["time"] / iteration - updates) <= 1 + 1e-9)
    rate = updates / parts["time"]
    np.testing.assert_allclose(rate[0] / rate[1:], (c + m) / (c / k + m), rtol=0.02)
    assert rate[0] / rate[1:].mean() > 0.9 * k
    assert parts["waiting"].max() < 1e-12  # nobody waits for anybody
    p = fs.win_associated_p("x")
    win = window("x")
    assert float(np.sum(p) + win.p_buffers.sum() + win.in_flight_mass()[1]) == pytest.approx(
        n, rel=1e-13
    )


def test_clock_activation_without_a_clock_and_round_delays_with_one_are_refused():
    fs.init(size=4, topology=T.ring_graph)
    with pytest.raises(ValueError, match="no clock runs"):
        fs.set_asynchrony("clock")
    with pytest.raises(ValueError, match="decided by the agents' clocks"):
        Asynchrony(4, "clock").draw_active()
    with pytest.raises(ValueError, match="speeds is only used"):
        fs.set_asynchrony("clock", speeds=[1.0] * 4)
    C.start(C.Platform.uniform(4))
    x = fs.local(lambda r: np.ones(3))
    fs.win_create(x, "w")
    fs.set_asynchrony("clock")
    C.stop()
    with pytest.raises(ValueError, match="no clock runs"):
        fs.win_put(x, "w")
    C.start(C.Platform.uniform(4))
    fs.set_asynchrony("all", max_delay=2)
    with pytest.raises(ValueError, match="max_delay=0"):
        fs.win_put(x, "w")
    with pytest.raises(TypeError, match="activation must be a string"):
        fs.set_asynchrony(3)  # type: ignore[arg-type]


def test_window_messages_land_at_once_while_the_clock_is_paused():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, float(r)))
    fs.win_create(x, "w", zero_init=True)
    with C.paused():
        fs.win_put(x, "w")
    np.testing.assert_array_equal(C.now(), 0.0)
    assert window("w").in_flight() == 0
    assert fs.get_win_version("w")[0] == {1: 1, 3: 1}


def test_stopping_or_restarting_the_clock_lands_what_is_in_flight():
    n = 4
    ring_world(n)
    x = fs.local(lambda r: np.full(D, float(r)))
    fs.win_create(x, "w", zero_init=True)
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 1.0}))
    assert window("w").in_flight() == 1
    C.start(C.Platform.uniform(n))  # a new clock: the old one's messages land
    assert window("w").in_flight() == 0
    assert fs.get_win_version("w")[1][0] == 1
    fs.win_put(x, "w", dst_weights=only(n, 0, {1: 1.0}))
    assert window("w").in_flight() == 1
    C.stop()
    assert window("w").in_flight() == 0
    assert fs.get_win_version("w")[1][0] == 2
    fs.win_put(x, "w")  # no clock: lock-step rounds, nothing in flight
    assert window("w").in_flight() == 0


def test_lost_messages_cost_their_sender_the_time_and_never_land():
    n = 8
    ring_world(n)
    x = fs.local(lambda r: np.full(D, 1.0))
    fs.win_create(x, "w", zero_init=True)
    fs.set_asynchrony("all", loss=0.5, seed=3)
    fs.win_accumulate(x, "w")
    np.testing.assert_allclose(C.now(), ALPHA + 2 * N / W, rtol=1e-15)  # every sender paid
    landed = sum(sum(v.values()) for v in fs.get_win_version("w"))  # all clocks at m
    assert 0 < landed < 2 * n  # some were lost
    assert window("w").in_flight() == 0
    np.testing.assert_array_equal(window("w").buffers.sum(), landed * D)  # each carried D
