"""The simulator's device path: tensors combined by torch on their own device.

CPU tensors take the numpy path unless ``use_device_path(True)`` sends them down the path a
CUDA tensor takes; every op here runs both ways on the same values and must agree (1e-12
relative in float64), return a tensor on x's device in x's dtype, and never copy x to the
host. The last test runs the same comparisons on CUDA where there is a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tests import environment

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import faults  # noqa: E402
from fogsim import hierarchy as H  # noqa: E402
from fogsim import optim as fo  # noqa: E402
from fogsim import topology as T  # noqa: E402
from fogsim.backends.sim import _torchops  # noqa: E402

NS = [7, 16]
TOPOLOGIES = ["ring", "exp2", "random"]
LOCAL = {7: 7, 16: 4}  # agents per simulated machine


def random_digraph(n: int, seed: int = 0) -> np.ndarray:
    """A row-stochastic weight matrix on a random directed graph (every row a neighbor)."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, n)) < 0.3
    a[np.arange(n), (np.arange(n) + 1) % n] = True
    np.fill_diagonal(a, True)
    w = np.where(a, rng.random((n, n)) + 0.1, 0.0)
    return w / w.sum(axis=1, keepdims=True)


def topology(name: str, n: int) -> T.Topology:
    if name == "ring":
        return T.ring_graph(n)
    if name == "exp2":
        return T.exponential_two_graph(n)
    return T.as_topology(random_digraph(n))


@pytest.fixture
def world() -> Iterator[Callable[[str, int], T.Topology]]:
    def make(name: str, n: int) -> T.Topology:
        topo = topology(name, n)
        fs.init(backend="sim", size=n, local_size=LOCAL[n])
        fs.set_topology(topo, is_weighted=name == "random")
        fs.set_machine_topology(T.ring_graph)
        return topo

    yield make
    _torchops.use_device_path(False)
    fs.shutdown()


def tol(dtype: Any) -> dict[str, float]:
    if dtype == torch.float64:
        return {"rtol": 1e-12, "atol": 1e-12}
    if dtype == torch.float32:
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 1e-2, "atol": 1e-2}  # half precision: one rounding may land one ulp away


def both(fn: Callable[[Any], Any], x: Any, device: str = "cpu") -> tuple[Any, Any]:
    """Return ``fn`` on the numpy path (x on the CPU) and on the device path (x on device)."""
    _torchops.use_device_path(False)
    ref = fn(x)
    _torchops.use_device_path(True)
    try:
        got = fn(x.to(device))
    finally:
        _torchops.use_device_path(False)
    return ref, got


def assert_same(ref: Any, got: Any, x: Any, device: str = "cpu") -> None:
    if isinstance(ref, list):
        assert isinstance(got, list) and len(got) == len(ref)
        for r, g in zip(ref, got, strict=True):
            assert_same(r, g, x, device)
        return
    assert isinstance(got, torch.Tensor) and got.device.type == device
    assert got.dtype == ref.dtype == x.dtype and got.shape == ref.shape
    assert not got.requires_grad
    torch.testing.assert_close(got.cpu(), ref, **tol(x.dtype))


def check_cases(cases: dict[str, Callable[[Any], Any]], x: Any, device: str = "cpu") -> None:
    """Run each case both ways and compare, naming the case that differs."""
    for case, fn in cases.items():
        ref, got = both(fn, x, device)
        try:
            assert_same(ref, got, x, device)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from None


def neighbor_cases(topo: T.Topology, n: int) -> dict[str, Callable[[Any], Any]]:
    """neighbor_allreduce's forms: static, per-agent self weights, push/pull, matrices."""
    rng = np.random.default_rng(n)
    sw = rng.random(n) * 0.5 + 0.2
    src = [{j: float(rng.random()) for j in topo.in_neighbors(i)} for i in range(n)]
    pattern = random_digraph(n, seed=1) != 0
    np.fill_diagonal(pattern, False)
    pull = np.where(pattern, rng.random((n, n)), 0.0)
    push = np.where(pattern, rng.random((n, n)), 0.0)
    src_pull = [{int(j): float(pull[i, j]) for j in np.flatnonzero(pattern[i])} for i in range(n)]
    dst_push = [
        {int(i): float(push[i, j]) for i in np.flatnonzero(pattern[:, j])} for j in range(n)
    ]
    dense = topo.to_dense()
    per_row = np.where(dense != 0, rng.random((n, n)) + 0.1, 0.0)  # the pattern's own offsets
    per_row /= per_row.sum(axis=1, keepdims=True)
    nar = fs.neighbor_allreduce
    return {
        "static": lambda x: nar(x),
        "self and src weights": lambda x: nar(x, sw, src, check_weights=False),
        "per-agent self weights, topology": lambda x: nar(x, sw, topo, check_weights=False),
        "push and pull": lambda x: nar(x, sw, src_pull, dst_push, check_weights=False),
        "matrix": lambda x: nar(x, src_weights=random_digraph(n, seed=2)),
        "per-row weights": lambda x: nar(x, src_weights=T.as_topology(per_row)),
    }


def collective_cases(n: int) -> dict[str, Callable[[Any], Any]]:
    return {
        "allreduce": lambda x: fs.allreduce(x),
        "allreduce sum": lambda x: fs.allreduce(x, average=False),
        "broadcast": lambda x: fs.broadcast(x, n - 1),
        "allgather": lambda x: fs.allgather(x),
        "global_view": lambda x: fs.global_view(x),
        "neighbor_allgather": lambda x: fs.neighbor_allgather(x),
        "hierarchical_neighbor_allreduce": lambda x: fs.hierarchical_neighbor_allreduce(x),
        "local_allreduce": lambda x: fs.allreduce(x, is_hierarchical_local=True),
    }


def values(n: int, shape: tuple[int, ...], dtype: Any, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, *shape, generator=g, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_neighbor_allreduce_gives_the_numpy_paths_numbers(world, n, name, shape):
    topo = world(name, n)
    check_cases(neighbor_cases(topo, n), values(n, shape, torch.float64))


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_collectives_give_the_numpy_paths_numbers(world, n, name, shape):
    world(name, n)
    check_cases(collective_cases(n), values(n, shape, torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", TOPOLOGIES)
def test_other_dtypes_stay_in_their_dtype(world, dtype, name):
    n = 16
    topo = world(name, n)
    check_cases({**neighbor_cases(topo, n), **collective_cases(n)}, values(n, (5,), dtype))


def test_integers_are_summed_and_moved_but_never_averaged(world):
    world("ring", 7)
    x = torch.arange(14, dtype=torch.int32).reshape(7, 2)
    for fn in (
        lambda v: fs.allreduce(v, average=False),
        lambda v: fs.broadcast(v, 3),
        fs.allgather,
        fs.global_view,
        fs.neighbor_allgather,
    ):
        ref, got = both(fn, x)
        assert got.dtype == ref.dtype == torch.int32
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    _torchops.use_device_path(True)
    for op in (fs.neighbor_allreduce, fs.allreduce):
        with pytest.raises(TypeError, match="averages, so x must be float32 or float64.*int32"):
            op(x)
    with pytest.raises(ValueError, match="6 entries on its leading"):
        fs.neighbor_allreduce(torch.zeros(6, 2, dtype=torch.float64))


def test_ragged_allgather_and_neighbor_allgather_lists(world):
    world("random", 7)
    ragged = [torch.full((r + 1, 2), float(r), dtype=torch.float64) for r in range(7)]
    _torchops.use_device_path(False)
    ref = fs.allgather(ragged)
    _torchops.use_device_path(True)
    got = fs.allgather(ragged)
    assert_same(ref, got, ragged[0])
    x = values(7, (3,), torch.float64)
    ref, got = both(fs.neighbor_allgather, x)  # in-degrees differ: a list per agent
    assert isinstance(ref, list)
    assert_same(ref, got, x)


def test_autograd_is_what_the_numpy_path_gives(world):
    world("exp2", 16)
    x = values(16, (3,), torch.float64).requires_grad_()
    for fn in (fs.neighbor_allreduce, fs.allreduce, fs.global_view):
        ref, got = both(fn, x)
        assert ref.requires_grad is got.requires_grad is False
    (x * 2).sum().backward()  # x's own graph is untouched
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))


def test_x_never_leaves_its_device(world, monkeypatch):
    topo = world("exp2", 16)
    x = values(16, (4,), torch.float64)
    cases = neighbor_cases(topo, 16)  # weights built before the guard
    csr = T.as_topology(random_digraph(16))

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tensor was copied to the host")

    _torchops.use_device_path(True)
    monkeypatch.setattr(torch.Tensor, "cpu", refuse)
    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    for fn in cases.values():
        fn(x)
    fs.neighbor_allreduce(x, src_weights=csr)
    fs.allreduce(x)
    fs.broadcast(x, 15)
    fs.global_view(x)


def test_faults_and_the_cost_model_work_on_the_device_path(world):
    world("exp2", 16)
    x = values(16, (1000,), torch.float64)
    runs = []
    for forced in (False, True):
        _torchops.use_device_path(forced)
        faults.inject(link_drop=0.3, seed=4)
        meter = H.attach_cost_model(H.Network([H.Level(4, 1e-6, 10e9), H.Level(4, 10e-6, 1e9)]))
        y = x
        for _ in range(3):
            y = fs.neighbor_allreduce(y)
            fs.allreduce(y)
            fs.hierarchical_neighbor_allreduce(y)
            fs.broadcast(y, 2)
            meter.mark()
        runs.append((y, meter.iterations, faults.current().dropped))
        H.detach_cost_model()
        faults.clear()
    (ref, ref_time, ref_dropped), (got, got_time, got_dropped) = runs
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    assert got_time == pytest.approx(ref_time, rel=1e-12) and got_dropped == ref_dropped > 0


def test_plans_move_to_the_device_once(world, monkeypatch):
    world("random", 16)
    x = values(16, (3,), torch.float64)
    _torchops.use_device_path(True)
    built = []
    real = _torchops._csr_arrays
    monkeypatch.setattr(_torchops, "_csr_arrays", lambda *a: built.append(1) or real(*a))
    for _ in range(5):
        x = fs.neighbor_allreduce(x)
    assert len(built) == 1


def replicas_trained(forced: bool, device: str = "cpu", steps: int = 3) -> dict[str, Any]:
    """Train stacked replicas on ``device`` with ATC and return their parameters."""
    fs.init(backend="sim", size=8, topology=T.exponential_two_graph)
    _torchops.use_device_path(forced)
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(device)
        model = fo.replicate(net)
        opt = fo.DistributedAdaptThenCombineOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model
        )
        fo.broadcast_parameters(model.state_dict(), root_rank=0)
        gen = torch.Generator().manual_seed
        x = fs.local(lambda r: torch.randn(6, 5, generator=gen(r))).to(device)
        y = fs.local(lambda r: torch.randint(0, 3, (6,), generator=gen(r))).to(device)
        for _ in range(steps):
            opt.zero_grad()
            fo.per_agent(F.cross_entropy)(model(x), y).sum().backward()
            opt.step()
        return {k: v.detach().cpu() for k, v in model.named_parameters()}
    finally:
        _torchops.use_device_path(False)
        fs.shutdown()


def test_stacked_replicas_train_on_the_device_path(monkeypatch):
    combined = []
    real = _torchops.combine
    monkeypatch.setattr(_torchops, "combine", lambda *a: combined.append(1) or real(*a))
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ref = replicas_trained(False)
        assert not combined  # CPU tensors take the numpy path unless told otherwise
        got = replicas_trained(True)
    finally:
        torch.set_default_dtype(default)
    assert len(combined) == 3  # one fused message per step
    assert ref.keys() == got.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-12, atol=1e-12, msg=k)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=environment.needs_hardware("a CUDA GPU"))
def test_cuda_tensors_give_the_numpy_paths_numbers():
    try:
        for n in NS:
            for name in TOPOLOGIES:
                fs.init(backend="sim", size=n, local_size=LOCAL[n])
                topo = topology(name, n)
                fs.set_topology(topo, is_weighted=name == "random")
                fs.set_machine_topology(T.ring_graph)
                cases = {**neighbor_cases(topo, n), **collective_cases(n)}
                for dtype in (torch.float64, torch.float32, torch.bfloat16):
                    check_cases(cases, values(n, (2, 3), dtype), "cuda")
                fs.shutdown()
    finally:
        _torchops.use_device_path(False)
        fs.shutdown()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ref, got = replicas_trained(False), replicas_trained(True, "cuda")
    finally:
        torch.set_default_dtype(default)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-12, atol=1e-12, msg=k)
