"""Machine level in the simulator, and the rules shared by every backend.

The ops themselves are checked against numpy on every backend in dual_cases.py; here: the
decomposition's arithmetic, the machine layout check, argument errors, and what the
simulator does with per-agent machine arguments.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim.backends._decomposed import (
    check_factors,
    default_factors,
    digits,
    piece_bounds,
    staged_sum,
)
from fogsim.backends._layout import layout_error


@pytest.fixture
def world():
    ctx = fs.init(backend="sim", size=12, local_size=3)
    yield ctx
    fs.shutdown()


def test_digits_are_mixed_radix_with_the_first_factor_fastest():
    assert digits(0, (3, 2, 2)) == [0, 0, 0]
    assert digits(4, (3, 2, 2)) == [1, 1, 0]  # 4 = 1 + 3 * 1
    assert digits(11, (3, 2, 2)) == [2, 1, 1]  # 11 = 2 + 3 * 1 + 6 * 1
    assert digits(7, (2, 2, 2)) == [1, 1, 1]


def test_piece_bounds_split_like_array_split():
    assert piece_bounds(0, 10, 3).tolist() == [0, 4, 7, 10]
    assert piece_bounds(5, 7, 4).tolist() == [5, 6, 7, 7, 7]  # empty pieces at the end
    for m, p in [(37, 3), (1, 2), (0, 5), (64, 8)]:
        pieces = np.array_split(np.arange(m), p)
        bounds = piece_bounds(0, m, p)
        assert [len(q) for q in pieces] == np.diff(bounds).tolist()


def test_staged_sum_adds_digit_by_digit_in_member_order():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 5))
    got = staged_sum(x, (3, 2, 2))
    # by hand: ranks r = d0 + 3 d1 + 6 d2; d0 first, each sum from member 0 upwards
    by_d0 = [[x[3 * g + 0] + x[3 * g + 1] + x[3 * g + 2]] for g in range(4)]  # g = d1 + 2 d2
    by_d1 = [by_d0[0 + 2 * d2][0] + by_d0[1 + 2 * d2][0] for d2 in range(2)]
    want = by_d1[0] + by_d1[1]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, x.sum(0), rtol=1e-13)
    ints = np.arange(24).reshape(8, 3)
    np.testing.assert_array_equal(staged_sum(ints, (2, 4)), ints.sum(0))


def test_check_factors_names_what_is_wrong():
    assert check_factors([3, 2, np.int64(2)], 12) == (3, 2, 2)
    with pytest.raises(ValueError, match=r"factors \(3, 2\) multiply to 6, but there are 12"):
        check_factors((3, 2), 12)
    with pytest.raises(ValueError, match=r"factors\[1\] = 0"):
        check_factors((12, 0), 12)
    with pytest.raises(TypeError, match=r"factors\[0\] must be an integer, got float"):
        check_factors((2.0, 6), 12)
    with pytest.raises(TypeError, match="factors must be a sequence of integers"):
        check_factors("3x4", 12)
    with pytest.raises(ValueError, match="factors is empty"):
        check_factors((), 1)


def test_default_factors_follow_the_machines():
    assert default_factors(12, 3) == (3, 4)
    assert default_factors(8, 8) == (8,)
    assert default_factors(8, 1) == (8,)
    assert default_factors(1, 1) == (1,)


def test_layout_error_needs_machines_alike_and_consecutive():
    assert layout_error([(2, 0), (2, 1), (2, 0), (2, 1)]) is None
    message = layout_error([(3, 0), (3, 1), (3, 2), (1, 0)])
    assert "different numbers of processes ([3, 1])" in message
    message = layout_error([(2, 0), (2, 0), (2, 1), (2, 1)])  # round-robin placement
    assert "not consecutive ranks (rank 1 is local rank 0 of 2)" in message


def test_machine_queries_in_simulation(world):
    assert fs.machine_size() == 4
    np.testing.assert_array_equal(fs.machine_rank(), np.repeat(np.arange(4), 3))
    assert fs.load_machine_topology().size == 4
    assert not fs.is_machine_topology_weighted()
    assert fs.in_neighbor_machine_ranks()[3] == T.exponential_two_graph(4).in_neighbors(1)
    fs.set_machine_topology(T.star_graph)  # a builder gets the number of machines
    assert fs.load_machine_topology().size == 4


def test_local_size_must_divide_the_size():
    with pytest.raises(ValueError, match="local_size=5 does not divide size=12"):
        fs.Context(backend="sim", size=12, local_size=5)


def test_hierarchical_result_is_the_same_on_every_agent_of_a_machine(world):
    x = fs.local(lambda r: np.array([float(r), r**2]))
    y = fs.hierarchical_neighbor_allreduce(x)
    assert np.ptp(y.reshape(4, 3, 2), axis=1).max() == 0
    means = x.reshape(4, 3, 2).mean(axis=1)
    W = T.exponential_two_graph(4).uniform().to_dense()
    np.testing.assert_allclose(y[::3], W @ means, rtol=1e-14)


def test_hierarchical_takes_a_machine_matrix_and_per_agent_arguments(world):
    x = fs.local(lambda r: np.array([float(r)]))
    W = np.full((4, 4), 0.25)
    y = fs.hierarchical_neighbor_allreduce(x, src_machine_weights=W)
    np.testing.assert_allclose(y, np.full((12, 1), 5.5))
    # per agent: entries of local rank 0 agents are used; the others may say anything
    sw = np.where(np.arange(12) % 3 == 0, 1.0, np.nan)
    y = fs.hierarchical_neighbor_allreduce(x, self_weight=sw, src_machine_weights=[{}] * 12)
    np.testing.assert_allclose(y[:, 0], np.repeat([1.0, 4.0, 7.0, 10.0], 3))
    with pytest.raises(ValueError, match="self_weight has 4 entries; in simulation give one per"):
        fs.hierarchical_neighbor_allreduce(x, self_weight=np.ones(4), src_machine_weights=[{}] * 4)


def test_hierarchical_torch_tensor_keeps_its_type(world):
    torch = pytest.importorskip("torch")
    x = torch.arange(24, dtype=torch.float32).reshape(12, 2)
    y = fs.hierarchical_neighbor_allreduce(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (12, 2)


def test_decomposed_equals_flat_to_round_off_in_float32_and_float64(world):
    for dtype in (np.float32, np.float64):
        x = fs.local(lambda r, d=dtype: np.random.default_rng(r).standard_normal(50).astype(d))
        flat = fs.allreduce(x)
        for factors in [(3, 2, 2), (2, 2, 3), (12,), (6, 2)]:
            got = fs.allreduce(x, algorithm="decomposed", factors=factors)
            assert got.dtype == dtype
            tol = 1e-5 if dtype == np.float32 else 1e-13
            np.testing.assert_allclose(got, flat, rtol=tol, atol=tol)


def test_allreduce_options_are_checked(world):
    x = np.ones((12, 2))
    with pytest.raises(TypeError, match="is_hierarchical_local must be a bool"):
        fs.allreduce(x, is_hierarchical_local=1)
    with pytest.raises(ValueError, match="factors= is for algorithm='decomposed'"):
        fs.allreduce(x, algorithm="flat", factors=(12,))
    with pytest.raises(ValueError, match=r"factors \(3, 2\) multiply to 6"):
        fs.allreduce_nonblocking(x, factors=(3, 2))
    h = fs.allreduce_nonblocking(x, factors=(3, 4))
    np.testing.assert_array_equal(fs.wait(h), x)
