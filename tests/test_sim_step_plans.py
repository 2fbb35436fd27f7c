"""Per-call weights passed again find the plan they made (fogsim.backends.sim._stepplans).

What a user sees must not change: the same bits as weights read anew, a dict changed in
place between calls read anew, a changed topology honoured, weight warnings as before.
"""

import warnings

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim._context import current


@pytest.fixture
def ring8():
    fs.init(size=8, topology=T.ring_graph)
    yield 8
    fs.shutdown()


def _reference(x, self_weight, src):
    """x_i <- self_weight x_i + sum_j src[i][j] x_j in numpy (float64)."""
    n = len(x)
    W = np.zeros((n, n))
    for i, row in enumerate(src):
        W[i, i] = self_weight
        for j, w in row.items():
            W[i, j] = w
    return W @ x


def _plans():
    return current().backend._state.step_plans


def test_weights_passed_again_give_the_bits_of_weights_read_anew(ring8):
    n = ring8
    x = np.random.default_rng(0).standard_normal((n, 3))
    src = fs.local(lambda r: {(r - 1) % n: 0.25, (r + 1) % n: 0.25})
    first = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    again = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    copy = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=[dict(d) for d in src])
    assert np.array_equal(first, again) and np.array_equal(first, copy)
    np.testing.assert_allclose(first, _reference(x, 0.5, src), rtol=1e-14)
    assert _plans().find(0.5, src, None) is not None  # it was found, not rebuilt


def test_a_dict_changed_in_place_is_read_anew(ring8):
    n = ring8
    x = np.random.default_rng(1).standard_normal((n, 2))
    src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    src[3][2] = 0.4  # the user's dict, changed between two calls
    src[3][4] = 0.1
    got = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    np.testing.assert_allclose(got, _reference(x, 0.5, src), rtol=1e-14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows of 0.75: not stochastic, on purpose
        got = fs.neighbor_allreduce(x, self_weight=0.25, src_weights=src)  # another self weight
    np.testing.assert_allclose(got, _reference(x, 0.25, src), rtol=1e-14)


def test_a_negative_zero_weight_keeps_its_sign(ring8):
    n = ring8
    x = np.zeros((n, 1))
    x[0] = -1.0
    src = [{(r - 1) % n: 0.0, (r + 1) % n: 0.0} for r in range(n)]
    neg = [{(r - 1) % n: -0.0, (r + 1) % n: -0.0} for r in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weights that do not sum to 1, on purpose
        a = fs.neighbor_allreduce(x, self_weight=0.0, src_weights=src)
        b = fs.neighbor_allreduce(x, self_weight=-0.0, src_weights=neg)
    # 0 * -1 + 0 + 0 is +0.0; -0 * -1 ... differ in sign only: compare bits
    assert np.signbit(a).tolist() != np.signbit(b).tolist()


def test_matrices_and_arrays_found_again_by_value(ring8):
    n = ring8
    x = np.random.default_rng(2).standard_normal((n, 2))
    W = T.exponential_two_graph(n).uniform().to_sparse().toarray()
    first = fs.neighbor_allreduce(x, src_weights=W)
    W2 = W.copy()
    W2[0, 0], W2[0, 1] = W[0, 1], W[0, 0]  # the same sums, another matrix
    second = fs.neighbor_allreduce(x, src_weights=W2)
    np.testing.assert_allclose(second, W2 @ x, rtol=1e-14)
    assert not np.array_equal(first, second)
    sw = np.full(n, 0.5)
    src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    fs.neighbor_allreduce(x, self_weight=sw, src_weights=src)
    sw[1] = 0.25  # changed in place: read anew
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fs.neighbor_allreduce(x, self_weight=sw, src_weights=src)
    assert got[1] == pytest.approx(0.25 * x[1] + 0.25 * (x[0] + x[2]))


def test_a_new_topology_is_honoured_by_dicts_kept_for_the_old_one(ring8):
    n = ring8
    x = np.random.default_rng(3).standard_normal((n, 2))
    src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    fs.set_topology(T.star_graph(n))  # rank r-1 is no longer every agent's in-neighbor
    with pytest.raises(ValueError, match="not an in-neighbor"):
        fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)


def test_weights_that_warned_warn_again_from_another_line(ring8):
    n = ring8
    x = np.ones((n, 1))
    src = [{(r - 1) % n: 0.5, (r + 1) % n: 0.5} for r in range(n)]  # rows sum to 1.5
    with pytest.warns(fs.WeightWarning):
        fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
    with pytest.warns(fs.WeightWarning):
        fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)


def test_bytes_sent_count_every_step_of_a_kept_plan(ring8):
    n = ring8
    x = np.zeros((n, 4))  # 32 bytes per agent
    src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    fs.bytes_sent(reset=True)
    for _ in range(5):
        fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src)
        fs.neighbor_allreduce(x)
    topo = T.one_peer_exponential_two(n)
    for _ in range(3):
        fs.neighbor_allreduce(x, src_weights=next(topo).weights)
    # ring: 2 out-neighbors per agent for 10 steps; one peer: 1 for 3 steps
    assert fs.bytes_sent().tolist() == [32 * (2 * 10 + 3)] * n


def test_a_kept_plan_holds_no_array_of_the_caller(ring8):
    n = ring8
    x = np.random.default_rng(4).standard_normal((n, 2))
    src = [{(r - 1) % n: 0.25, (r + 1) % n: 0.25} for r in range(n)]
    sw = np.full(n, 0.5)
    first = fs.neighbor_allreduce(x, self_weight=sw, src_weights=src)
    sw[:] = 0.25  # the caller reuses its array for other weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows of 0.75, on purpose
        fs.neighbor_allreduce(x, self_weight=sw, src_weights=src)
    # equal to the first call's weights: the plan kept for them still holds them
    again = fs.neighbor_allreduce(x, self_weight=np.full(n, 0.5), src_weights=src)
    assert np.array_equal(first, again)
