"""The public namespace, world lifecycle, contexts, settings and agent-local helpers."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import fogsim as fs
from fogsim import _settings
from fogsim import topology as T

PUBLIC = {
    "Context",
    "Handle",
    "StallError",
    "__version__",
    "topology",
    "spmd",
    "clock",
    "init",
    "shutdown",
    "is_initialized",
    "size",
    "rank",
    "local_size",
    "local_rank",
    "local",
    "vmap",
    "is_main_process",
    "global_view",
    "set_topology",
    "load_topology",
    "is_topology_weighted",
    "in_neighbor_ranks",
    "out_neighbor_ranks",
    "machine_size",
    "machine_rank",
    "set_machine_topology",
    "load_machine_topology",
    "is_machine_topology_weighted",
    "in_neighbor_machine_ranks",
    "out_neighbor_machine_ranks",
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
    "timeline",
    "timeline_start_activity",
    "timeline_end_activity",
    "timeline_context",
    "allreduce",
    "allreduce_nonblocking",
    "allgather",
    "allgather_nonblocking",
    "broadcast",
    "broadcast_nonblocking",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "barrier",
    "barrier_nonblocking",
    "wait",
    "poll",
    "win_create",
    "win_free",
    "win_names",
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
    "set_win_ops_with_associated_p",
    "set_asynchrony",
    "check_modes",
    "ModeReport",
    "AgentShapeWarning",
    "rng",
    "WeightWarning",
    "bytes_sent",
}


@pytest.fixture(autouse=True)
def _clean():
    yield
    fs.shutdown()


def test_public_namespace_is_pinned():
    assert set(fs.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(fs, name), name


@pytest.mark.parametrize("module", [fs, T])
def test_every_public_callable_has_a_docstring(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj):
            assert inspect.getdoc(obj), f"{module.__name__}.{name} has no docstring"


def test_signatures_are_the_contract():
    sig = inspect.signature(fs.neighbor_allreduce)
    assert list(sig.parameters) == [
        "x",
        "self_weight",
        "src_weights",
        "dst_weights",
        "enable_topo_check",
        "name",
        "check_weights",
        "compressor",
    ]
    assert sig.parameters["check_weights"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["compressor"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(inspect.signature(fs.init).parameters) == [
        "backend",
        "size",
        "topology",
        "seed",
        "local_size",
        "shards",
    ]
    assert list(inspect.signature(fs.hierarchical_neighbor_allreduce).parameters) == [
        "x",
        "self_weight",
        "src_machine_weights",
        "dst_machine_weights",
        "enable_topo_check",
        "name",
    ]
    assert list(inspect.signature(fs.allreduce).parameters) == [
        "x",
        "average",
        "name",
        "is_hierarchical_local",
        "algorithm",
        "factors",
    ]
    assert list(inspect.signature(fs.neighbor_allgather).parameters) == [
        "x",
        "src_ranks",
        "dst_ranks",
        "name",
    ]


def test_import_has_no_side_effects():
    code = (
        "import sys, threading, logging; import fogsim; "
        "assert 'mpi4py' not in sys.modules, 'mpi4py imported'; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert threading.active_count() == 1, 'thread started'; "
        "assert not fogsim.is_initialized()"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and run.stderr == ""


def test_init_shutdown_reinit():
    assert not fs.is_initialized()
    ctx = fs.init(size=5, seed=3)
    assert fs.is_initialized() and isinstance(ctx, fs.Context)
    assert fs.size() == 5 and np.array_equal(fs.rank(), np.arange(5))
    assert fs.local_size() == 5 and np.array_equal(fs.local_rank(), np.arange(5))
    assert ctx.seed == 3
    fs.shutdown()
    assert not fs.is_initialized()
    with pytest.raises(RuntimeError, match=r"not initialized: call fogsim.init\(\)"):
        fs.size()
    fs.init(size=3)
    assert fs.size() == 3


def test_default_topology_is_exponential_two():
    fs.init(size=8)
    assert fs.load_topology() == T.exponential_two_graph(8)
    assert not fs.is_topology_weighted()
    assert fs.in_neighbor_ranks()[0] == [4, 6, 7]
    assert fs.out_neighbor_ranks()[0] == [1, 2, 4]


def test_init_takes_a_topology_or_builder():
    fs.init(size=6, topology=T.ring_graph)
    assert fs.load_topology() == T.ring_graph(6)
    fs.init(size=4, topology=np.full((4, 4), 0.25))
    assert fs.load_topology() == T.fully_connected_graph(4)


def test_several_worlds_side_by_side():
    a = fs.Context(size=4, topology=T.ring_graph(4))
    b = fs.Context(size=6, topology=T.ring_graph(6))
    fs.init(size=2)
    with a:
        assert fs.size() == 4
        with b:
            assert fs.size() == 6
        assert fs.size() == 4
    assert fs.size() == 2
    a.close()
    b.close()


def test_a_world_entered_in_one_thread_is_that_threads_alone():
    """``with ctx:`` makes ``ctx`` current for its thread only; the ops of other threads
    (and of this one, once the block ends) keep the world that ``init()`` made."""
    import threading

    fs.init(size=2)
    a = fs.Context(size=4, topology=T.ring_graph(4))
    inside, leave, seen = threading.Event(), threading.Event(), {}

    def agent():
        with a:
            seen["in"] = fs.allreduce(np.arange(4.0), average=False)
            inside.set()
            leave.wait(10)
        seen["after"] = fs.allreduce(np.arange(2.0), average=False)

    thread = threading.Thread(target=agent)
    thread.start()
    assert inside.wait(10)
    mine = fs.neighbor_allreduce(np.array([1.0, 3.0]))  # while the other block is open
    leave.set()
    thread.join(10)
    np.testing.assert_array_equal(seen["in"], np.full(4, 6.0))
    np.testing.assert_array_equal(seen["after"], np.full(2, 1.0))
    np.testing.assert_array_equal(mine, np.full(2, 2.0))
    np.testing.assert_array_equal(fs.allreduce(np.arange(2.0), average=False), np.full(2, 1.0))
    a.close()


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("FOGSIM_SIZE", "7")
    fs.init()
    assert fs.size() == 7
    monkeypatch.setenv("FOGSIM_BACKEND", "SIM")
    fs.init(size=3)
    assert fs.size() == 3
    s = _settings.load({"PMI_SIZE": "4", "PMI_RANK": "2"})
    assert s.launched and s.launcher_rank == 2
    assert not _settings.load({"PMI_SIZE": "1"}).launched
    assert _settings.load({}).backend is None


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"FOGSIM_SIZE": "abc"}, "FOGSIM_SIZE='abc' is not an integer"),
        ({"FOGSIM_SIZE": "0"}, "FOGSIM_SIZE=0 must be >= 1"),
        ({"FOGSIM_BACKEND": "gpu"}, "FOGSIM_BACKEND='gpu' is not one of"),
    ],
)
def test_bad_settings(env, match):
    with pytest.raises(ValueError, match=match):
        _settings.load(env)


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend 'nccl'"):
        fs.init(backend="nccl")


def test_local_stacks_arrays_and_keeps_dicts_as_lists():
    fs.init(size=3)
    assert np.array_equal(fs.local(lambda r: np.full(2, r)), [[0, 0], [1, 1], [2, 2]])
    assert np.array_equal(fs.local(lambda r: r * 0.5), [0.0, 0.5, 1.0])
    assert fs.local(lambda r: {r: 1.0}) == [{0: 1.0}, {1: 1.0}, {2: 1.0}]


def test_vmap_applies_per_agent():
    fs.init(size=4)
    A = fs.local(lambda r: np.eye(2) * (r + 1))
    x = fs.local(lambda r: np.ones(2))
    solve = fs.vmap(np.linalg.solve)
    assert np.allclose(solve(A, x), 1 / (np.arange(4)[:, None] + 1) * np.ones((4, 2)))
    scale = fs.vmap(lambda v, c: v * c, in_axes=(0, None))
    assert np.array_equal(scale(x, 3.0), 3 * np.ones((4, 2)))
    with pytest.raises(ValueError, match="argument 0 has 3 entries on its agent axis, expected 4"):
        solve(A[:3], x[:3])


def test_wait_releases_the_handle():
    fs.init(size=4, topology=T.ring_graph)
    h = fs.neighbor_allreduce_nonblocking(np.ones((4, 2)))
    assert "neighbor_allreduce" in repr(h) and fs.poll(h)
    assert np.array_equal(fs.wait(h), np.ones((4, 2)))
    with pytest.raises(ValueError, match="already waited on"):
        fs.wait(h)
    with pytest.raises(ValueError, match="already waited on"):
        fs.poll(h)
    assert fs.wait(fs.barrier_nonblocking()) is None
