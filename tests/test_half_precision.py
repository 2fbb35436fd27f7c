"""Half precision (float16, bfloat16) in the ops: accumulated in float32, rounded once.

Every averaging op must return the input's dtype and type, bit for bit the float32
computation rounded once (``op(x.float()).to(dtype)``), in the simulator and in SPMD.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
import fogsim.spmd as spmd
from fogsim import topology as T

torch = pytest.importorskip("torch")

N, LOCAL = 4, 2


def _ops():
    """(name, op) pairs; each op takes this agent's (or the stacked) x and is mode-neutral."""
    def sw():
        return fs.local(lambda r: 0.25 + 0.125 * r)

    def src():
        return fs.local(lambda r: {(r - 1) % N: 0.5 - 0.125 * r, (r + 1) % N: 0.25})

    def dyn_src():
        return fs.local(lambda r: {(r - 1) % N: 0.375})

    def dyn_dst():
        return fs.local(lambda r: {(r + 1) % N: 1.0})

    return [
        ("allreduce", lambda x: fs.allreduce(x)),
        ("allreduce_sum", lambda x: fs.allreduce(x, average=False)),
        ("allreduce_nonblocking", lambda x: fs.wait(fs.allreduce_nonblocking(x))),
        ("neighbor_allreduce", lambda x: fs.neighbor_allreduce(x)),
        ("neighbor_allreduce_weights",
         lambda x: fs.neighbor_allreduce(x, self_weight=sw(), src_weights=src())),
        ("neighbor_allreduce_dynamic",
         lambda x: fs.neighbor_allreduce(x, self_weight=0.625, src_weights=dyn_src(),
                                         dst_weights=dyn_dst())),
        ("neighbor_allreduce_nonblocking",
         lambda x: fs.wait(fs.neighbor_allreduce_nonblocking(x))),
        ("hierarchical_neighbor_allreduce", lambda x: fs.hierarchical_neighbor_allreduce(x)),
    ]


OPS = _ops()
DTYPES = [("torch", "float16"), ("torch", "bfloat16"), ("numpy", "float16")]


def _value(lib: str, dtype: str, rows: int | None, seed: int = 0):
    """Random data of ``dtype`` (stacked when ``rows``), with values far from round."""
    shape = (5, 3) if rows is None else (rows, 5, 3)
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3.7
    if lib == "numpy":
        return data.astype(np.float16)
    return torch.from_numpy(data).to(getattr(torch, dtype))


def _as_float32(x):
    return x.float() if isinstance(x, torch.Tensor) else x.astype(np.float32)


def _round_like(out, x):
    return out.to(x.dtype) if isinstance(x, torch.Tensor) else out.astype(x.dtype)


def _bits(x) -> np.ndarray:
    """The raw bits of a half-precision array or tensor (bit-for-bit comparison)."""
    if isinstance(x, torch.Tensor):
        return x.view(torch.int16).numpy()
    return x.view(np.int16)


def _check_same(out, x, expect) -> None:
    assert type(out) is type(x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(_bits(out), _bits(expect))


def _setup():
    fs.set_topology(T.ring_graph(N))
    fs.set_machine_topology(T.ring_graph(N // LOCAL))


@pytest.fixture(autouse=True)
def _no_world_left():
    yield
    fs.shutdown()


@pytest.mark.parametrize("lib,dtype", DTYPES)
@pytest.mark.parametrize("name,op", OPS, ids=[n for n, _ in OPS])
def test_sim_half_is_float32_rounded_once(lib, dtype, name, op):
    fs.init(backend="sim", size=N, local_size=LOCAL)
    _setup()
    x = _value(lib, dtype, N)
    out = op(x)
    expect = _round_like(op(_as_float32(x)), x)
    _check_same(out, x, expect)
    # the rounding happened once, from float32: not the half-precision computation
    assert not np.array_equal(_bits(out), _bits(x))


def _agent(lib, dtype, op):
    _setup()
    x = _value(lib, dtype, None, seed=fs.rank())
    return x, op(x), op(_as_float32(x))


@pytest.mark.parametrize("lib,dtype", DTYPES)
def test_spmd_half_matches_simulator(lib, dtype):
    for name, op in OPS:
        results = spmd.run(_agent, lib, dtype, op, size=N, local_size=LOCAL, timeout=60)
        for x, out, full in results:
            _check_same(out, x, _round_like(full, x))
        # and the simulator gives the same bits for the same stacked data
        fs.init(backend="sim", size=N, local_size=LOCAL)
        _setup()
        stacked = (torch.stack if lib == "torch" else np.stack)([r[0] for r in results])
        sim_out = op(stacked)
        fs.shutdown()
        for rank, (_, out, _) in enumerate(results):
            np.testing.assert_array_equal(_bits(out), _bits(sim_out[rank]), err_msg=name)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_integers_move_but_do_not_average(lib):
    fs.init(backend="sim", size=N)
    fs.set_topology(T.ring_graph(N))
    data = np.arange(N * 3, dtype=np.int64).reshape(N, 3)
    x = torch.from_numpy(data) if lib == "torch" else data
    gathered = fs.allgather(x)
    assert type(gathered) is type(x) and gathered.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(gathered)[2], data.reshape(-1))
    root = fs.broadcast(x, root_rank=1)
    np.testing.assert_array_equal(np.asarray(root), np.broadcast_to(data[1], data.shape))
    neighbors = fs.neighbor_allgather(x)
    assert neighbors.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(neighbors)[0],
                                  np.concatenate([data[j] for j in fs.in_neighbor_ranks()[0]]))
    for op in (fs.allreduce, fs.neighbor_allreduce):
        with pytest.raises(TypeError, match=r"averages, so x must be float32 or float64 "
                                            r"\(or half precision: float16, bfloat16\), got int64"):
            op(x)


def test_bfloat16_moves_exactly():
    fs.init(backend="sim", size=N)
    fs.set_topology(T.ring_graph(N))
    x = _value("torch", "bfloat16", N)
    out = fs.broadcast(x, root_rank=2)
    assert out.dtype is torch.bfloat16
    np.testing.assert_array_equal(_bits(out), _bits(x[2].expand_as(x)))
    gathered = fs.allgather(x)
    np.testing.assert_array_equal(_bits(gathered[0]), _bits(x.reshape(-1, 3)))


@pytest.mark.parametrize("lib,dtype", DTYPES)
def test_half_windows_are_refused_clearly(lib, dtype):
    fs.init(backend="sim", size=N)
    x = _value(lib, dtype, N)
    with pytest.raises(TypeError, match="win_create"):
        fs.win_create(x, "w")


@pytest.mark.mpi
def test_mpi_half_is_the_simulators_bit_for_bit():
    from tests import _jobs

    job = _jobs.fogrun(N, "-m", "tests.half_precision_driver",
                       options=("--local-size", str(LOCAL)), timeout=120)  # fmt: skip
    job.check()
    count = len(DTYPES) * len(OPS)
    lines = sorted(line for line in job.stdout.splitlines() if line.strip())
    assert lines == [f"rank {r}: {count} ops agree" for r in range(N)], job.describe()
