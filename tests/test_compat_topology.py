"""fogsim.compat.bluefog.topology_util against hand-computed BlueFog matrices and schedules.

``A = nx.to_numpy_array(G)``: ``A[j, i]`` is the weight agent i applies to agent j (edge
j -> i), the transpose of fogsim's ``W``.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim.compat.bluefog import topology_util as tu


@pytest.fixture(autouse=True)
def _clean():
    yield
    fs.shutdown()


def adjacency(graph: nx.DiGraph) -> np.ndarray:
    assert isinstance(graph, nx.DiGraph)
    assert list(graph.nodes) == list(range(graph.number_of_nodes()))
    return nx.to_numpy_array(graph)


def from_sends(n: int, sends: dict[int, dict[int, float]]) -> np.ndarray:
    """Return A with A[j, i] = sends[j][i] (j's value weighted by i)."""
    a = np.zeros((n, n))
    for j, row in sends.items():
        for i, w in row.items():
            a[j, i] = w
    return a


# -- static graphs against hand-computed BlueFog matrices ----------------------------------
def test_exponential_two_graph_8():
    a = adjacency(tu.ExponentialTwoGraph(8))
    # Row 0: agent 0's value goes to 0, 1, 2, 4; column 0: agent 0 hears 0, 7, 6, 4.
    np.testing.assert_array_equal(a[0], [0.25, 0.25, 0.25, 0, 0.25, 0, 0, 0])
    np.testing.assert_array_equal(a[:, 0], [0.25, 0, 0, 0, 0.25, 0, 0.25, 0.25])
    expected = from_sends(8, {j: {(j + d) % 8: 0.25 for d in (0, 1, 2, 4)} for j in range(8)})
    np.testing.assert_array_equal(a, expected)


def test_exponential_graph_base_3_uses_exact_powers():
    a = adjacency(tu.ExponentialGraph(10, base=3))
    expected = from_sends(10, {j: {(j + d) % 10: 0.25 for d in (0, 1, 3, 9)} for j in range(10)})
    np.testing.assert_array_equal(a, expected)
    # BlueFog's float isPowerOf misses 3**5 = 243; the documented powers include it.
    big = tu.ExponentialGraph(250, base=3)
    assert sorted(big.successors(0)) == [0, 1, 3, 9, 27, 81, 243]
    np.testing.assert_array_equal(
        adjacency(tu.ExponentialGraph(8)), adjacency(tu.ExponentialTwoGraph(8))
    )


def test_symmetric_exponential_graph_default_base_4():
    a = adjacency(tu.SymmetricExponentialGraph(12))
    # Offsets p and 12 - p for the powers of 4 up to 12 // 2 = 6: {1, 11, 4, 8}.
    np.testing.assert_array_equal(a[0], np.array([1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1]) / 5)
    np.testing.assert_array_equal(a, a.T)
    for j in range(12):
        np.testing.assert_array_equal(a[j], np.roll(a[0], j))


def test_symmetric_exponential_graph_differs_from_fogsim_builder():
    # n = 7, base 2: BlueFog uses powers <= 3, i.e. offsets {1, 2, 5, 6}; fogsim's builder
    # also mirrors 4 and so connects everyone. This is why topology_util builds it itself.
    a = adjacency(tu.SymmetricExponentialGraph(7, base=2))
    np.testing.assert_array_equal(a[0], np.array([1, 1, 1, 0, 0, 1, 1]) / 5)
    fogsim_w = T.symmetric_exponential_graph(7, base=2).to_dense()
    assert not np.array_equal(a.T, fogsim_w)
    np.testing.assert_array_equal(adjacency(tu.SymmetricExponentialGraph(2)), np.full((2, 2), 0.5))
    np.testing.assert_array_equal(adjacency(tu.SymmetricExponentialGraph(1)), [[1.0]])


@pytest.mark.parametrize(
    "style, sends",
    [
        (0, {0: 1 / 3, 1: 1 / 3, -1: 1 / 3}),  # bidirectional
        (1, {0: 0.5, -1: 0.5}),  # left-connected: i sends to i - 1
        (2, {0: 0.5, 1: 0.5}),  # right-connected: i sends to i + 1
    ],
)
def test_ring_graph_5_styles(style, sends):
    a = adjacency(tu.RingGraph(5, connect_style=style))
    expected = from_sends(5, {j: {(j + d) % 5: w for d, w in sends.items()} for j in range(5)})
    # fogsim's exact weights: 1/3 on the 2**-53 grid, the self weight one minus the others
    np.testing.assert_allclose(a, expected, rtol=0, atol=2.0**-52)
    assert ((a != 0) == (expected != 0)).all() and (a.sum(axis=0) == 1.0).all()


def test_ring_graph_small_sizes_and_bad_style():
    for style in (0, 1, 2):
        np.testing.assert_array_equal(adjacency(tu.RingGraph(2, style)), np.full((2, 2), 0.5))
        np.testing.assert_array_equal(adjacency(tu.RingGraph(1, style)), [[1.0]])
    for bad in (3, -1, True):
        with pytest.raises(ValueError, match="connect_style must be 0, 1 or 2"):
            tu.RingGraph(5, bad)


def test_star_graph_4():
    q = 0.25
    expected = [[q, q, q, q], [q, 0.75, 0, 0], [q, 0, 0.75, 0], [q, 0, 0, 0.75]]
    np.testing.assert_array_equal(adjacency(tu.StarGraph(4)), expected)
    a = adjacency(tu.StarGraph(3, center_rank=2))
    np.testing.assert_array_equal(a[2], [1 / 3, 1 / 3, 1 / 3])  # BlueFog's 1/size exactly
    np.testing.assert_array_equal(np.diag(a), [1 - 1 / 3, 1 - 1 / 3, 1 / 3])
    np.testing.assert_array_equal(adjacency(tu.StarGraph(1)), [[1.0]])
    with pytest.raises(ValueError, match="center_rank=4 is out of range"):
        tu.StarGraph(4, center_rank=4)


def test_mesh_grid_2d_graph_6():
    # 2 x 3 grid 0 1 2 / 3 4 5; degrees 2 3 2 / 2 3 2; w_ij = 1 / (1 + max(d_i, d_j)).
    e = {(0, 1): 4, (1, 2): 4, (0, 3): 3, (2, 5): 3, (1, 4): 4, (3, 4): 4, (4, 5): 4}
    expected = np.zeros((6, 6))
    for (i, j), d in e.items():
        expected[i, j] = expected[j, i] = 1 / d
    np.fill_diagonal(expected, [5 / 12, 1 / 4, 5 / 12, 5 / 12, 1 / 4, 5 / 12])
    a = adjacency(tu.MeshGrid2DGraph(6))
    np.testing.assert_array_equal(a != 0, expected != 0)
    np.testing.assert_allclose(a, expected, rtol=0, atol=1e-15)
    # shape (3, 2): 0 1 / 2 3 / 4 5; agent 2 links to 0, 3, 4.
    assert sorted(tu.MeshGrid2DGraph(6, shape=(3, 2)).successors(2)) == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="holds 8 agents but n is 6"):
        tu.MeshGrid2DGraph(6, shape=(2, 4))


def test_fully_connected_graph():
    a = adjacency(tu.FullyConnectedGraph(3))  # exact weights: 1/3 within an ulp, rows sum to 1
    np.testing.assert_allclose(a, np.full((3, 3), 1 / 3), rtol=0, atol=2.0**-52)
    assert (a.sum(axis=0) == 1.0).all()


# -- utilities -----------------------------------------------------------------------------
def test_is_topology_equivalent():
    assert tu.IsTopologyEquivalent(tu.RingGraph(5), tu.RingGraph(5))
    assert not tu.IsTopologyEquivalent(tu.RingGraph(5), tu.RingGraph(5, 1))
    assert not tu.IsTopologyEquivalent(tu.RingGraph(5), tu.RingGraph(6))
    assert not tu.IsTopologyEquivalent(tu.RingGraph(5), None)
    assert not tu.IsTopologyEquivalent(None, None)
    # Same edges, one weight changed.
    g = tu.ExponentialTwoGraph(8)
    h = g.copy()
    h[0][1]["weight"] = 0.5
    assert not tu.IsTopologyEquivalent(g, h)
    # Same graph, nodes and edges inserted in another order.
    shuffled = nx.DiGraph()
    shuffled.add_nodes_from(reversed(range(8)))
    shuffled.add_weighted_edges_from(reversed(list(g.edges(data="weight"))))
    assert tu.IsTopologyEquivalent(g, shuffled)
    # A fogsim Topology is accepted and compared by weights.
    assert tu.IsTopologyEquivalent(g, T.exponential_two_graph(8))


def test_is_regular_graph():
    assert tu.IsRegularGraph(tu.ExponentialTwoGraph(8))
    assert tu.IsRegularGraph(tu.RingGraph(5))
    assert not tu.IsRegularGraph(tu.StarGraph(4))
    assert not tu.IsRegularGraph(tu.MeshGrid2DGraph(6))


GRAPHS = {
    "exp2": lambda: tu.ExponentialTwoGraph(8),
    "ring_left": lambda: tu.RingGraph(5, 1),
    "star": lambda: tu.StarGraph(4, 1),
    "mesh": lambda: tu.MeshGrid2DGraph(6),
    "symexp": lambda: tu.SymmetricExponentialGraph(12),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_recv_and_send_weights_read_the_matrix(name):
    graph = GRAPHS[name]()
    a = adjacency(graph)
    n = a.shape[0]
    for r in range(n):
        sw, recv = tu.GetRecvWeights(graph, r)
        assert sw == a[r, r] and type(sw) is float
        assert recv == {j: a[j, r] for j in range(n) if j != r and a[j, r]}
        sw, send = tu.GetSendWeights(graph, r)
        assert sw == a[r, r]
        assert send == {i: a[r, i] for i in range(n) if i != r and a[r, i]}
        assert all(type(w) is float for w in (*recv.values(), *send.values()))
    # Pull weights: each agent's receive weights sum to 1.
    assert np.isclose(sum(tu.GetRecvWeights(graph, 0)[1].values()) + a[0, 0], 1)


def test_recv_weights_without_self_loop():
    g = nx.DiGraph([(0, 1), (1, 0)])
    assert tu.GetRecvWeights(g, 0) == (0.0, {1: 1.0})
    assert tu.GetSendWeights(g, 1) == (0.0, {0: 1.0})


# -- dynamic schedules ---------------------------------------------------------------------
def take(gen, steps):
    return list(itertools.islice(gen, steps))


def test_one_peer_exponential_two():
    graph = tu.ExponentialTwoGraph(8)
    for r in range(8):
        got = take(tu.GetDynamicOnePeerSendRecvRanks(graph, r), 7)
        want = [([(r + 2 ** (t % 3)) % 8], [(r - 2 ** (t % 3)) % 8]) for t in range(7)]
        assert got == want
    assert tu.GetDynamicSendRecvRanks is tu.GetDynamicOnePeerSendRecvRanks


def test_one_peer_mesh_by_hand():
    # Out-neighbors ordered by (j - r) % 6: 0 -> [1, 3], 1 -> [2, 4, 0], 2 -> [5, 1],
    # 3 -> [4, 0], 4 -> [5, 1, 3], 5 -> [2, 4]; step 0: 0>1 1>2 2>5 3>4 4>5 5>2.
    graph = tu.MeshGrid2DGraph(6)
    step0 = [next(tu.GetDynamicOnePeerSendRecvRanks(graph, r)) for r in range(6)]
    assert step0 == [([1], []), ([2], [0]), ([5], [1, 5]), ([4], []), ([5], [3]), ([2], [2, 4])]
    assert take(tu.GetDynamicOnePeerSendRecvRanks(graph, 1), 4) == [
        ([2], [0]),
        ([4], [2, 4]),
        ([0], [0]),
        ([2], [2]),
    ]


@pytest.mark.parametrize("name", GRAPHS)
def test_one_peer_matches_fogsim_schedule(name):
    graph = GRAPHS[name]()
    n = graph.number_of_nodes()
    gens = [tu.GetDynamicOnePeerSendRecvRanks(graph, r) for r in range(n)]
    for step in take(T.one_peer_schedule(T.as_topology(graph)), 13):
        got = [next(g) for g in gens]
        for r, (send, recv) in enumerate(got):
            assert send == step.send_ranks(r), (step.step, r)
            assert recv == step.recv_ranks(r), (step.step, r)


def test_one_peer_agent_without_out_neighbors_sends_nothing():
    g = nx.DiGraph([(0, 0), (1, 1), (2, 2), (0, 1), (2, 1)])
    assert take(tu.GetDynamicOnePeerSendRecvRanks(g, 1), 2) == [([], [0, 2])] * 2
    assert take(tu.GetDynamicOnePeerSendRecvRanks(g, 0), 2) == [([1], [])] * 2
    with pytest.raises(ValueError, match="self_rank=3 is out of range"):
        tu.GetDynamicOnePeerSendRecvRanks(g, 3)


def test_exp2_machine_ranks():
    # 4 machines of 2: machine 2 sends to 2 + 1, 2 + 2, then again.
    got = take(tu.GetExp2DynamicSendRecvMachineRanks(8, 2, 5, 1), 4)
    assert got == [([3], [1]), ([0], [0]), ([3], [1]), ([0], [0])]
    got = take(tu.GetExp2DynamicSendRecvMachineRanks(10, 2, 0, 0), 4)  # 5 machines: 1, 2, 4
    assert got == [([1], [4]), ([2], [3]), ([4], [1]), ([1], [4])]
    with pytest.raises(ValueError, match="local_rank=0 is not self_rank % local_size = 1"):
        tu.GetExp2DynamicSendRecvMachineRanks(8, 2, 5, 0)
    with pytest.raises(ValueError, match="at least two machines, got world_size == local_size"):
        tu.GetExp2DynamicSendRecvMachineRanks(4, 4, 1, 1)
    with pytest.raises(ValueError, match="not a multiple of local_size"):
        tu.GetExp2DynamicSendRecvMachineRanks(9, 2, 1, 1)


def test_inner_outer_expo2_by_hand():
    # 2 machines of 4, rank 1 (machine 0, local 1). t=0: local 0 goes out; the ring
    # 1 2 3 without 0 sends one place ahead: 1 -> 2, receives from 3.
    got = take(tu.GetInnerOuterExpo2DynamicSendRecvRanks(8, 4, 1), 4)
    assert got == [([2], [3]), ([5], [5]), ([3], [0]), ([0], [2])]


def test_inner_outer_ring_by_hand():
    got = take(tu.GetInnerOuterRingDynamicSendRecvRanks(8, 4, 1), 4)
    assert got == [([2], [3]), ([5], [5]), ([3], [0]), ([2], [0])]


@pytest.mark.parametrize(
    "fn", [tu.GetInnerOuterExpo2DynamicSendRecvRanks, tu.GetInnerOuterRingDynamicSendRecvRanks]
)
@pytest.mark.parametrize("world, local", [(6, 3), (8, 4), (20, 5), (24, 6), (12, 3)])
def test_inner_outer_sends_match_receives(fn, world, local):
    gens = [fn(world, local, r) for r in range(world)]
    for _ in range(2 * local * world):
        steps = [next(g) for g in gens]
        for r, (send, recv) in enumerate(steps):
            assert len(send) == len(recv) == 1 and r not in send + recv
            assert steps[send[0]][1] == [r]  # whom r sends to receives from r
            assert r // local == send[0] // local or r % local == send[0] % local


@pytest.mark.parametrize(
    "fn", [tu.GetInnerOuterExpo2DynamicSendRecvRanks, tu.GetInnerOuterRingDynamicSendRecvRanks]
)
def test_inner_outer_errors(fn):
    with pytest.raises(ValueError, match="local_size must be > 2"):
        fn(8, 2, 0)
    with pytest.raises(ValueError, match="at least two machines, got world_size == local_size"):
        fn(4, 4, 0)
    with pytest.raises(ValueError, match="self_rank=8 is out of range"):
        fn(8, 4, 8)


# -- fogsim takes the graphs: same matrix as fogsim's builders where they coincide ---------
# BlueFog's builders weigh with plain 1/(K+1) (what its own tests compare exactly); fogsim's
# make every row sum to exactly 1, so the two agree to round-off.
COINCIDE = [
    (lambda n: tu.ExponentialTwoGraph(n), T.exponential_two_graph, False),
    (lambda n: tu.ExponentialGraph(n, 3), lambda n: T.exponential_graph(n, 3), False),
    (lambda n: tu.RingGraph(n, 0), lambda n: T.ring_graph(n, "bidirectional"), False),
    (lambda n: tu.RingGraph(n, 1), lambda n: T.ring_graph(n, "left"), False),
    (lambda n: tu.RingGraph(n, 2), lambda n: T.ring_graph(n, "right"), False),
    (lambda n: tu.FullyConnectedGraph(n), T.fully_connected_graph, False),
    (lambda n: tu.MeshGrid2DGraph(n), T.mesh_grid_2d_graph, True),
    (lambda n: tu.StarGraph(n), T.star_graph, False),  # center self weight: 1/n vs 1 - (n-1)/n
]


@pytest.mark.parametrize("n", [1, 2, 3, 6, 12])
@pytest.mark.parametrize("k", range(len(COINCIDE)))
def test_fogsim_loads_the_same_matrix_as_its_builder(n, k):
    bluefog_graph, builder, exact = COINCIDE[k]
    fs.init(backend="sim", size=n)
    fs.set_topology(bluefog_graph(n), is_weighted=True)
    got = fs.load_topology().to_dense()
    want = builder(n).to_dense()
    np.testing.assert_array_equal(got != 0, want != 0)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(got, adjacency(bluefog_graph(n)).T)
