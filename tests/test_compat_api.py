"""fogsim.compat.bluefog's functions under the simulator backend (stacked agents).

Per-agent BlueFog scripts run under MPI; here each wrapper is checked against fogsim's own
function and a dense reference built from the weight matrix.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest

import fogsim as fs
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import _api
from fogsim.compat.bluefog import topology_util as tu

BF_PUBLIC = {
    "init",
    "shutdown",
    "size",
    "rank",
    "local_size",
    "local_rank",
    "set_topology",
    "load_topology",
    "is_topo_weighted",
    "in_neighbor_ranks",
    "out_neighbor_ranks",
    "allreduce",
    "allreduce_nonblocking",
    "allreduce_",
    "allreduce_nonblocking_",
    "allgather",
    "allgather_nonblocking",
    "broadcast",
    "broadcast_nonblocking",
    "broadcast_",
    "broadcast_nonblocking_",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "barrier",
    "synchronize",
    "wait",
    "poll",
    "topology_util",
    "machine_size",
    "machine_rank",
    "set_machine_topology",
    "load_machine_topology",
    "is_machine_topo_weighted",
    "in_neighbor_machine_ranks",
    "out_neighbor_machine_ranks",
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
    "ExponentialTwoGraph",
    "ExponentialGraph",
    "SymmetricExponentialGraph",
    "RingGraph",
    "StarGraph",
    "MeshGrid2DGraph",
    "FullyConnectedGraph",
    "win_create",
    "win_free",
    "win_put",
    "win_put_nonblocking",
    "win_accumulate",
    "win_accumulate_nonblocking",
    "win_get",
    "win_get_nonblocking",
    "win_update",
    "win_update_then_collect",
    "win_mutex",
    "win_wait",
    "win_poll",
    "get_win_version",
    "win_associated_p",
    "turn_on_win_ops_with_associated_p",
    "turn_off_win_ops_with_associated_p",
    "get_current_created_window_names",
    "win_sync",
    "win_sync_then_collect",
    "CommunicationType",
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedGradientAllreduceOptimizer",
    "DistributedPushSumOptimizer",
    "DistributedWinPutOptimizer",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "nccl_built",
    "mpi_threads_supported",
    "unified_mpi_window_model_supported",
    "is_homogeneous",
    "set_skip_negotiate_stage",
    "get_skip_negotiate_stage",
    "suspend",
    "resume",
    "timeline_start_activity",
    "timeline_end_activity",
    "timeline_context",
    "win_lock",
    "allreduce_parameters",
    "DistributedAllreduceOptimizer",
    "DistributedNeighborAllreduceOptimizer",
    "DistributedHierarchicalNeighborAllreduceOptimizer",
    "DistributedPullGetOptimizer",
    "IsTopologyEquivalent",
    "InferSourceFromDestinationRanks",
    "InferDestinationFromSourceRanks",
}
TU_PUBLIC = {
    "ExponentialTwoGraph",
    "ExponentialGraph",
    "SymmetricExponentialGraph",
    "RingGraph",
    "StarGraph",
    "MeshGrid2DGraph",
    "FullyConnectedGraph",
    "IsTopologyEquivalent",
    "IsRegularGraph",
    "GetRecvWeights",
    "GetSendWeights",
    "GetDynamicOnePeerSendRecvRanks",
    "GetDynamicSendRecvRanks",
    "GetExp2DynamicSendRecvMachineRanks",
    "GetInnerOuterRingDynamicSendRecvRanks",
    "GetInnerOuterExpo2DynamicSendRecvRanks",
    "InferSourceFromDestinationRanks",
    "InferDestinationFromSourceRanks",
}


@pytest.fixture(autouse=True)
def _clean():
    yield
    fs.shutdown()


@pytest.fixture
def world(monkeypatch):
    """bf.init() with 6 simulated agents, as a BlueFog script would start (no arguments)."""
    monkeypatch.setenv("FOGSIM_SIZE", "6")
    monkeypatch.delenv("FOGSIM_BACKEND", raising=False)
    bf.init()
    return 6


def stacked(n, width=3, seed=0):
    return np.random.default_rng(seed).standard_normal((n, width))


# -- namespace -----------------------------------------------------------------------------
def test_public_namespace_is_pinned():
    assert set(bf.__all__) == BF_PUBLIC
    assert set(tu.__all__) == TU_PUBLIC
    for module in (bf, tu):
        for name in module.__all__:
            obj = getattr(module, name)
            assert not callable(obj) or inspect.getdoc(obj), f"{name} has no docstring"
    assert bf.topology_util is tu
    assert bf.ExponentialTwoGraph is tu.ExponentialTwoGraph  # the paper's bf.ExponentialTwoGraph


def test_import_has_no_side_effects():
    code = (
        "import sys; import fogsim.compat.bluefog as bf; "
        "from fogsim.compat.bluefog import topology_util; "
        "assert 'torch' not in sys.modules and 'mpi4py' not in sys.modules; "
        "import fogsim; assert not fogsim.is_initialized()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_signatures_follow_bluefog():
    params = list(inspect.signature(bf.neighbor_allreduce).parameters)
    assert params == [
        "tensor",
        "self_weight",
        "src_weights",
        "dst_weights",
        "enable_topo_check",
        "name",
        "neighbor_weights",
        "send_neighbors",  # BlueFog's earlier names, keyword-only
    ]
    assert list(inspect.signature(bf.init).parameters) == ["topology_fn", "is_weighted"]
    assert list(inspect.signature(bf.set_topology).parameters) == ["topology", "is_weighted"]
    assert list(inspect.signature(bf.broadcast_).parameters) == ["tensor", "root_rank", "name"]


# -- world and topology --------------------------------------------------------------------
def test_init_defaults(world):
    assert bf.size() == world and bf.local_size() == world
    np.testing.assert_array_equal(bf.rank(), np.arange(world))
    np.testing.assert_array_equal(bf.local_rank(), np.arange(world))
    topo = bf.load_topology()
    assert isinstance(topo, nx.DiGraph)
    assert tu.IsTopologyEquivalent(topo, tu.ExponentialTwoGraph(world))
    assert bf.is_topo_weighted() is False


def test_init_with_topology_fn(monkeypatch):
    monkeypatch.setenv("FOGSIM_SIZE", "5")
    bf.init(tu.StarGraph, is_weighted=True)
    assert bf.size() == 5
    assert tu.IsTopologyEquivalent(bf.load_topology(), tu.StarGraph(5))
    assert bf.is_topo_weighted() is True
    assert bf.in_neighbor_ranks()[0] == [1, 2, 3, 4]
    assert bf.out_neighbor_ranks()[3] == [0]


def test_shutdown_then_init_again(world):
    bf.shutdown()
    with pytest.raises(RuntimeError, match="not initialized"):
        bf.size()
    bf.init()
    assert bf.size() == world


def test_set_topology(world):
    assert bf.set_topology(tu.RingGraph(world)) is True
    topo = bf.load_topology()
    assert isinstance(topo, nx.DiGraph)
    a = nx.to_numpy_array(topo)
    # fogsim's exact ring weights: 1/3 on the 2**-53 grid, the self weight one minus the others
    np.testing.assert_allclose(a[0], [1 / 3, 1 / 3, 0, 0, 0, 1 / 3], rtol=0, atol=2.0**-52)
    assert a[:, 0].sum() == 1.0  # a = W^T: agent 0's row sums to exactly 1
    assert tu.IsTopologyEquivalent(topo, tu.RingGraph(world))
    assert bf.is_topo_weighted() is False
    assert bf.in_neighbor_ranks()[0] == [1, 5]
    assert bf.set_topology(tu.RingGraph(world, 2), is_weighted=True) is True
    assert bf.is_topo_weighted() is True
    assert bf.out_neighbor_ranks()[0] == [1] and bf.in_neighbor_ranks()[0] == [5]
    assert bf.set_topology() is True  # None: the exponential-2 graph
    assert tu.IsTopologyEquivalent(bf.load_topology(), tu.ExponentialTwoGraph(world))
    with pytest.raises(ValueError, match="has 4 agents but the world has 6"):
        bf.set_topology(tu.RingGraph(4))


# -- neighbor_allreduce --------------------------------------------------------------------
def test_neighbor_allreduce_equals_fogsim_and_reference(world):
    x = stacked(world)
    for graph, weighted in [(tu.ExponentialTwoGraph(world), False), (tu.StarGraph(world), True)]:
        bf.set_topology(graph, is_weighted=weighted)
        w = nx.to_numpy_array(graph).T
        if not weighted:
            w = (w != 0) / (w != 0).sum(axis=1, keepdims=True)
        got = bf.neighbor_allreduce(x)
        np.testing.assert_array_equal(got, fs.neighbor_allreduce(x))
        np.testing.assert_allclose(got, w @ x, rtol=1e-14, atol=1e-14)


def test_neighbor_allreduce_with_topology_weights_from_get_recv_weights(world):
    graph = tu.MeshGrid2DGraph(world)
    bf.set_topology(graph)
    pairs = [tu.GetRecvWeights(graph, r) for r in range(world)]
    x = stacked(world)
    got = bf.neighbor_allreduce(x, np.array([p[0] for p in pairs]), [p[1] for p in pairs])
    np.testing.assert_allclose(got, nx.to_numpy_array(graph).T @ x, rtol=1e-14, atol=1e-14)


def test_integer_weights_are_accepted_and_passed_as_floats(world, monkeypatch):
    n = world
    x = stacked(n)
    # Listing 7's weights: src {r: 1}, self 1 / (out-degree + 1), dst {r: self weight}.
    src_int = [{(r - 1) % n: 1} for r in range(n)]
    dst_int = [{(r + 1) % n: 1} for r in range(n)]
    got = bf.neighbor_allreduce(x, 1, src_int, dst_int)
    np.testing.assert_allclose(got, x + np.roll(x, 1, axis=0), rtol=1e-15)
    ranks_only = [[(r + 1) % n] for r in range(n)]  # a list of ranks means weight 1.0
    np.testing.assert_array_equal(bf.neighbor_allreduce(x, 1, src_int, ranks_only), got)

    seen = {}

    def spy(
        tensor,
        self_weight,
        src_weights,
        dst_weights,
        enable_topo_check,
        name,
        *,
        check_weights=True,
    ):
        seen.update(
            self_weight=self_weight, src=src_weights, dst=dst_weights, check_weights=check_weights
        )
        return tensor

    monkeypatch.setattr(_api.fogsim, "neighbor_allreduce", spy)
    bf.neighbor_allreduce(x, 1, src_int, dst_int)
    assert type(seen["self_weight"]) is float
    assert seen["check_weights"] is False  # BlueFog uses any weights without a word
    assert all(type(w) is float for d in seen["src"] + seen["dst"] for w in d.values())
    assert src_int[0] == {n - 1: 1} and type(src_int[0][n - 1]) is int  # caller's dicts kept
    bf.neighbor_allreduce(x, 0.5, {1: 2}, ranks_only)  # one agent's dict; rank lists kept
    assert seen["src"] == {1: 2.0} and type(seen["src"][1]) is float
    assert seen["dst"] is ranks_only


def test_listing7_push_sum_over_one_peer_mesh(world):
    """The paper's Listing 7 weights, stacked: column-stochastic steps keep the sum."""
    n = world
    bf.set_topology(tu.MeshGrid2DGraph(n))
    gens = [tu.GetDynamicOnePeerSendRecvRanks(bf.load_topology(), r) for r in range(n)]
    u = stacked(n)
    v = np.ones((n, 1))
    total = u.sum(axis=0)
    for _ in range(60):
        dst_src = [next(g) for g in gens]
        self_weight = np.array([1 / (len(dst) + 1) for dst, _ in dst_src])
        src_weights = [{r: 1 for r in src} for _, src in dst_src]
        dst_weights = [{r: self_weight[i] for r in dst} for i, (dst, _) in enumerate(dst_src)]
        w = np.diag(self_weight)
        for i, (dst, _) in enumerate(dst_src):
            for j in dst:
                w[j, i] = self_weight[i]
        expected_u = w @ u
        u = bf.neighbor_allreduce(u, self_weight, src_weights, dst_weights)
        v = bf.neighbor_allreduce(v, self_weight, src_weights, dst_weights)
        np.testing.assert_allclose(u, expected_u, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(u.sum(axis=0), total, rtol=1e-12)
    np.testing.assert_allclose(u / v, np.broadcast_to(total / n, u.shape), atol=1e-6)


def test_neighbor_allreduce_mismatch_is_an_error(world):
    n = world
    src = [{(r - 1) % n: 0.5} for r in range(n)]
    dst = [{(r + 2) % n: 1.0} for r in range(n)]
    with pytest.raises(ValueError, match="topology check failed"):
        bf.neighbor_allreduce(stacked(n), 0.5, src, dst)
    with pytest.raises(ValueError, match="self_weight and src_weights"):
        bf.neighbor_allreduce(stacked(n), 0.5)


# -- nonblocking and synchronization -------------------------------------------------------
def test_synchronize_and_wait_are_the_same(world):
    x = stacked(world)
    h1 = bf.neighbor_allreduce_nonblocking(x)
    h2 = bf.neighbor_allreduce_nonblocking(x)
    assert bf.poll(h1) is True
    a, b = bf.synchronize(h1), bf.wait(h2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, bf.neighbor_allreduce(x))
    for op, args in [
        (bf.allreduce_nonblocking, (x,)),
        (bf.allgather_nonblocking, (x,)),
        (bf.broadcast_nonblocking, (x, 2)),
        (bf.neighbor_allgather_nonblocking, (x,)),
    ]:
        blocking = getattr(bf, op.__name__.removesuffix("_nonblocking"))
        np.testing.assert_array_equal(bf.synchronize(op(*args)), blocking(*args))
    with pytest.raises(TypeError, match=r"takes a handle from a \*_nonblocking op, got int"):
        bf.synchronize(3)
    assert bf.barrier() is None


def test_collectives_equal_fogsim(world):
    x = stacked(world)
    np.testing.assert_array_equal(bf.allreduce(x), fs.allreduce(x))
    np.testing.assert_allclose(bf.allreduce(x)[3], x.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(bf.allreduce(x, average=False)[0], x.sum(axis=0), rtol=1e-14)
    np.testing.assert_array_equal(bf.allgather(x)[1], x.ravel())
    np.testing.assert_array_equal(bf.broadcast(x, 4), np.broadcast_to(x[4], x.shape))
    bf.set_topology(tu.RingGraph(world, 2))
    np.testing.assert_array_equal(bf.neighbor_allgather(x), np.roll(x, 1, axis=0))
    np.testing.assert_array_equal(bf.neighbor_allgather(x), fs.neighbor_allgather(x))
    with pytest.raises(TypeError, match="enable_topo_check must be a bool"):
        bf.neighbor_allgather(x, enable_topo_check=1)


def test_in_place_ops_numpy(world):
    x = stacked(world)
    before = x.copy()
    out = bf.broadcast_(x, 1)
    assert out is x
    np.testing.assert_array_equal(x, np.broadcast_to(before[1], x.shape))
    y = stacked(world, seed=1)
    mean = y.mean(axis=0)
    assert bf.allreduce_(y) is y
    np.testing.assert_allclose(y, np.broadcast_to(mean, y.shape), rtol=1e-14)
    z = stacked(world, seed=2)
    root = z[5].copy()
    handle = bf.broadcast_nonblocking_(z, 5)
    assert bf.poll(handle)
    assert bf.synchronize(handle) is z
    np.testing.assert_array_equal(z, np.broadcast_to(root, z.shape))
    for op in (bf.broadcast_, bf.broadcast_nonblocking_):
        with pytest.raises(TypeError, match="tensor, so it must be a numpy array or a torch"):
            op([1.0] * world, 0)


def test_torch_tensors(world):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(stacked(world))
    got = bf.neighbor_allreduce(x, 0.5, [{(r - 1) % world: 0.5} for r in range(world)])
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), 0.5 * (x.numpy() + np.roll(x.numpy(), 1, 0)))
    y = torch.from_numpy(stacked(world, seed=3))
    expected = y.numpy().mean(axis=0)
    handle = bf.allreduce_nonblocking_(y)
    assert bf.wait(handle) is y
    np.testing.assert_allclose(y.numpy(), np.broadcast_to(expected, y.shape), rtol=1e-14)


def test_machine_level_under_bluefog_names():
    fs.init(backend="sim", size=8, local_size=2)
    try:
        assert bf.machine_size() == 4
        np.testing.assert_array_equal(bf.machine_rank(), np.arange(8) // 2)
        bf.set_machine_topology(tu.RingGraph(4))
        assert not bf.is_machine_topo_weighted()
        assert set(bf.load_machine_topology().edges) >= {(0, 1), (1, 0)}
        assert bf.in_neighbor_machine_ranks()[2] == [0, 2]  # agent 2 is on machine 1
        x = np.arange(8.0)[:, None]
        means = np.array([0.5, 2.5, 4.5, 6.5])
        W = tu.GetRecvWeights(tu.RingGraph(4), 0)  # uniform: 1/3 each
        assert W[0] == pytest.approx(1 / 3)
        want = np.repeat([(means[3] + means[0] + means[1]) / 3], 2)
        np.testing.assert_allclose(bf.hierarchical_neighbor_allreduce(x)[:2, 0], want)
        sync = bf.synchronize(
            bf.hierarchical_neighbor_allreduce_nonblocking(
                x, self_weight=1, src_machine_weights=[{}] * 8
            )
        )  # integer weight accepted
        np.testing.assert_allclose(sync[:, 0], np.repeat(means, 2))
        np.testing.assert_allclose(
            bf.allreduce(x, is_hierarchical_local=True)[:, 0], np.repeat(means, 2)
        )
        np.testing.assert_allclose(bf.allreduce(x, True, True, "x")[:, 0], np.repeat(means, 2))
    finally:
        fs.shutdown()


# -- aliases and BlueFog's earlier names (the paper's listings and documents use them) ------
def test_positional_weights_as_in_listing_5(world):
    n = world
    x = stacked(n)
    sw = np.full(n, 0.5)
    src = [{(r - 1) % n: 0.5} for r in range(n)]
    dst = [{(r + 1) % n: 1.0} for r in range(n)]
    want = 0.5 * (x + np.roll(x, 1, axis=0))
    np.testing.assert_allclose(bf.neighbor_allreduce(x, sw, src, dst), want, rtol=1e-15)
    handle = bf.neighbor_allreduce_nonblocking(x, sw, src, dst)
    np.testing.assert_allclose(bf.wait(handle), want, rtol=1e-15)


def test_neighbor_weights_and_send_neighbors_are_deprecated_aliases(world):
    n = world
    x = stacked(n)
    src = [{(r - 1) % n: 0.5} for r in range(n)]
    ranks = [[(r + 1) % n] for r in range(n)]
    want = bf.neighbor_allreduce(x, 0.5, src, ranks)
    with pytest.warns(DeprecationWarning, match="neighbor_weights is deprecated.*src_weights"):
        got = bf.neighbor_allreduce(x, 0.5, neighbor_weights=src, dst_weights=ranks)
    np.testing.assert_array_equal(got, want)
    deprecated = "(neighbor_weights|send_neighbors) is deprecated"
    with pytest.warns(DeprecationWarning, match=deprecated) as record:
        got = bf.neighbor_allreduce(
            x, self_weight=0.5, neighbor_weights=src, send_neighbors=ranks, name="x"
        )
    assert {str(w.message).split(":")[1].split()[0] for w in record} == {
        "neighbor_weights",
        "send_neighbors",
    }
    assert all(w.filename == __file__ for w in record)  # the warning points at the caller
    np.testing.assert_array_equal(got, want)
    with pytest.warns(DeprecationWarning, match="send_neighbors is deprecated.*dst_weights"):
        handle = bf.neighbor_allreduce_nonblocking(x, 0.5, src, send_neighbors=ranks)
    np.testing.assert_array_equal(bf.synchronize(handle), want)


def test_deprecated_names_refuse_bad_input(world):
    n = world
    x = stacked(n)
    src = [{(r - 1) % n: 0.5} for r in range(n)]
    with pytest.raises(TypeError, match="pass src_weights or the deprecated neighbor_weights"):
        bf.neighbor_allreduce(x, 0.5, src, neighbor_weights=src)
    with pytest.raises(TypeError, match="pass dst_weights or the deprecated send_neighbors"):
        bf.neighbor_allreduce(x, 0.5, src, [[1]] * n, send_neighbors=[[1]] * n)
    deprecated = "send_neighbors is deprecated"
    with (
        pytest.warns(DeprecationWarning, match=deprecated),
        pytest.raises(TypeError, match="send_neighbors must be a list of ranks"),
    ):
        bf.neighbor_allreduce(x, 0.5, src, send_neighbors={1: 0.5})
    with (
        pytest.warns(DeprecationWarning, match=deprecated),
        pytest.raises(TypeError, match="send_neighbors must hold integer ranks"),
    ):
        bf.neighbor_allreduce(x, 0.5, src, send_neighbors=[0.5, 1])
    with (
        pytest.warns(DeprecationWarning, match=deprecated),
        pytest.raises(TypeError, match="send_neighbors must be a list of ranks"),
    ):
        bf.neighbor_allreduce_nonblocking(x, 0.5, src, send_neighbors=3)


def test_win_sync_names_are_win_update_names(world):
    assert bf.win_sync is bf.win_update
    assert bf.win_sync_then_collect is bf.win_update_then_collect
    n = world
    bf.set_topology(tu.RingGraph(n, 2))
    x = stacked(n)
    bf.win_create(x, "w", zero_init=True)
    bf.win_put(x, "w")
    got = bf.win_sync("w", 0.5, [{(r - 1) % n: 0.5} for r in range(n)])
    assert got is x  # the registered array, updated in place
    want = 0.5 * (stacked(n) + np.roll(stacked(n), 1, axis=0))
    np.testing.assert_allclose(x, want, rtol=1e-15)
    assert bf.win_free("w")
    y = stacked(n, seed=1)
    bf.win_create(y, "v", zero_init=True)
    bf.win_accumulate(y, "v")  # one out-neighbor each, weight 1: the total doubles
    total = y.sum(axis=0) * 2
    assert bf.win_sync_then_collect("v") is y
    np.testing.assert_allclose(y.sum(axis=0), total, rtol=1e-14)
    assert bf.win_free("v")


def test_topology_queries_used_by_the_listings(world):
    n = world
    graph = bf.load_topology()
    assert isinstance(graph, nx.DiGraph)
    assert bf.out_neighbor_ranks()[0] == [1, 2, 4] and bf.in_neighbor_ranks()[0] == [2, 4, 5]
    assert tu.GetDynamicSendRecvRanks is tu.GetDynamicOnePeerSendRecvRanks
    gen = tu.GetDynamicSendRecvRanks(graph, 0)
    assert [next(gen) for _ in range(3)] == [([1], [5]), ([2], [4]), ([4], [2])]
    assert bf.barrier() is None
    assert n == 6


def test_optimizer_names_load_on_first_use():
    code = (
        "import sys; import fogsim.compat.bluefog as bf; assert 'torch' not in sys.modules; "
        "import fogsim.optim as fo; assert bf.CommunicationType is fo.CommunicationType; "
        "assert callable(bf.DistributedWinPutOptimizer); assert 'torch' in sys.modules; "
        "assert 'DistributedWinPutOptimizer' in dir(bf)"
    )
    pytest.importorskip("torch")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    with pytest.raises(AttributeError, match="has no attribute 'DistributedOptimizerX'"):
        bf.DistributedOptimizerX  # noqa: B018


def test_optimizer_self_weights_is_self_weight():
    torch = pytest.importorskip("torch")
    fs.init(backend="sim", size=3)
    from fogsim import optim as fo

    model = fo.replicate(torch.nn.Linear(2, 1))
    opt = bf.DistributedAdaptThenCombineOptimizer(
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        model=model,
        communication_type=bf.CommunicationType.neighbor_allreduce,
    )
    assert opt.self_weights is None
    opt.self_weights = np.full(3, 0.5)  # Listing 4's spelling
    assert opt.self_weight is opt.self_weights
    opt.self_weight = 0.25
    assert opt.self_weights == 0.25
