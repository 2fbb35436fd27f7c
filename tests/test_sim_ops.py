"""Every simulator op against a dense numpy reference built from the weight matrix."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T

TOPOLOGIES = {
    "exp2-8": lambda: T.exponential_two_graph(8),
    "ring-7": lambda: T.ring_graph(7),
    "ring-right-6": lambda: T.ring_graph(6, style="right"),
    "mesh-9": lambda: T.mesh_grid_2d_graph(9),
    "star-5": lambda: T.star_graph(5),
    "er-12": lambda: T.erdos_renyi_graph(12, 0.4, seed=3),
    "full-4": lambda: T.fully_connected_graph(4),
}
SHAPES = [(), (3,), (2, 3)]
DTYPES = [np.float32, np.float64]


@pytest.fixture
def world():
    created = []

    def make(topo, weighted=False):
        ctx = fs.init(size=topo.size)
        fs.set_topology(topo, is_weighted=weighted)
        created.append(ctx)
        return ctx

    yield make
    fs.shutdown()


def uniform_matrix(topo) -> np.ndarray:
    """W with 1/(in-degree + 1) on self and each in-neighbor, from the pattern alone."""
    a = (topo.to_dense() != 0).astype(float)
    np.fill_diagonal(a, 1.0)
    return a / a.sum(axis=1, keepdims=True)


def stacked(n, shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


def tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


def reference(W, x):
    return np.einsum("ij,j...->i...", W, x.astype(np.float64))


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("blocking", [True, False])
def test_static_neighbor_allreduce(world, name, shape, dtype, weighted, blocking):
    topo = TOPOLOGIES[name]()
    world(topo, weighted)
    x = stacked(topo.size, shape, dtype)
    if blocking:
        got = fs.neighbor_allreduce(x)
    else:
        handle = fs.neighbor_allreduce_nonblocking(x)
        assert fs.poll(handle)
        got = fs.wait(handle)
    W = topo.to_dense() if weighted else uniform_matrix(topo)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, reference(W, x), **tol(dtype))


def test_static_src_weights_subset(world):
    topo = T.exponential_two_graph(8)
    world(topo)
    x = stacked(8, (4,), np.float64)
    # every agent listens only to its nearest in-neighbor (i - 1), with weight 0.25
    src = fs.local(lambda r: {(r - 1) % 8: 0.25})
    got = fs.neighbor_allreduce(x, self_weight=0.75, src_weights=src)
    W = 0.75 * np.eye(8) + 0.25 * np.roll(np.eye(8), -1, axis=1)
    np.testing.assert_allclose(got, W @ x, rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_push_pull_weights(world, dtype):
    n = 6
    world(T.ring_graph(n))
    x = stacked(n, (2, 2), dtype)
    rng = np.random.default_rng(1)
    # a random directed graph for this step; push weights s_ij and pull weights r_ij
    A = (rng.random((n, n)) < 0.5) & ~np.eye(n, dtype=bool)
    R = np.where(A, rng.random((n, n)), 0.0)
    S = np.where(A, rng.random((n, n)), 0.0)
    sw = rng.random(n)
    src = [{int(j): float(R[i, j]) for j in np.flatnonzero(A[i])} for i in range(n)]
    dst = [{int(i): float(S[i, j]) for i in np.flatnonzero(A[:, j])} for j in range(n)]
    got = fs.neighbor_allreduce(
        x, self_weight=sw, src_weights=src, dst_weights=dst, check_weights=False
    )  # arbitrary weights on purpose
    W = np.diag(sw) + R * S
    np.testing.assert_allclose(got, reference(W, x), **tol(dtype))


def test_dst_weights_as_rank_lists_mean_one(world):
    n = 5
    world(T.ring_graph(n))
    x = stacked(n, (3,), np.float64)
    src = fs.local(lambda r: {(r - 2) % n: 0.5})
    dst = fs.local(lambda r: [(r + 2) % n])
    got = fs.neighbor_allreduce(x, self_weight=0.5, src_weights=src, dst_weights=dst)
    np.testing.assert_allclose(got, 0.5 * x + 0.5 * np.roll(x, 2, axis=0), rtol=1e-13)


@pytest.mark.parametrize("as_type", ["dense", "sparse", "topology", "networkx"])
def test_whole_matrix_for_the_step(world, as_type):
    n = 7
    world(T.ring_graph(n))
    W = T.metropolis_hastings_weights(T.erdos_renyi_graph(n, 0.5, seed=2))
    arg = {
        "dense": W.to_dense(),
        "sparse": W.to_sparse(),
        "topology": W,
        "networkx": W.to_networkx(),
    }[as_type]
    x = stacked(n, (3,), np.float64)
    np.testing.assert_allclose(fs.neighbor_allreduce(x, src_weights=arg), W.to_dense() @ x)
    # an explicit self_weight replaces the diagonal
    got = fs.neighbor_allreduce(x, self_weight=0.0, src_weights=arg, check_weights=False)
    off = W.to_dense() - np.diag(np.diag(W.to_dense()))
    np.testing.assert_allclose(got, off @ x, atol=1e-14)


def test_one_peer_schedule_reaches_exact_average(world):
    n = 16
    world(T.exponential_two_graph(n))
    x = stacked(n, (5,), np.float64)
    mean = x.mean(axis=0)
    schedule = T.one_peer_exponential_two(n)
    for _ in range(4):  # log2(16)
        x = fs.neighbor_allreduce(x, src_weights=next(schedule).weights)
    np.testing.assert_allclose(x, np.broadcast_to(mean, x.shape), rtol=1e-13, atol=1e-15)


def test_circulant_and_csr_paths_agree_bitwise(world):
    n = 32
    topo = T.exponential_two_graph(n)
    world(topo, weighted=True)
    x = stacked(n, (9,), np.float64)
    circ = fs.neighbor_allreduce(x)  # exp-2 is circulant: the offsets kernel runs
    csr = fs.neighbor_allreduce(x, src_weights=topo.to_dense() + 0.0 * np.eye(n))
    W = topo.to_dense()  # exact weights: 1/6 rounded to 2**-53, self weight 1 - 5 w
    dicts = fs.local(lambda r: {j: W[r, j] for j in topo.in_neighbors(r)})
    via_dicts = fs.neighbor_allreduce(x, self_weight=W[0, 0], src_weights=dicts)
    assert np.array_equal(circ, csr)
    assert np.array_equal(circ, via_dicts)


def test_torch_tensors_in_and_out(world):
    torch = pytest.importorskip("torch")
    topo = T.ring_graph(5)
    world(topo)
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    got = fs.neighbor_allreduce(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), uniform_matrix(topo) @ x.numpy(), rtol=1e-6)
    s = fs.allreduce(torch.ones(5, 3, dtype=torch.float64), average=False)
    assert isinstance(s, torch.Tensor) and torch.equal(
        s, torch.full((5, 3), 5.0, dtype=torch.float64)
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("blocking", [True, False])
def test_allreduce_broadcast_allgather(world, shape, blocking):
    n = 6
    world(T.ring_graph(n))
    x = stacked(n, shape, np.float64)

    def run(op, *args, **kw):
        if blocking:
            return getattr(fs, op)(*args, **kw)
        return fs.wait(getattr(fs, op + "_nonblocking")(*args, **kw))

    np.testing.assert_allclose(run("allreduce", x), np.broadcast_to(x.mean(0), x.shape))
    np.testing.assert_allclose(
        run("allreduce", x, average=False), np.broadcast_to(x.sum(0), x.shape)
    )
    assert np.array_equal(run("broadcast", x, 4), np.broadcast_to(x[4], x.shape))
    gathered = run("allgather", x)
    per_agent = x.reshape(n, -1, *shape[1:]) if shape else x[:, None]
    whole = per_agent.reshape(-1, *per_agent.shape[2:])
    assert gathered.shape == (n, *whole.shape)
    assert all(np.array_equal(g, whole) for g in gathered)


def test_integer_sum_allowed_average_refused(world):
    world(T.ring_graph(4))
    x = np.arange(8).reshape(4, 2)
    assert np.array_equal(fs.allreduce(x, average=False), np.tile([12, 16], (4, 1)))
    with pytest.raises(TypeError, match="allreduce averages, so x must be float32 or float64"):
        fs.allreduce(x)
    with pytest.raises(TypeError, match="neighbor_allreduce averages"):
        fs.neighbor_allreduce(x)


def test_allgather_ragged_first_dimension(world):
    world(T.ring_graph(3))
    x = fs.local(lambda r: np.full((r + 1, 2), float(r)))  # 1, 2, 3 rows
    assert isinstance(x, list)
    got = fs.allgather(x)
    expected = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(3)])
    assert len(got) == 3 and all(np.array_equal(g, expected) for g in got)


def test_neighbor_allgather_static_and_dynamic(world):
    n = 8
    topo = T.exponential_two_graph(n)  # every agent has 3 in-neighbors
    world(topo)
    x = stacked(n, (2,), np.float64)
    got = fs.neighbor_allgather(x)
    for i in range(n):
        assert np.array_equal(got[i], np.concatenate([x[j] for j in topo.in_neighbors(i)]))
    # star: uneven in-degrees -> one array per agent, in rank order
    world(T.star_graph(4))
    y = stacked(4, (2,), np.float64)
    ragged = fs.neighbor_allgather(y)
    assert isinstance(ragged, list)
    assert np.array_equal(ragged[0], np.concatenate([y[1], y[2], y[3]]))
    assert np.array_equal(ragged[2], y[0])
    # dynamic: agent r hears from r+1
    src = fs.local(lambda r: [(r + 1) % 4])
    dst = fs.local(lambda r: [(r - 1) % 4])
    dyn = fs.neighbor_allgather(y, src_ranks=src, dst_ranks=dst)
    assert np.array_equal(dyn, np.roll(y, -1, axis=0))


def test_scalar_input_is_the_same_value_everywhere(world):
    world(T.ring_graph(4))
    assert np.array_equal(fs.neighbor_allreduce(2.5), np.full(4, 2.5))


def test_repeated_steps_reuse_buffers_without_corrupting_results(world):
    n = 4096
    world(T.ring_graph(n))
    x0 = stacked(n, (64,), np.float64)  # 2 MiB: large enough for the buffer pool

    def ring_step(v):
        return (np.roll(v, 1, 0) + v + np.roll(v, -1, 0)) / 3

    x, kept, expected = x0, [], [x0]
    for _ in range(5):
        x = fs.neighbor_allreduce(x)
        kept.append(x)  # results the user keeps must never be overwritten
        expected.append(ring_step(expected[-1]))
    for got, want in zip(kept, expected[1:], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # once dropped, outputs are recycled: a loop x = f(x) alternates two buffers
    x, addresses = x0, set()
    for _ in range(6):
        x = fs.neighbor_allreduce(x)
        addresses.add(x.__array_interface__["data"][0])
    assert len(addresses) <= 3
    np.testing.assert_allclose(x, _repeat(ring_step, x0, 6), rtol=1e-12, atol=1e-14)


def _repeat(f, v, k):
    for _ in range(k):
        v = f(v)
    return v
