"""The clocks through ``neighbor_allgather`` and the machine-local ``allreduce``.

Every expected time is worked out here from the platform's latency and bandwidth, as
the model states it (:mod:`fogsim.clock`): a message of N bytes takes ``alpha + c N / w``,
``c`` the most messages of the call that one agent's link carries one way, and agent i is
done when its own messages are out and every message it receives has arrived, each
leaving at its sender's clock; a machine-local allreduce is, in every machine at once, a
reduce-scatter then an all-gather among the machine's p agents (halving/doubling, ``lg p``
latencies, when p is a power of two, else a ring of ``p - 1``; ``(p - 1)/p N / w`` each),
starting when the machine's last agent arrives.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import clock as C
from fogsim import hierarchy as H
from fogsim import topology as T
from fogsim.backends.sim import _torchops
from tests._threads import sharded

ALPHA, W = 1e-3, 1e6  # latency (s), bandwidth (bytes/s)
D = 100  # float64 per agent: N = 800 bytes, 0.8 ms on a link of its own
N = 8 * D
SLOW = 5e-3  # the slow agent's extra computation (s)


@pytest.fixture(autouse=True)
def _shutdown():
    yield
    _torchops.use_device_path(False)
    fs.shutdown()


@pytest.fixture(params=["numpy", "torch"])
def stacked(request):
    """Values as numpy arrays, or as torch tensors sent down the simulator's device path."""
    if request.param == "numpy":
        return lambda arr: arr
    torch = pytest.importorskip("torch")
    _torchops.use_device_path(True)  # what a CUDA tensor runs, on CPU tensors
    return torch.from_numpy


def values(n: int) -> np.ndarray:
    return np.repeat(np.arange(n, dtype=np.float64)[:, None], D, axis=1)  # agent r holds r


def uniform(n: int) -> C.Platform:
    return C.Platform.uniform(n, latency=ALPHA, bandwidth=W)


def one_slow(n: int, s: int) -> np.ndarray:
    seconds = np.zeros(n)
    seconds[s] = SLOW
    return seconds


def right_ring(n: int) -> tuple[list[list[int]], list[list[int]]]:
    """Agent i hears i - 1 and sends to i + 1: one message leaves and one arrives per agent."""
    return [[(i - 1) % n] for i in range(n)], [[(i + 1) % n] for i in range(n)]


# -- neighbor_allgather ----------------------------------------------------------------------
def test_neighbor_allgather_holds_up_only_the_agents_that_hear_the_slow_one(stacked):
    n, s = 8, 2
    fs.init(size=n, topology=T.ring_graph)  # the topology's ranks are not the call's
    clock = C.start(uniform(n))
    C.compute(one_slow(n, s))
    src, dst = right_ring(n)
    got = fs.neighbor_allgather(stacked(values(n)), src_ranks=src, dst_ranks=dst)
    np.testing.assert_array_equal(np.asarray(got)[:, 0], np.roll(np.arange(n), 1))
    m = ALPHA + N / W  # one message per link
    want = np.full(n, m)
    want[[s, s + 1]] = SLOW + m  # s's own message leaves late; s + 1 waits for it
    np.testing.assert_allclose(C.now(), want, rtol=1e-12)
    waiting = np.zeros(n)
    waiting[s + 1] = SLOW
    np.testing.assert_allclose(C.breakdown()["waiting"], waiting, atol=1e-15)
    assert clock.calls == {"neighbor_allgather": 1}
    assert clock.total == pytest.approx(m)


def test_neighbor_allgather_without_ranks_sends_the_topologys_messages(stacked):
    n, s = 8, 5
    fs.init(size=n, topology=T.ring_graph)
    C.start(uniform(n))
    C.compute(one_slow(n, s))
    fs.neighbor_allgather(stacked(values(n)))
    m = ALPHA + 2 * N / W  # each agent's link carries its two messages out (and two in)
    want = np.full(n, m)
    want[[s - 1, s, s + 1]] = SLOW + m
    np.testing.assert_allclose(C.now(), want, rtol=1e-12)


def test_neighbor_allgather_messages_into_one_agent_share_its_link():
    # agents 1, 2, 3 send to agent 0 only: three messages arrive over agent 0's link
    n, s = 4, 3
    fs.init(size=n)
    C.start(uniform(n))
    C.compute(one_slow(n, s))
    src, dst = [[1, 2, 3], [], [], []], [[], [0], [0], [0]]
    got = fs.neighbor_allgather(fs.local(lambda r: np.full(D, float(r))), src, dst)
    assert [np.asarray(g)[::D].tolist() for g in got] == [[1.0, 2.0, 3.0], [], [], []]
    m = ALPHA + 3 * N / W
    np.testing.assert_allclose(C.now(), [SLOW + m, m, m, SLOW + m], rtol=1e-12)
    np.testing.assert_allclose(C.breakdown()["waiting"], [SLOW, 0, 0, 0], atol=1e-15)


def test_neighbor_allgather_charges_every_call_with_its_own_ranks():
    n = 8
    fs.init(size=n)
    clock = C.start(uniform(n))
    x = values(n)
    src, dst = right_ring(n)
    everyone = [[j for j in range(n) if j != i] for i in range(n)]
    for _ in range(2):
        fs.neighbor_allgather(x, src_ranks=src, dst_ranks=dst)
        fs.neighbor_allgather(x, src_ranks=everyone, dst_ranks=everyone)
    one, all_ = ALPHA + N / W, ALPHA + (n - 1) * N / W
    np.testing.assert_allclose(C.now(), np.full(n, 2 * (one + all_)), rtol=1e-12)
    assert clock.calls == {"neighbor_allgather": 4}
    assert clock.total == pytest.approx(2 * (one + all_))


# -- the machine-local allreduce ----------------------------------------------------------------
def two_machines_of_four() -> C.Platform:
    inner, outer = H.Level(4, 1e-4, 1e7), H.Level(2, 1e-2, 1e5)  # between machines: slow
    return C.Platform(H.Network([inner, outer]))


def test_a_local_allreduce_waits_for_the_machines_last_agent_only(stacked):
    n, s = 8, 1
    fs.init(size=n, local_size=4)
    clock = C.start(two_machines_of_four())
    C.compute(one_slow(n, s))
    got = fs.allreduce(stacked(values(n)), is_hierarchical_local=True)
    np.testing.assert_allclose(np.asarray(got)[:, 0], [1.5] * 4 + [5.5] * 4)
    # 4 agents (a power of two): halving/doubling, lg 4 = 2 latencies each way, on the
    # machine's own links (no message leaves the machine)
    op = 2 * (2 * 1e-4 + 3 / 4 * N / 1e7)
    want = np.array([SLOW + op] * 4 + [op] * 4)
    np.testing.assert_allclose(C.now(), want, rtol=1e-12)
    np.testing.assert_allclose(
        C.breakdown()["waiting"], [SLOW, 0, SLOW, SLOW, 0, 0, 0, 0], atol=1e-15
    )
    assert clock.calls == {"local_allreduce": 1}
    assert clock.total == pytest.approx(op)


def test_a_local_allreduce_runs_in_the_worlds_machines():
    # the platform is one switch of 6; the world has 2 machines of 3 agents: rings of 3
    n, s = 6, 4
    fs.init(size=n, local_size=3)
    C.start(uniform(n))
    C.compute(one_slow(n, s))
    fs.allreduce(values(n), average=False, is_hierarchical_local=True)
    op = 2 * (2 * ALPHA + 2 / 3 * N / W)  # 3 agents: a ring of 2 steps each way
    np.testing.assert_allclose(C.now(), [op] * 3 + [SLOW + op] * 3, rtol=1e-12)


def test_the_cost_meter_prices_both_ops_without_a_clock():
    n = 8
    fs.init(size=n, local_size=4)
    meter = H.attach_cost_model(two_machines_of_four().network)
    x = values(n)
    src, dst = right_ring(n)
    fs.neighbor_allgather(x, src_ranks=src, dst_ranks=dst)
    fs.allreduce(x, is_hierarchical_local=True)
    # the ring's messages 3 -> 4 and 7 -> 0 cross machines: the step lasts as long as they
    gather = 1e-2 + N / 1e5
    local = 2 * (2 * 1e-4 + 3 / 4 * N / 1e7)
    assert meter.per_op == pytest.approx({"neighbor_allgather": gather, "local_allreduce": local})
    assert H.CostModel(two_machines_of_four().network).op_time(
        "local_allreduce", N, size=n
    ) == pytest.approx(local)  # machines of level 0's size by default


# -- the sharded simulator ------------------------------------------------------------------
@pytest.mark.parametrize("parts", [2, 3])
def test_the_sharded_simulator_moves_each_blocks_clocks_alike(parts):
    """Each process's clock (its block's agents) moves as one process's: messages cross
    between blocks, and over 3 blocks each machine spans two of them."""
    n, s = 8, 2
    src, dst = right_ring(n)
    x = values(n)

    def work(backend):
        backend.set_topology(T.ring_graph(n))
        clock = C.BlockClock(two_machines_of_four(), backend)  # as fogsim.clock.start makes it
        backend.attach_cost_model(clock)
        lo, hi = backend.block
        clock.compute(one_slow(n, s)[lo:hi])
        backend.neighbors.neighbor_allgather(x[lo:hi], src, dst)
        after_gather = clock.time.copy()
        backend.machines.local_allreduce(x[lo:hi], True, None)
        return (lo, hi), after_gather, clock.time.copy()

    # the ring's messages 3 -> 4 and 7 -> 0 cross machines, the others do not
    near, far = 1e-4 + N / 1e7, 1e-2 + N / 1e5
    own = np.array([near, near, near, far, near, near, near, far])  # each agent's message
    heard = np.roll(own, 1)  # the message each agent receives, from i - 1
    start = one_slow(n, s)
    gathered = np.maximum(start + own, np.roll(start, 1) + heard)
    op = 2 * (2 * 1e-4 + 3 / 4 * N / 1e7)
    local = np.repeat(gathered.reshape(2, 4).max(axis=1) + op, 4)
    for (lo, hi), after_gather, after_local in sharded(n, parts, work, local_size=4):
        np.testing.assert_allclose(after_gather, gathered[lo:hi], rtol=1e-12)
        np.testing.assert_allclose(after_local, local[lo:hi], rtol=1e-12)
