"""Simulated time (fogsim.clock): per-agent clocks against times worked out by hand.

Every expected time here comes from the model as the module docstring states it (a message
takes ``alpha + c N / w`` with ``c`` the messages sharing its sender's link; a collective
ends at the last arrival plus the cost model's time; a neighbor op ends for agent i when
its messages are out and its in-neighbors' have arrived), computed in the test.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim import clock as C
from fogsim import topology as T
from fogsim.hierarchy import Level, Network

ALPHA, W = 2e-5, 1e9  # latency (s), bandwidth (bytes/s)


@pytest.fixture(autouse=True)
def _shutdown():
    yield
    fs.shutdown()


def ring_world(n: int, **platform):
    fs.init(size=n, topology=T.ring_graph)
    return C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W, **platform))


def test_the_clock_is_off_by_default_and_changes_no_number():
    fs.init(size=6, topology=T.ring_graph)
    assert not C.running()
    with pytest.raises(ValueError, match="no clock runs"):
        C.now()
    x = fs.local(lambda r: np.arange(5.0) * r)
    plain = fs.neighbor_allreduce(x)
    C.start(C.Platform.uniform(6))
    np.testing.assert_array_equal(fs.neighbor_allreduce(x), plain)
    C.stop()
    assert not C.running()


def test_a_ring_with_one_slow_agent_paces_everyone_step_by_step():
    """Synchronous rounds (compute c, then a neighbor exchange) with agent s k times slower.

    Agent i's clock after round t is the longest walk of t rounds ending at i, each round
    costing its starting agent's compute plus the message time m:
    ``t (k c + m)`` at distance d <= 1 from s, ``(t - d + 1)(k c + m) + (d - 1)(c + m)``
    at distance d <= t, and ``t (c + m)`` for agents the slowness has not reached yet.
    """
    n, s, k, c, d = 12, 3, 4.0, 1e-3, 100
    speed = np.ones(n)
    speed[s] = 1 / k
    ring_world(n, speed=speed)
    m = ALPHA + 2 * (8 * d) / W  # two messages of d float64 share each agent's link
    x = fs.local(lambda r: np.full(d, float(r)))
    for t in range(1, 8):
        C.compute(c)
        x = fs.neighbor_allreduce(x)
        distance = np.minimum(np.abs(np.arange(n) - s), n - np.abs(np.arange(n) - s))
        want = np.where(
            distance <= 1,
            t * (k * c + m),
            np.where(
                distance <= t,
                (t - distance + 1) * (k * c + m) + (distance - 1) * (c + m),
                t * (c + m),
            ),
        )
        np.testing.assert_allclose(C.now(), want, rtol=1e-12, err_msg=f"round {t}")
    parts = C.breakdown()
    assert parts["waiting"][s] < 1e-15  # the slow agent never waits (but for rounding)
    assert np.all(parts["waiting"][(s + 1) % n] > 0)  # its neighbours do
    np.testing.assert_allclose(
        parts["computing"] + parts["communicating"] + parts["waiting"], parts["time"]
    )


def test_a_collective_ends_at_the_last_arrival_plus_the_ring_allreduce():
    n, d = 8, 1000
    ring_world(n)
    C.compute(np.linspace(0, 7e-3, n))  # agent 7 arrives last, at 7 ms
    fs.allreduce(fs.local(lambda r: np.ones(d)))
    nbytes = 8 * d
    # reduce-scatter then all-gather, each a ring of n - 1 steps (BlueConnect Eq. 1)
    ring = 2 * ((n - 1) * ALPHA + (n - 1) / n * nbytes / W)
    np.testing.assert_allclose(C.now(), np.full(n, 7e-3 + ring), rtol=1e-12)
    np.testing.assert_allclose(C.breakdown()["waiting"], 7e-3 - np.linspace(0, 7e-3, n))


def test_a_fully_connected_exchange_on_equal_clocks_shares_each_link():
    n, d = 6, 50
    fs.init(size=n, topology=T.fully_connected_graph)
    C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W))
    fs.neighbor_allreduce(fs.local(lambda r: np.ones(d)))
    want = ALPHA + (n - 1) * 8 * d / W  # n - 1 messages leave through each agent's link
    np.testing.assert_allclose(C.now(), np.full(n, want), rtol=1e-12)
    assert fs.hierarchy.neighbor_allreduce_time(
        Network([Level(n, ALPHA, W)]), 8 * d, T.fully_connected_graph(n)
    ) == pytest.approx(want)


def test_on_a_fully_connected_graph_everyone_waits_for_the_slowest_as_in_an_allreduce():
    n, d = 6, 50
    fs.init(size=n, topology=T.fully_connected_graph)
    C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W))
    C.compute([1e-3, 1e-3, 4e-3, 1e-3, 1e-3, 1e-3])
    fs.neighbor_allreduce(fs.local(lambda r: np.ones(d)))
    m = ALPHA + (n - 1) * 8 * d / W
    np.testing.assert_allclose(C.now(), np.full(n, 4e-3 + m), rtol=1e-12)  # one step: all
    waiting = C.breakdown()["waiting"]
    np.testing.assert_allclose(waiting, [3e-3, 3e-3, 0, 3e-3, 3e-3, 3e-3], atol=1e-15)


def test_a_message_between_machines_takes_the_slower_levels_time():
    # 2 machines of 2 agents; a directed ring 0 -> 1 -> 2 -> 3 -> 0: messages 1 -> 2 and
    # 3 -> 0 cross machines, 0 -> 1 and 2 -> 3 do not
    intra, inter = Level(2, 1e-6, 1e10), Level(2, 1e-4, 1e8)
    fs.init(size=4, topology=T.ring_graph(4, style="right"))
    C.start(C.Platform(Network([intra, inter])))
    nbytes = 8 * 10
    fs.neighbor_allreduce(fs.local(lambda r: np.ones(10)))
    slow = max(intra.alpha + nbytes / intra.bandwidth, inter.alpha + nbytes / inter.bandwidth)
    fast = intra.alpha + nbytes / intra.bandwidth
    # agent i waits for i - 1's message and for its own to be out
    sent = {0: fast, 1: slow, 2: fast, 3: slow}  # each agent's own message
    got = {1: fast, 2: slow, 3: fast, 0: slow}  # the message each receives
    want = [max(sent[i], got[i]) for i in range(4)]
    np.testing.assert_allclose(C.now(), want, rtol=1e-12)


def test_stragglers_are_drawn_from_the_seed():
    n = 16
    always = C.Stragglers(probability=1.0, factor=3.0)
    ring_world(n, stragglers=always)
    np.testing.assert_allclose(C.compute(1e-3), np.full(n, 3e-3))
    fs.shutdown()

    def run(seed):
        ring_world(n, stragglers=C.Stragglers(probability=0.25, factor=5.0), seed=seed)
        charged = [C.compute(1e-3) for _ in range(40)]
        fs.shutdown()
        return np.array(charged)

    a, b, other = run(7), run(7), run(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)
    assert set(np.unique(a)) == {1e-3, 5e-3}
    assert 0.15 < np.mean(a == 5e-3) < 0.35

    trace = np.array([[1.0] * n, [2.0] * n])
    ring_world(n, stragglers=C.Stragglers(trace=trace))
    np.testing.assert_allclose([C.compute(1.0)[0] for _ in range(3)], [1.0, 2.0, 1.0])


def test_flops_are_charged_on_the_device():
    n = 4
    ring_world(n, device=C.Device(peak_flops=1e12, efficiency=0.5), speed=[1, 1, 2, 1])
    np.testing.assert_allclose(C.compute(flops=1e9), [2e-3, 2e-3, 1e-3, 2e-3])


def test_the_algorithms_record_time_and_their_metrics_cost_none():
    n = 8
    fs.init(size=n, topology=T.ring_graph, seed=1)
    p = A.LeastSquares.random(m=10, d=3, seed=0)
    plain = A.dgd(p, alpha=0.02, iters=6)
    C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W))
    timed = A.dgd(p, alpha=0.02, iters=6)
    for key, values in plain.history.items():
        np.testing.assert_array_equal(timed.history[key], values)
    step = ALPHA + 2 * 24 / W  # one neighbor exchange of 3 float64 per iteration
    np.testing.assert_allclose(timed.history["time"], np.arange(7) * step, rtol=1e-12)
    assert "time" not in plain.history


def test_hierarchical_steps_wait_for_the_neighbor_machines_only():
    # 4 machines of 2 agents on a directed machine ring; agent 0 (machine 0) is late
    intra, inter = Level(2, 1e-6, 1e10), Level(4, 1e-4, 1e8)
    fs.init(size=8, local_size=2)
    fs.set_machine_topology(T.ring_graph(4, style="right"))
    clock = C.start(C.Platform(Network([intra, inter])))
    C.compute([5e-3] + [0.0] * 7)
    before = clock.total
    fs.hierarchical_neighbor_allreduce(fs.local(lambda r: np.ones(4)))
    op = clock.total - before  # the op's own time, as the cost model gives it
    machine_start = np.array([5e-3, 0, 0, 0])
    ready = np.maximum(machine_start, np.roll(machine_start, 1))  # machine m hears m - 1
    np.testing.assert_allclose(C.now(), np.repeat(ready + op, 2), rtol=1e-12)


@pytest.mark.parametrize("compute", [1e-5, 3e-5, 1e-3])
def test_a_nonblocking_op_hides_its_communication_behind_computation(compute):
    """Start the exchange, compute, wait: each agent is done at max(compute, message)."""
    n, d = 8, 500
    ring_world(n)
    m = ALPHA + 2 * 8 * d / W  # 2.8e-5 s
    x = fs.local(lambda r: np.full(d, float(r)))
    handle = fs.neighbor_allreduce_nonblocking(x)
    np.testing.assert_array_equal(C.now(), np.zeros(n))  # nothing waited for yet
    C.compute(compute)
    y = fs.wait(handle)
    np.testing.assert_allclose(C.now(), np.full(n, max(compute, m)), rtol=1e-12)
    parts = C.breakdown()
    np.testing.assert_allclose(parts["communicating"], np.full(n, max(m - compute, 0.0)))
    np.testing.assert_array_equal(y, fs.neighbor_allreduce(x))  # the same numbers


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: C.compute(-1.0), ValueError, "seconds must be finite and >= 0"),
        (lambda: C.compute(float("nan")), ValueError, "seconds must be finite"),
        (lambda: C.compute(np.ones(3)), ValueError, r"seconds must be a number or 4 numbers"),
        (lambda: C.compute("1"), TypeError, "seconds must be a number"),
        (lambda: C.compute(1.0, flops=2.0), TypeError, "seconds or flops="),
        (lambda: C.compute(flops=-5.0), ValueError, "flops must be finite and >= 0"),
    ],
)
def test_bad_computations_are_refused(call, error, match):
    ring_world(4)
    with pytest.raises(error, match=match):
        call()


def test_bad_platforms_are_refused():
    net = Network([Level(4, 1e-5, 1e9)])
    with pytest.raises(ValueError, match="speed must be a number or 4 numbers"):
        C.Platform(net, speed=[1.0, 2.0])
    with pytest.raises(ValueError, match="speed must be finite and > 0"):
        C.Platform(net, speed=[1.0, 0.0, 1.0, 1.0])
    with pytest.raises(TypeError, match="network must be a fogsim.hierarchy.Network"):
        C.Platform("fast")
    with pytest.raises(ValueError, match="Stragglers.probability must be in"):
        C.Stragglers(probability=2.0)
    with pytest.raises(ValueError, match="Stragglers.factor must be finite and >= 1"):
        C.Stragglers(probability=0.1, factor=0.5)
    with pytest.raises(ValueError, match="Device.efficiency must be in"):
        C.Device(1e12, efficiency=1.5)
    fs.init(size=6)
    with pytest.raises(ValueError, match="the platform has 4 agents but the world 6"):
        C.start(C.Platform(net))
    with pytest.raises(TypeError, match="needs a platform"):
        C.start()
    with pytest.raises(TypeError, match="platform must be a fogsim.clock.Platform"):
        C.start(net)


def test_a_trace_in_virtual_time_shows_the_straggler_and_the_waits(tmp_path):
    import json

    n, s = 6, 2
    speed = np.ones(n)
    speed[s] = 1 / 3
    fs.init(size=n, topology=T.ring_graph)
    path = tmp_path / "clock.json"
    C.start(C.Platform.uniform(n, latency=ALPHA, bandwidth=W, speed=speed), trace=str(path))
    x = fs.local(lambda r: np.ones(10))
    for _ in range(3):
        C.compute(1e-3)
        x = fs.neighbor_allreduce(x)
    final = float(C.now().max())
    C.stop()
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    computing = {e["pid"]: e["dur"] for e in spans if e["name"] == "COMPUTE"}
    assert computing[s] == pytest.approx(3e3) and computing[0] == pytest.approx(1e3)  # us
    waits = {e["pid"] for e in spans if e["name"] == "WAIT"}
    assert s not in waits and {s - 1, s + 1} <= waits  # its neighbours wait for it
    last = max(e["ts"] + e["dur"] for e in spans)
    assert last == pytest.approx(1e6 * final)  # the trace ends where the clocks do
    names = {e["name"] for e in spans}
    assert names == {"COMPUTE", "neighbor_allreduce", "WAIT"}
