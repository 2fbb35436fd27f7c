"""Tests of fogsim.topology's dynamic schedules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fogsim.topology as ft
from fogsim.topology import DynamicStep, Topology


def take(generator, count):
    return list(itertools.islice(generator, count))


def product_applied_to_identity(steps):
    """Return W_{t+k-1} ... W_t applied to the identity (the product of the steps' W)."""
    n = steps[0].weights.size
    result = np.eye(n)
    for step in steps:
        result = step.weights.to_sparse() @ result
    return result


def reference_one_peer(dense, steps):
    """BlueFog's GetDynamicOnePeerSendRecvRanks, agent by agent."""
    n = len(dense)
    ordered = []
    for rank in range(n):
        out = [j for j in range(n) if j != rank and dense[j, rank] != 0]
        ordered.append(sorted(out, key=lambda r, rank=rank: (r - rank) % n))
    for t in range(steps):
        sends = [[ordered[r][t % len(ordered[r])]] if ordered[r] else [] for r in range(n)]
        recvs = [[o for o in range(n) if r in sends[o]] for r in range(n)]
        yield sends, recvs


def check_step_consistency(step: DynamicStep):
    n = step.weights.size
    assert ft.is_row_stochastic(step.weights)
    sends = [set(step.send_ranks(i)) for i in range(n)]
    recvs = [set(step.recv_ranks(i)) for i in range(n)]
    for i in range(n):
        for j in range(n):
            assert (j in sends[i]) == (i in recvs[j])
        weights = step.weights.to_dense()[i]
        np.testing.assert_allclose(weights[sorted(recvs[i] | {i})], 1 / (len(recvs[i]) + 1))


SCHEDULES = {
    "one_peer_exp2": lambda n: ft.one_peer_exponential_two(n),
    "one_peer_star": lambda n: ft.one_peer_schedule(ft.star_graph(n)),
    "one_peer_mesh": lambda n: ft.one_peer_schedule(ft.mesh_grid_2d_graph(n)),
    "inner_outer": lambda n: ft.inner_outer_exponential_two(n, 4 if n % 4 == 0 else 1),
    "matching": lambda n: ft.random_matching(n, seed=5),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_send_recv_consistency_and_weights(name, n):
    for t, step in enumerate(take(SCHEDULES[name](n), 9)):
        assert step.step == t
        check_step_consistency(step)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_start_skips_steps_and_generators_agree(name):
    full = take(SCHEDULES[name](12), 15)
    again = take(SCHEDULES[name](12), 15)
    assert [s.weights for s in full] == [s.weights for s in again]
    build = {
        "one_peer_exp2": lambda k: ft.one_peer_exponential_two(12, start=k),
        "one_peer_star": lambda k: ft.one_peer_schedule(ft.star_graph(12), start=k),
        "one_peer_mesh": lambda k: ft.one_peer_schedule(ft.mesh_grid_2d_graph(12), start=k),
        "inner_outer": lambda k: ft.inner_outer_exponential_two(12, 4, start=k),
        "matching": lambda k: ft.random_matching(12, seed=5, start=k),
    }[name]
    for k in (1, 4, 7):
        resumed = take(build(k), 15 - k)
        assert [s.step for s in resumed] == list(range(k, 15))
        assert [s.weights for s in resumed] == [s.weights for s in full[k:]]


@pytest.mark.parametrize("n", [2, 4, 8, 16, 1024])
def test_one_peer_exponential_two_averages_exactly(n):
    tau = n.bit_length() - 1
    for start in sorted({0, 1, tau - 1}):
        steps = take(ft.one_peer_exponential_two(n, start=start), tau)
        np.testing.assert_array_equal(product_applied_to_identity(steps), np.full((n, n), 1 / n))
    if n > 2:  # one step short of a full cycle leaves the average inexact
        steps = take(ft.one_peer_exponential_two(n), tau - 1)
        assert not np.allclose(product_applied_to_identity(steps), 1 / n)


def test_one_peer_exponential_two_structure():
    n = 12  # tau = 4: shifts 1, 2, 4, 8
    for step in take(ft.one_peer_exponential_two(n), 9):
        s = 2 ** (step.step % 4)
        for i in range(n):
            assert step.send_ranks(i) == [(i + s) % n]
            assert step.recv_ranks(i) == [(i - s) % n]
        np.testing.assert_array_equal(step.weights.self_weights, 0.5)
    (lone,) = take(ft.one_peer_exponential_two(1), 1)
    assert lone.send_ranks(0) == [] and lone.recv_ranks(0) == []
    np.testing.assert_array_equal(lone.weights.to_dense(), [[1.0]])


def test_one_peer_exponential_two_is_lazy_for_a_million_agents():
    n = 10**6
    steps = take(ft.one_peer_exponential_two(n, start=3), 40)
    assert steps[0].send_ranks(n - 1) == [7]
    assert steps[0].recv_ranks(3) == [n - 5]
    assert steps[-1].step == 42
    assert all(step.weights._csr is None for step in steps)


@pytest.mark.parametrize(
    "topology",
    [
        ft.exponential_two_graph(12),
        ft.star_graph(7, center=3),
        ft.mesh_grid_2d_graph(12),
        ft.ring_graph(6, "left"),
        (np.random.default_rng(4).random((10, 10)) < 0.25).astype(float),
        np.triu(np.ones((50, 50))),  # out-degrees 0..49: their lcm overflows int64
    ],
)
def test_one_peer_schedule_matches_bluefog(topology):
    dense = ft.as_topology(topology).to_dense()
    count = 70
    steps = take(ft.one_peer_schedule(topology, start=0), count)
    for step, (sends, recvs) in zip(steps, reference_one_peer(dense, count), strict=True):
        for i in range(len(dense)):
            assert step.send_ranks(i) == sends[i]
            assert step.recv_ranks(i) == recvs[i]
        check_step_consistency(step)


def test_one_peer_schedule_of_exponential_two_is_one_peer_exponential_two():
    for n in (5, 8, 12):
        ours = take(ft.one_peer_schedule(ft.exponential_two_graph(n)), 10)
        theirs = take(ft.one_peer_exponential_two(n), 10)
        assert [s.weights for s in ours] == [s.weights for s in theirs]


def reference_inner_outer(n, local_size, t):
    machines = n // local_size
    tau_in, tau_out = (local_size - 1).bit_length(), (machines - 1).bit_length()
    if machines == 1 or (local_size > 1 and t % 2 == 0):
        index = t if machines == 1 else t // 2
        s = 2 ** (index % tau_in) if tau_in else 0
        return [
            (i // local_size) * local_size + (i % local_size + s) % local_size for i in range(n)
        ]
    index = t if local_size == 1 else t // 2
    s = 2 ** (index % tau_out)
    return [((i // local_size + s) % machines) * local_size + i % local_size for i in range(n)]


@pytest.mark.parametrize(("n", "local_size"), [(8, 4), (24, 4), (12, 3), (6, 6), (5, 1), (1, 1)])
def test_inner_outer_exponential_two(n, local_size):
    steps = take(ft.inner_outer_exponential_two(n, local_size), 14)
    for t, step in enumerate(steps):
        targets = reference_inner_outer(n, local_size, t)
        for i in range(n):
            assert step.send_ranks(i) == ([targets[i]] if targets[i] != i else [])
        check_step_consistency(step)


def test_inner_outer_special_cases_and_exact_average():
    one_machine = take(ft.inner_outer_exponential_two(8, 8), 6)
    one_rank = take(ft.inner_outer_exponential_two(8, 1), 6)
    plain = take(ft.one_peer_exponential_two(8), 6)
    assert [s.weights for s in one_machine] == [s.weights for s in plain]
    assert [s.weights for s in one_rank] == [s.weights for s in plain]
    steps = take(ft.inner_outer_exponential_two(16, 4), 4)  # 2 inner + 2 outer steps
    np.testing.assert_array_equal(product_applied_to_identity(steps), np.full((16, 16), 1 / 16))
    with pytest.raises(ValueError, match="n=10 is not a multiple of local_size=4"):
        ft.inner_outer_exponential_two(10, 4)
    with pytest.raises(ValueError, match="local_size must be >= 1, got 0"):
        ft.inner_outer_exponential_two(10, 0)


@pytest.mark.parametrize("n", [2, 9, 10])
def test_random_matching(n):
    steps = take(ft.random_matching(n, seed=11), 8)
    for step in steps:
        peers = [step.send_ranks(i) for i in range(n)]
        assert all(peers[i] == step.recv_ranks(i) for i in range(n))
        assert all(len(p) <= 1 for p in peers)
        assert sum(len(p) == 0 for p in peers) == n % 2
        assert all(peers[p[0]] == [i] for i, p in enumerate(peers) if p)
        assert ft.is_doubly_stochastic(step.weights)
        alone = [i for i in range(n) if not peers[i]]
        np.testing.assert_array_equal(step.weights.self_weights[alone], 1.0)
    if n > 2:
        assert len({tuple(s.send_ranks(0)) for s in steps}) > 1  # pairings change per step
        other = take(ft.random_matching(n, seed=12), 8)
        assert [s.weights for s in other] != [s.weights for s in steps]


def test_random_matching_without_seed_is_still_self_consistent():
    generator = ft.random_matching(6)
    steps = take(generator, 3)
    assert [s.step for s in steps] == [0, 1, 2]
    for step in steps:
        check_step_consistency(step)


@pytest.mark.parametrize(
    ("make", "exc", "match"),
    [
        (lambda: ft.one_peer_exponential_two(0), ValueError, "n must be >= 1, got 0"),
        (lambda: ft.one_peer_exponential_two(4, start=-1), ValueError, "start must be >= 0"),
        (lambda: ft.one_peer_schedule("ring"), TypeError, "topology must be a Topology"),
        (lambda: ft.one_peer_schedule(np.eye(3), start=1.5), TypeError, "start must be an int"),
        (lambda: ft.random_matching(0), ValueError, "n must be >= 1"),
        (
            lambda: ft.inner_outer_exponential_two(8, 4, start=-2),
            ValueError,
            "start must be >= 0, got -2",
        ),
    ],
)
def test_schedule_errors_are_raised_at_call_time(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_dynamic_step_is_frozen():
    step = DynamicStep(0, Topology(np.eye(2)))
    with pytest.raises(AttributeError, match="cannot assign to field 'step'"):
        step.step = 1
    assert step.send_ranks(0) == [] and step.recv_ranks(1) == []
