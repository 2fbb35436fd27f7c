"""BlueFog 0.3's public names exist in fogsim.compat.bluefog with BlueFog's signatures.

The expected parameter lists are written from BlueFog's source (bluefog/torch/__init__.py,
mpi_ops.py, optimizers.py, utility.py, common/basics.py, common/topology_util.py), not
computed from fogsim.
"""

import inspect

import networkx as nx
import pytest

import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util as tu

E = inspect.Parameter.empty
#: name -> [(parameter, default)] from BlueFog's source.
TORCH = {
    "init": [("topology_fn", None), ("is_weighted", False)],
    "shutdown": [],
    "size": [],
    "local_size": [],
    "rank": [],
    "local_rank": [],
    "load_topology": [],
    "set_topology": [("topology", None), ("is_weighted", False)],
    "in_neighbor_ranks": [],
    "out_neighbor_ranks": [],
    "mpi_threads_supported": [],
    "unified_mpi_window_model_supported": [],
    "nccl_built": [],
    "is_homogeneous": [],
    "set_skip_negotiate_stage": [("value", E)],
    "get_skip_negotiate_stage": [],
    "allreduce": [
        ("tensor", E),
        ("average", True),
        ("is_hierarchical_local", False),
        ("name", None),
    ],
    "allgather": [("tensor", E), ("name", None)],
    "broadcast": [("tensor", E), ("root_rank", E), ("name", None)],
    "broadcast_": [("tensor", E), ("root_rank", E), ("name", None)],
    "poll": [("handle", E)],
    "synchronize": [("handle", E)],
    "wait": [("handle", E)],
    "barrier": [],
    # bluefog.torch re-exports these of topology_util (BlueFog's torch_basics_test imports them)
    "IsTopologyEquivalent": [("topo1", E), ("topo2", E)],
    "InferSourceFromDestinationRanks": [("dst_ranks", E), ("construct_adjacency_matrix", False)],
    "InferDestinationFromSourceRanks": [("src_ranks", E), ("construct_adjacency_matrix", False)],
    "win_create": [("tensor", E), ("name", E), ("zero_init", False)],
    "win_free": [("name", None)],
    "win_wait": [("handle", E)],
    "win_poll": [("handle", E)],
    "win_lock": [("name", E)],
    "get_win_version": [("name", E)],
    "turn_on_win_ops_with_associated_p": [],
    "turn_off_win_ops_with_associated_p": [],
    "timeline_start_activity": [("tensor_name", E), ("activity_name", E)],
    "timeline_end_activity": [("tensor_name", E)],
    "timeline_context": [("tensor_name", E), ("activity_name", E)],
    "allreduce_parameters": [("params", E)],
    "DistributedAllreduceOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedNeighborAllreduceOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedHierarchicalNeighborAllreduceOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedGradientAllreduceOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedPushSumOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedPullGetOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
    ],
    "DistributedWinPutOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("num_steps_per_communication", 1),
        ("window_prefix", None),
    ],
    "DistributedAdaptThenCombineOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("communication_type", "neighbor_allreduce"),
        ("num_steps_per_communication", 1),
    ],
    "DistributedAdaptWithCombineOptimizer": [
        ("optimizer", E),
        ("model", E),
        ("communication_type", "neighbor_allreduce"),
        ("num_steps_per_communication", 1),
    ],
}
NAMES_ONLY = [
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "CommunicationType",
    "win_put",
    "win_get",
    "win_accumulate",
    "win_update",
    "win_update_then_collect",
    "win_mutex",
    "win_associated_p",
    "neighbor_allgather",
    "neighbor_allreduce",
    "hierarchical_neighbor_allreduce",
    "suspend",
    "resume",
]
TOPO = {
    "IsTopologyEquivalent": [("topo1", E), ("topo2", E)],
    "IsRegularGraph": [("topo", E)],
    "GetRecvWeights": [("topo", E), ("rank", E)],
    "GetSendWeights": [("topo", E), ("rank", E)],
    "GetDynamicOnePeerSendRecvRanks": [("topo", E), ("self_rank", E)],
    "GetExp2DynamicSendRecvMachineRanks": [
        ("world_size", E),
        ("local_size", E),
        ("self_rank", E),
        ("local_rank", E),
    ],
    "GetInnerOuterRingDynamicSendRecvRanks": [
        ("world_size", E),
        ("local_size", E),
        ("self_rank", E),
    ],
    "GetInnerOuterExpo2DynamicSendRecvRanks": [
        ("world_size", E),
        ("local_size", E),
        ("self_rank", E),
    ],
    "InferSourceFromDestinationRanks": [("dst_ranks", E), ("construct_adjacency_matrix", False)],
    "InferDestinationFromSourceRanks": [("src_ranks", E), ("construct_adjacency_matrix", False)],
}


def _check(module, name, expected):
    assert hasattr(module, name), name
    assert name in dir(module), name
    assert name in module.__all__, name
    params = list(inspect.signature(getattr(module, name)).parameters.values())
    got = [(p.name, p.default) for p in params]
    assert [g[0] for g in got] == [e[0] for e in expected], name
    for (pname, default), (_, want) in zip(got, expected, strict=True):
        if want is E:
            assert default is E, (name, pname)
        else:
            assert default == want, (name, pname, default, want)


@pytest.mark.parametrize("name", sorted(TORCH))
def test_torch_signature(name):
    if name.startswith("Distributed"):
        pytest.importorskip("torch")
    _check(bf, name, TORCH[name])


@pytest.mark.parametrize("name", NAMES_ONLY)
def test_torch_name_exists(name):
    assert name in dir(bf) and name in bf.__all__
    if name not in ("broadcast_parameters", "broadcast_optimizer_state", "CommunicationType"):
        assert callable(getattr(bf, name))


@pytest.mark.parametrize("name", sorted(TOPO))
def test_topology_util_signature(name):
    _check(tu, name, TOPO[name])


def test_basics_answers():
    assert bf.nccl_built() is False
    assert bf.is_homogeneous() is True
    assert bf.suspend() is None and bf.resume() is None


def test_skip_negotiate_flag():
    before = bf.get_skip_negotiate_stage()
    try:
        bf.set_skip_negotiate_stage(True)
        assert bf.get_skip_negotiate_stage() is True
        bf.set_skip_negotiate_stage(False)
        assert bf.get_skip_negotiate_stage() is False
        with pytest.raises(TypeError, match="value"):
            bf.set_skip_negotiate_stage(1)
    finally:
        bf.set_skip_negotiate_stage(before)


def test_timeline_without_timeline_returns_false():
    assert bf.timeline_start_activity("t", "A") is False
    assert bf.timeline_end_activity("t") is False
    with bf.timeline_context("t", "A"):
        pass


def test_win_lock_unknown_window():
    import fogsim as fs

    fs.init(backend="sim", size=3)
    try:
        with pytest.raises(ValueError, match="nowin"), bf.win_lock("nowin"):
            pass
    finally:
        fs.shutdown()


def test_exp2_machine_schedule():
    # 4 machines of 2: machine 0 sends to +1, +2, +1 ... and receives from -1, -2, ...
    gen = tu.GetExp2DynamicSendRecvMachineRanks(8, 2, 0, 0)
    got = [next(gen) for _ in range(4)]
    assert got == [([1], [3]), ([2], [2]), ([1], [3]), ([2], [2])]


def test_one_peer_schedule_on_exp2_graph():
    g = tu.ExponentialTwoGraph(8)
    gen = tu.GetDynamicOnePeerSendRecvRanks(g, 0)
    assert [next(gen) for _ in range(3)] == [([1], [7]), ([2], [6]), ([4], [4])]


def test_networkx_to_numpy_matrix_shim():
    bf.install(force=True)
    try:
        g = nx.DiGraph([(0, 1)])
        m = nx.to_numpy_matrix(g, nodelist=[0, 1])
        assert m.shape == (2, 2) and m[0, 1] == 1 and m[1, 0] == 0
        assert type(m).__name__ == "matrix"
    finally:
        bf.uninstall()
