"""The torch.distributed backend: the op tests of dual_cases.py and its own, in gloo workers.

This file is also the driver the workers run (from the repository root, ``python -m
tests.test_torchdist [case ...]`` with ``FOGSIM_BACKEND=torch``): rank 0 prints one JSON
line per case. Two launches cover both ways ranks meet: 2 processes started here with
torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``:
``env://``), and 4 under ``fogrun`` (MPI's rank variables; rank 0 serves the store on a
free port and tells the others over MPI). The window cases are left out: this backend
refuses window ops, which a case here checks. A CUDA job (NCCL) runs when this machine has
two GPUs.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import numpy as np

import fogsim as fs
from fogsim import topology as T
from tests import dual_cases

# Cases that need one-sided window ops, which this backend refuses (case_torch_errors).
WINDOW_CASES = [c for c in dual_cases.CASES if "window" in c or "push_sum" in c]
# 4 x 10**4 blocking steps: the simulator and MPI check the mean's exactness; gloo's step
# latency (about 1 ms here) would make it minutes, and its combine is the shared kernel's.
LONG_CASES = ["case_weight_rules_preserve_the_mean_over_10k_steps"]
SHARED_CASES = [c for c in dual_cases.CASES if c not in WINDOW_CASES + LONG_CASES]


def _same(got, want, exact=True):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if exact:
        assert np.array_equal(got, want), (got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _raises(exc_type, match, fn, *args, **kwargs):
    return dual_cases._raises_everywhere(exc_type, match, fn, *args, **kwargs)


# -- cases run by every rank of a torch job ----------------------------------------------
def case_torch_world():
    import torch.distributed as dist

    ctx = fs.init(topology=T.ring_graph)
    n, r = fs.size(), fs.rank()
    assert ctx.backend.name == "torch" and n == dist.get_world_size() and r == dist.get_rank()
    assert fs.local_size() == n and fs.local_rank() == r  # one host
    assert fs.is_main_process() == (r == 0)
    assert fs.local(lambda k: k * 10) == 10 * r
    assert fs.vmap(np.square)(np.arange(3)).tolist() == [0, 1, 4]
    assert fs.in_neighbor_ranks() == T.ring_graph(n).in_neighbors(r)
    assert fs.out_neighbor_ranks() == T.ring_graph(n).out_neighbors(r)
    assert fs.init(size=n + 1, topology=T.ring_graph).backend.size() == n  # launcher wins
    _raises(TypeError, "size must be an integer", fs.init, size="8")
    fs.shutdown()
    with fs.Context(backend="torch", topology=T.fully_connected_graph) as other:
        emulated = fs.Context(backend="torch", local_size=1)
        assert (emulated.backend.local_size(), emulated.backend.local_rank()) == (1, 0)
        emulated.close()
        x = np.full(2, float(r))
        _same(fs.neighbor_allreduce(x), np.full(2, (n - 1) / 2))  # the world of the block
    other.close()


def case_torch_results_keep_type_and_dtype():
    import torch

    fs.init(topology=T.exponential_two_graph)
    n, r = fs.size(), fs.rank()
    for dtype in (np.float32, np.float64):
        x = np.arange(6, dtype=dtype).reshape(2, 3) + r
        t = torch.from_numpy(x.copy())
        calls = [
            lambda v: fs.allreduce(v),
            lambda v: fs.allreduce(v, average=False),
            lambda v: fs.broadcast(v, n - 1),
            lambda v: fs.allgather(v),
            lambda v: fs.neighbor_allreduce(v),
            lambda v: fs.neighbor_allgather(v),
            lambda v: fs.wait(fs.allreduce_nonblocking(v)),
            lambda v: fs.wait(fs.broadcast_nonblocking(v, 0)),
            lambda v: fs.wait(fs.allgather_nonblocking(v)),
            lambda v: fs.wait(fs.neighbor_allreduce_nonblocking(v)),
            lambda v: fs.wait(fs.neighbor_allgather_nonblocking(v)),
            lambda v: fs.global_view(v),
        ]
        for call in calls:
            a, b = call(x), call(t)
            assert isinstance(a, np.ndarray) and a.dtype == dtype
            assert isinstance(b, torch.Tensor) and b.dtype == t.dtype
            _same(b.numpy(), a)
    for dtype in (np.int8, np.int32, np.int64, np.uint8, np.bool_):
        x = (np.arange(4) + r).astype(dtype)
        if dtype is not np.bool_:  # booleans move but do not sum (in every mode)
            assert fs.allreduce(x, average=False).dtype == dtype
        assert fs.broadcast(x, 0).dtype == dtype and fs.allgather(x).dtype == dtype
        assert fs.neighbor_allgather(x).dtype == dtype
    for dtype in (np.int16, np.uint16, np.float16):  # moved as bytes
        x = (np.arange(3) + r).astype(dtype)
        _same(fs.broadcast(x, n - 1), (np.arange(3) + n - 1).astype(dtype))
        _same(fs.allgather(x), np.concatenate([(np.arange(3) + k).astype(dtype) for k in range(n)]))
    _same(fs.allreduce(2.0), np.asarray(2.0))  # a Python scalar comes back 0-d numpy
    _same(fs.allgather(float(r)), np.arange(n, dtype=np.float64))
    strided = np.arange(12.0).reshape(3, 4)[:, ::2] + r  # not contiguous: copied
    _same(fs.allreduce(strided), np.arange(12.0).reshape(3, 4)[:, ::2] + (n - 1) / 2)
    ro = np.ones(3)
    ro.flags.writeable = False
    _same(fs.neighbor_allreduce(ro), np.ones(3))
    fs.shutdown()


def case_torch_neighbor_allreduce_matrices_and_unchecked_calls():
    fs.init(topology=T.ring_graph)
    n, r = fs.size(), fs.rank()
    rng = np.random.default_rng(3)
    data = rng.standard_normal((n, 3))
    W = T.exponential_two_graph(n).uniform()
    got = fs.neighbor_allreduce(data[r], src_weights=W)
    sim = dual_cases._sim_reference(n, T.ring_graph(n), data, src_weights=W)
    _same(got, sim[r])
    D = T.exponential_two_graph(n).to_dense() * 2.0  # dst matrix: W_ij * D_ij on edges
    got = fs.neighbor_allreduce(data[r], self_weight=0.5, src_weights=W, dst_weights=D)
    sim = dual_cases._sim_reference(
        n, T.ring_graph(n), data, self_weight=np.full(n, 0.5), src_weights=W, dst_weights=D
    )
    _same(got, sim[r])
    h = fs.neighbor_allreduce_nonblocking(data[r], src_weights=W)
    while not fs.poll(h):
        time.sleep(0.001)
    _same(fs.wait(h), fs.neighbor_allreduce(data[r], src_weights=W))
    # dynamic dicts: checked (weights exchanged, the simulator's bits) and unchecked (the
    # sender scales what it sends: same up to rounding)
    src = {(r - 1) % n: 0.3} if n > 1 else {}
    dst = {(r + 1) % n: 0.5} if n > 1 else {}
    checked = fs.neighbor_allreduce(data[r], self_weight=0.7, src_weights=src, dst_weights=dst)
    unchecked = fs.neighbor_allreduce(
        data[r], self_weight=0.7, src_weights=src, dst_weights=dst, enable_topo_check=False
    )
    want = 0.7 * data[r] + (0.15 * data[(r - 1) % n] if n > 1 else 0)
    _same(checked, want, exact=False)
    _same(unchecked, want, exact=False)
    h = fs.neighbor_allreduce_nonblocking(
        data[r], self_weight=0.7, src_weights=src, dst_weights=dst
    )
    _same(fs.wait(h), checked)
    # static weights on a subset of the in-neighbors, blocking and queued
    sub = {(r - 1) % n: 0.25} if n > 1 else {}
    blocking = fs.neighbor_allreduce(data[r], self_weight=0.75, src_weights=sub)
    queued = fs.neighbor_allreduce_nonblocking(data[r], self_weight=0.75, src_weights=sub)
    _same(fs.wait(queued), blocking)
    fs.shutdown()


def case_torch_fused_queue_mixes_numpy_and_tensors():
    import torch

    fs.init(topology=T.exponential_two_graph)
    r = fs.rank()
    values = [
        np.arange(5.0) + r,
        torch.arange(3, dtype=torch.float32) * (r + 1),
        np.float32(r),
        torch.ones((2, 2), dtype=torch.float64) * r,
    ]
    handles = [fs.neighbor_allreduce_nonblocking(v) for v in values]
    for v, h in zip(values, handles, strict=True):
        got = fs.wait(h)
        want = fs.neighbor_allreduce(v)
        assert type(got) is type(want)
        _same(np.asarray(got), np.asarray(want))
    fs.shutdown()


def case_torch_neighbor_allgather_first_dimension_may_differ():
    fs.init(topology=T.exponential_two_graph)
    n, r = fs.size(), fs.rank()
    topo = T.exponential_two_graph(n)
    x = np.full((r + 1, 2), float(r))
    want = [np.full((j + 1, 2), float(j)) for j in topo.in_neighbors(r)]
    _same(fs.neighbor_allgather(x), np.concatenate(want) if want else np.empty((0, 2)))
    empty = np.empty((0, 3)) if r == 0 else np.ones((1, 3))
    got = fs.neighbor_allgather(empty)
    assert got.shape == (sum(j != 0 for j in topo.in_neighbors(r)), 3)
    fs.shutdown()


def case_torch_errors_raise_on_every_rank():
    fs.init(topology=T.ring_graph)
    n, r = fs.size(), fs.rank()
    _raises(TypeError, "x must be float32 or float64", fs.neighbor_allreduce, np.arange(3))
    _raises(
        TypeError,
        "torch.distributed cannot sum dtype int16",
        fs.allreduce,
        np.arange(3, dtype=np.int16),
        average=False,
    )
    _raises(ValueError, f"root_rank={n} is out of range", fs.broadcast, np.ones(2), n)
    if n > 1:
        odd = np.ones(3, dtype=np.float32 if r == 1 else np.float64)
        _raises(
            ValueError,
            "ranks disagree: rank 0 has float64 (3,) in neighbor_allreduce",
            fs.neighbor_allreduce,
            odd,
        )
        _raises(
            ValueError,
            "ranks disagree: rank 0 has float64 (2,) in allgather",
            fs.allgather,
            np.ones((1, 2 + (r == 1))),
        )
        bad = {(r - 1) % n: float("nan")} if r == 0 else {(r - 1) % n: 0.5}
        nan = f"src_weights[{n - 1}] is nan; weights must be finite"  # rank 0's weight
        _raises(
            ValueError, nan, fs.neighbor_allreduce, np.ones(2), self_weight=0.5, src_weights=bad
        )
        queued = [
            fs.neighbor_allreduce_nonblocking(np.ones(2), self_weight=0.5, src_weights=bad),
            fs.neighbor_allreduce_nonblocking(np.ones(2)),
        ]
        for h in queued:  # the batch is refused as a whole, on every rank
            _raises(ValueError, nan, fs.wait, h)
        half = ((r + 1) % n,) if r else None  # rank 0 passes src_ranks without dst_ranks
        _raises(
            ValueError,
            "both src_ranks and dst_ranks",
            fs.neighbor_allgather,
            np.ones(2),
            src_ranks=[(r + 1) % n],
            dst_ranks=half,
        )
        if n > 2:
            _raises(
                ValueError,
                "topology check failed",
                fs.neighbor_allgather,
                np.ones(2),
                src_ranks=[(r + 1) % n],
                dst_ranks=[(r + 1) % n],
            )
        mine = T.ring_graph(n) if r else T.star_graph(n)
        if n > 2:
            _raises(
                ValueError, "ranks disagree: rank 0 has a different topology", fs.set_topology, mine
            )
    _raises(
        TypeError,
        "enable_topo_check must be a bool",
        fs.neighbor_allreduce,
        np.ones(2),
        enable_topo_check=1,
    )
    for op, args in [
        (fs.win_create, (np.ones(2), "w")),
        (fs.win_update, ("w",)),
        (fs.win_put, (np.ones(2), "w")),
    ]:
        _raises(ValueError, "the torch backend has no window ops", op, *args)
    dual_cases._same(fs.neighbor_allreduce(np.ones(3)), np.ones(3))  # still usable
    fs.shutdown()


def case_torch_machine_level_errors_found_on_local_ranks_0_raise_everywhere():
    """Errors only the machines' world sees reach every rank, named by machine (k > 1)."""
    n = fs.init().backend.size_int
    fs.shutdown()
    for k in dual_cases._divisors(n):
        m = n // k
        fs.init(local_size=k)
        mr = fs.machine_rank()
        x = np.full(3, float(fs.rank()))
        too_big = np.eye(m + 1)
        _raises(
            ValueError,
            f"src_machine_weights has {m + 1} machines but the world has {m}",
            fs.hierarchical_neighbor_allreduce,
            x,
            src_machine_weights=too_big,
        )
        for check in (True, False):  # unchecked: local ranks 0 raise, and tell their machine
            message = _raises(
                ValueError,
                f"machine {m} is out of range for {m} machines",
                fs.hierarchical_neighbor_allreduce,
                x,
                self_weight=0.5,
                src_machine_weights={m: 0.5},
                dst_machine_weights={m: 1.0},
                enable_topo_check=check,
            )
            assert "rank" not in message, message
        _raises(
            TypeError,
            "machine True is not an integer",
            fs.hierarchical_neighbor_allreduce,
            x,
            self_weight=0.5,
            src_machine_weights={True: 0.5},
        )
        ranks = np.repeat(np.arange(float(n))[:, None], 3, axis=1)
        W = T.exponential_two_graph(m).uniform().to_dense()
        ref = dual_cases._machine_reference(ranks, k, W)
        _same(fs.hierarchical_neighbor_allreduce(x), ref[fs.rank()], exact=False)  # usable
        if m > 1:  # machine lists as src_machine_weights, as the simulator takes them
            data = np.random.default_rng(k).standard_normal((n, 2))
            got = fs.hierarchical_neighbor_allreduce(
                data[fs.rank()], self_weight=0.5, src_machine_weights=[(mr - 1) % m]
            )
            lists = [[(r // k - 1) % m] for r in range(n)]
            sim = dual_cases._sim_machine_reference(
                n,
                k,
                data,
                lambda d, s=lists: fs.hierarchical_neighbor_allreduce(
                    d, self_weight=np.full(n, 0.5), src_machine_weights=s
                ),
            )
            _same(got, sim[fs.rank()])
        fs.shutdown()


def case_torch_machine_level_values_keep_type_and_edge_shapes():
    import torch
    import torch.distributed.distributed_c10d as c10d

    n = fs.init().backend.size_int
    fs.shutdown()
    groups = len(c10d._world.pg_map)
    for k in dual_cases._divisors(n):
        fs.init(local_size=k)
        r, m = fs.rank(), n // k
        calls = [
            fs.hierarchical_neighbor_allreduce,
            lambda v: fs.allreduce(v, is_hierarchical_local=True),
            lambda v: fs.allreduce(v, algorithm="decomposed"),
            lambda v, f=(k, m): fs.allreduce(v, average=False, factors=f),
        ]
        for dtype in (np.float32, np.float64):
            x = (np.arange(6, dtype=dtype).reshape(2, 3) + r) / 3
            for call in calls:
                a, b = call(x), call(torch.from_numpy(x.copy()))
                assert isinstance(a, np.ndarray) and a.dtype == dtype and a.shape == x.shape
                assert isinstance(b, torch.Tensor) and b.dtype == torch.from_numpy(x).dtype
                _same(b.numpy(), a)
        for x in (float(r), np.float32(r), np.empty((0, 2)), np.arange(3.0) + r):
            for call in calls:  # pieces of a 0-d value or fewer elements than ranks: empty
                got = call(x)
                assert np.shape(got) == np.shape(x), (np.shape(got), np.shape(x))
        ones = np.ones(1)
        _same(fs.allreduce(ones, average=False, factors=(1, n, 1)), np.full(1, float(n)))
        fs.shutdown()
    assert len(c10d._world.pg_map) == groups  # the machines' groups are destroyed


def case_torch_combine_of_cuda_tensors_has_combine_rows_bits():
    """The torch combine CUDA tensors go through, run on CPU tensors: combine_rows' bits."""
    import torch

    from fogsim import _core
    from fogsim.backends._runtime.plan import RankPlan
    from fogsim.backends.torchdist._neighbor import _combine_cuda
    from fogsim.backends.torchdist._values import Value

    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((3, 5)).astype(dtype)
        recv = rng.standard_normal((4, 3, 5)).astype(dtype)
        weights = rng.random(3)
        plan = RankPlan(0.3, np.array([1, 2, 3]), weights)
        value = Value(torch.from_numpy(x), None, "cuda", x.dtype)  # as if on a GPU
        for select in (None, np.array([0, 2, 3])):
            want = _core.combine_rows(np.empty_like(x), 0.3, x, weights, recv, 0, select)
            got = _combine_cuda(value, plan, torch.from_numpy(recv), weights, select)
            _same(got.numpy(), want)


def case_cuda_ops_match_the_simulator():
    import torch

    fs.init(topology=T.exponential_two_graph)
    n, r = fs.size(), fs.rank()
    data = np.random.default_rng(7).standard_normal((n, 4))
    for dtype in (np.float32, np.float64):
        d = data.astype(dtype)
        x = torch.from_numpy(d[r].copy()).cuda()
        got = fs.neighbor_allreduce(x)
        assert got.is_cuda and got.dtype == x.dtype
        sim = dual_cases._sim_reference(n, T.exponential_two_graph(n), d)
        _same(got.cpu().numpy(), sim[r])
        h = fs.neighbor_allreduce_nonblocking(x)
        _same(fs.wait(h).cpu().numpy(), sim[r])
        W = T.ring_graph(n).uniform()
        sim = dual_cases._sim_reference(n, T.exponential_two_graph(n), d, src_weights=W)
        _same(fs.neighbor_allreduce(x, src_weights=W).cpu().numpy(), sim[r])
        for call in (
            fs.allreduce,
            fs.allgather,
            lambda v: fs.broadcast(v, 0),
            fs.neighbor_allgather,
            fs.global_view,
        ):
            got = call(x)
            assert got.is_cuda and got.dtype == x.dtype
            _same(got.cpu().numpy(), np.asarray(call(d[r])))
    mixed = torch.ones(2, dtype=torch.float64, device="cuda" if r else "cpu")
    _raises(ValueError, "ranks disagree", fs.neighbor_allreduce, mixed)
    fs.shutdown()


def case_cuda_machine_level_ops_match_the_simulator():
    import torch

    n = fs.init().backend.size_int
    fs.shutdown()
    data = np.random.default_rng(8).standard_normal((n, 5))
    for k in dual_cases._divisors(n):
        fs.init(local_size=k)
        r = fs.rank()
        calls = [
            fs.hierarchical_neighbor_allreduce,
            lambda v: fs.allreduce(v, is_hierarchical_local=True),
            lambda v: fs.allreduce(v, algorithm="decomposed"),
        ]
        for dtype in (np.float32, np.float64):
            d = data.astype(dtype)
            for call in calls:
                got = call(torch.from_numpy(d[r].copy()).cuda())
                assert got.is_cuda and got.dtype == torch.from_numpy(d).dtype
                sim = dual_cases._sim_machine_reference(n, k, d, call)
                _same(got.cpu().numpy(), sim[r])
        fs.shutdown()


TORCH_CASES = sorted(name for name in dir() if name.startswith("case_torch_"))
CUDA_CASES = sorted(name for name in dir() if name.startswith("case_cuda_"))


def main(names: list[str]) -> None:
    """Run ``names`` (default: the shared and torch cases) on this rank; rank 0 reports."""
    import torch.distributed as dist

    with fs.Context() as world:  # the cases must test the torch runtime
        assert world.backend.name == "torch", f"the torch driver runs on {world.backend.name}"
    world.close()
    for name in names or SHARED_CASES + TORCH_CASES:
        case = getattr(dual_cases, name, None) or globals()[name]
        start = time.perf_counter()
        try:
            case()
            outcome = None
        except Exception:  # noqa: BLE001 - reported per case, per rank
            outcome = traceback.format_exc(limit=8)
            fs.shutdown()
        outcomes: list = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, outcome)
        if dist.get_rank() == 0:
            failed = {r: o for r, o in enumerate(outcomes) if o is not None}
            seconds = round(time.perf_counter() - start, 3)
            print(json.dumps({"case": name, "failed": failed, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)


# -- pytest side -------------------------------------------------------------------------
import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'fogsim[torch]')")
dist = torch.distributed
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch has no torch.distributed with gloo", allow_module_level=True)

from tests import _jobs  # noqa: E402
from tests.torchdist_jobs import (  # noqa: E402
    _free_port,
    _run_alone,
    _run_fogrun,
    _run_torchrun_style,
)

# world size -> how its processes start (each way the ranks can meet is used once)
LAUNCHES = {1: _run_alone, 2: _run_torchrun_style, 4: _run_fogrun}


@pytest.fixture(scope="session")
def torch_job():
    cache: dict[int, _jobs.Job] = {}

    def get(n: int) -> _jobs.Job:
        if n not in cache:
            cache[n] = LAUNCHES[n](n, SHARED_CASES + TORCH_CASES)
        return cache[n]

    return get


@pytest.mark.parametrize("n", sorted(LAUNCHES))
@pytest.mark.parametrize("case", SHARED_CASES + TORCH_CASES)
def test_gloo(case, n, torch_job):
    torch_job(n).case(case)


def test_fogrun_with_a_given_port_meets_over_tcp():
    cases = ["case_collectives", "case_torch_world"]
    job = _run_fogrun(2, cases, FOGSIM_TORCH_PORT=str(_free_port()))
    for case in cases:
        job.case(case)


def test_window_cases_are_the_ones_left_out():
    left_out = set(WINDOW_CASES) | set(LONG_CASES)
    assert WINDOW_CASES and left_out | set(SHARED_CASES) == set(dual_cases.CASES)
    assert not set(WINDOW_CASES) & set(TORCH_CASES)  # case_torch_errors checks the refusal


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason=_jobs.environment.needs_hardware(
        "CUDA with 2 GPUs (NCCL wants one GPU per rank); "
        f"torch {torch.__version__} sees {torch.cuda.device_count()}"
    ),
)
def test_cuda_over_nccl():
    if not dist.is_nccl_available():
        pytest.fail("this torch sees 2 GPUs but has no NCCL")
    job = _run_torchrun_style(2, CUDA_CASES)
    for case in CUDA_CASES:
        job.case(case)
