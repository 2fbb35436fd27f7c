"""Half precision (float16, bfloat16) in the ops: accumulated in float32, rounded once.

Every averaging op must return the input's dtype and type, bit for bit the float32
computation rounded once (``op(x.float()).to(dtype)``), in the simulator and in SPMD.
Windows too: their buffers hold float32 (what put, accumulate and get move), and
``win_update`` rounds its float32 result once into the registered half-precision value,
checked against a window model written here from the documented semantics.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
import fogsim.compat.bluefog as bf
import fogsim.spmd as spmd
from fogsim import _context
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
        (
            "neighbor_allreduce_weights",
            lambda x: fs.neighbor_allreduce(x, self_weight=sw(), src_weights=src()),
        ),
        (
            "neighbor_allreduce_dynamic",
            lambda x: fs.neighbor_allreduce(
                x, self_weight=0.625, src_weights=dyn_src(), dst_weights=dyn_dst()
            ),
        ),
        ("neighbor_allreduce_nonblocking", lambda x: fs.wait(fs.neighbor_allreduce_nonblocking(x))),
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
    np.testing.assert_array_equal(
        np.asarray(neighbors)[0], np.concatenate([data[j] for j in fs.in_neighbor_ranks()[0]])
    )
    for op in (fs.allreduce, fs.neighbor_allreduce):
        with pytest.raises(
            TypeError,
            match=r"averages, so x must be float32 or float64 "
            r"\(or half precision: float16, bfloat16\), got int64",
        ):
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


# -- windows ----------------------------------------------------------------------------------
# A ring of N agents with dyadic weights (multiples of 1/4). The exact data (multiples of
# 1/64 below 4) keeps every float32 product and sum exact, so the float32 reference does not
# depend on how an implementation orders or widens its float32 sums, while the results need
# more bits than a half-precision value has: each one is rounded, and must be rounded once.


def _left(r):
    return (r - 1) % N


def _right(r):
    return (r + 1) % N


#: agent r's weights in each step of _window_steps: self weights, and {rank: weight} dicts
WEIGHTS = {
    "put_self": lambda r: 0.75 + 0.5 * (r % 2),
    "put_dst": lambda r: {_right(r): 0.75 + 0.25 * r},
    "accumulate_dst": lambda r: {_left(r): 1.25},
    "update_self": lambda r: 0.5,
    "update_src": lambda r: {_left(r): 0.75, _right(r): 0.25},
    "get_src": lambda r: {_left(r): 0.5},
    "accumulate2_dst": lambda r: {_left(r): 0.5, _right(r): 0.25},
    "clone_self": lambda r: 0.25,
    "clone_src": lambda r: {_left(r): 1.0, _right(r): 0.5},
}
#: the topology's weights, which win_update without weights uses
_W = 0.5 * np.eye(N) + 0.25 * (np.roll(np.eye(N), 1, axis=1) + np.roll(np.eye(N), -1, axis=1))
STEPS = ("put", "update", "update_is_x", "clone", "x_after_clone", "default_update", "collect")


def _window_setup():
    fs.set_topology(_W, is_weighted=True)


def _exact_value(lib: str, dtype: str, seed: int = 0):
    """Stacked values k/64, |k| < 256: exact in float16 and bfloat16 (8 significant bits)."""
    k = np.random.default_rng(100 + seed).integers(-255, 256, (N, 5, 3))
    data = (k / 64).astype(np.float32)
    if lib == "numpy":
        return data.astype(np.float16)
    return torch.from_numpy(data).to(getattr(torch, dtype))


def _copy(x):
    return x.clone() if isinstance(x, torch.Tensor) else x.copy()


def _window_steps(x, name: str = "hw") -> dict:
    """Run every window op on ``x`` (this agent's, or stacked); return what each step left.

    Written once for every mode: per-agent weights come from ``fs.local``, and a barrier
    after each op lets the MPI runtime's writes land before they are read.
    """

    def weights(step):
        return fs.local(WEIGHTS[step])

    fs.win_create(x, name)
    fs.win_put(x, name, self_weight=weights("put_self"), dst_weights=weights("put_dst"))
    fs.barrier()
    got = {"put": _bits(x).copy()}
    fs.win_accumulate(x, name, dst_weights=weights("accumulate_dst"))
    fs.barrier()
    out = fs.win_update(
        name, self_weight=weights("update_self"), neighbor_weights=weights("update_src"), reset=True
    )
    got["update"], got["update_is_x"] = _bits(out).copy(), out is x
    fs.barrier()
    fs.win_get(name, src_weights=weights("get_src"))
    fs.barrier()
    fs.win_accumulate(x, name, dst_weights=weights("accumulate2_dst"))
    fs.barrier()
    clone = bf.win_update(
        name, self_weight=weights("clone_self"), neighbor_weights=weights("clone_src"), clone=True
    )
    assert type(clone) is type(x) and clone.dtype == x.dtype and clone is not x
    got["clone"], got["x_after_clone"] = _bits(clone).copy(), _bits(x).copy()
    fs.win_update(name)
    got["default_update"] = _bits(x).copy()
    fs.barrier()
    got["collect"] = _bits(fs.win_update_then_collect(name)).copy()
    fs.win_free(name)
    return got


def _rounder(lib: str, dtype: str):
    """float32 -> the half dtype -> float32: one rounding, to nearest, ties to even."""
    if lib == "numpy":
        return lambda v: v.astype(np.float16).astype(np.float32)
    return lambda v: torch.from_numpy(v).to(getattr(torch, dtype)).float().numpy()


def _window_reference(x0: np.ndarray, rnd, hold=lambda v: v) -> dict[str, np.ndarray]:
    """What :func:`_window_steps` must leave, from the documented semantics, in float32.

    ``buf[i, j]``: agent i's buffer for in-neighbor j; ``x[i]`` the registered values. Each
    result written into ``x`` is rounded once (``rnd``); ``hold`` is applied to every value
    a buffer stores (identity: float32 buffers).
    """
    f32 = np.float32
    x = [x0[i].astype(f32) for i in range(N)]
    # win_create fills each of agent i's buffers with a copy of its own x (BlueFog's)
    buf = {(i, j): hold(x[i].copy()) for i in range(N) for j in (_left(i), _right(i))}

    def combine(i, sw, weights):  # self first, then the in-neighbors in ascending rank order
        acc = f32(sw) * x[i]
        for j in sorted(weights):
            acc = acc + f32(weights[j]) * buf[i, j]
        return rnd(acc)

    def pairs(step):  # (rank named, agent r naming it, weight) of every agent's dict
        return [(j, r, f32(w)) for r in range(N) for j, w in WEIGHTS[step](r).items()]

    snaps = {}
    for j, r, w in pairs("put_dst"):  # put to j, then scale x in place
        buf[j, r] = hold(w * x[r])
    x = [rnd(f32(WEIGHTS["put_self"](r)) * x[r]) for r in range(N)]
    snaps["put"] = np.stack(x)
    for j, r, w in pairs("accumulate_dst"):
        buf[j, r] = hold(buf[j, r] + w * x[r])
    x = [combine(i, WEIGHTS["update_self"](i), WEIGHTS["update_src"](i)) for i in range(N)]
    buf = {key: np.zeros_like(v) for key, v in buf.items()}  # reset: every buffer was read
    snaps["update"] = np.stack(x)
    for j, i, w in pairs("get_src"):  # agent i fetches from j
        buf[i, j] = hold(w * x[j])
    for j, r, w in pairs("accumulate2_dst"):
        buf[j, r] = hold(buf[j, r] + w * x[r])
    clone = [combine(i, WEIGHTS["clone_self"](i), WEIGHTS["clone_src"](i)) for i in range(N)]
    snaps["clone"] = np.stack(clone)
    snaps["x_after_clone"] = np.stack(x)
    default = {i: {j: _W[i, j] for j in (_left(i), _right(i))} for i in range(N)}
    x = [combine(i, _W[i, i], default[i]) for i in range(N)]
    snaps["default_update"] = np.stack(x)
    x = [combine(i, 1.0, {j: 1.0 for j in default[i]}) for i in range(N)]
    snaps["collect"] = np.stack(x)
    return snaps


def _as_bits(values: np.ndarray, like) -> np.ndarray:
    """The bits of float32 ``values`` (already rounded) in the dtype of ``like``."""
    if isinstance(like, torch.Tensor):
        return _bits(torch.from_numpy(values).to(like.dtype))
    return _bits(values.astype(like.dtype))


def _check_window_steps(got: dict, expect: dict, like, rows=slice(None), where="") -> None:
    for step in STEPS:
        if step == "update_is_x":
            assert got[step] is True, f"{where}win_update did not return the registered x"
            continue
        np.testing.assert_array_equal(
            got[step], _as_bits(expect[step], like)[rows], err_msg=f"{where}{step}"
        )


@pytest.mark.parametrize("lib,dtype", DTYPES)
def test_sim_half_windows_are_float32_rounded_once(lib, dtype):
    fs.init(backend="sim", size=N)
    _window_setup()
    x = _exact_value(lib, dtype)
    x0 = np.asarray(_as_float32(x))  # a copy: the window ops change x
    got = _window_steps(x)
    rnd = _rounder(lib, dtype)
    expect = _window_reference(x0, rnd)
    _check_window_steps(got, expect, x)
    # the test tells float32 buffers from half-precision ones, and rounding once from not at all
    held_in_half = _window_reference(x0, rnd, hold=rnd)
    assert any(not np.array_equal(expect[s], held_in_half[s]) for s in STEPS[3:])
    unrounded = _window_reference(x0, lambda v: v)
    assert all(not np.array_equal(expect[s], unrounded[s]) for s in ("update", "clone", "collect"))


@pytest.mark.parametrize("lib,dtype", DTYPES)
def test_sim_half_window_buffers_hold_float32(lib, dtype):
    fs.init(backend="sim", size=N)
    _window_setup()
    x = _exact_value(lib, dtype)
    x0 = np.asarray(_as_float32(x))  # a copy: the window ops change x
    fs.win_create(x, "w", zero_init=True)
    weight = 0.3  # not dyadic: w * x needs more bits than half precision holds
    fs.win_accumulate(x, "w", dst_weights=fs.local(lambda r: {_right(r): weight}))
    win = _context.current().backend.window("w")
    assert win.buffers.dtype == np.float32
    recv, send = win.edges
    for k in range(recv.size):
        expect = np.float32(weight) * x0[send[k]] if recv[k] == _right(send[k]) else 0
        np.testing.assert_array_equal(win.buffers[k], expect)
    # and win_update with weight 1 on the accumulated buffer rounds that float32 value once
    out = fs.win_update(
        "w",
        self_weight=fs.local(lambda r: 0.0),
        neighbor_weights=fs.local(lambda r: {_left(r): 1.0}),
    )
    shifted = np.float32(weight) * np.roll(x0, 1, axis=0)
    np.testing.assert_array_equal(_bits(out), _as_bits(_rounder(lib, dtype)(shifted), x))


def _window_agent(lib, dtype):
    _window_setup()
    r = fs.rank()
    exact = _window_steps(_copy(_exact_value(lib, dtype)[r]), "exact")
    noisy = _window_steps(_copy(_value(lib, dtype, N)[r]), "noisy")
    return exact, noisy


@pytest.mark.parametrize("lib,dtype", DTYPES)
def test_spmd_half_windows_match_simulator_and_reference(lib, dtype):
    results = spmd.run(_window_agent, lib, dtype, size=N, timeout=60)
    like = _exact_value(lib, dtype)
    expect = _window_reference(np.asarray(_as_float32(like)), _rounder(lib, dtype))
    fs.init(backend="sim", size=N)
    _window_setup()
    sim_noisy = _window_steps(_value(lib, dtype, N), "noisy")
    for r, (exact, noisy) in enumerate(results):
        _check_window_steps(exact, expect, like, r, where=f"agent {r}: ")
        for step in STEPS:
            if step != "update_is_x":
                np.testing.assert_array_equal(
                    noisy[step], sim_noisy[step][r], err_msg=f"agent {r}: {step}"
                )


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_windows_are_refused(lib, dtype):
    message = rf"win_create: windows average, so x must be float32 or float64, got {dtype}"
    data = np.zeros((N, 3), dtype=dtype)
    fs.init(backend="sim", size=N)
    with pytest.raises(TypeError, match=message):
        fs.win_create(torch.from_numpy(data) if lib == "torch" else data, "w")
    fs.shutdown()

    def agent():
        x = data[fs.rank()].copy()
        fs.win_create(torch.from_numpy(x) if lib == "torch" else x, "w")

    with pytest.raises(TypeError, match=message):
        spmd.run(agent, size=N, timeout=60)


def test_a_window_takes_only_its_own_dtype():
    fs.init(backend="sim", size=N)
    _window_setup()
    x = _exact_value("torch", "bfloat16")
    fs.win_create(x, "w")
    with pytest.raises(
        ValueError,
        match=r"x is float16 \(4, 5, 3\) but window 'w' holds "
        r"bfloat16 \(4, 5, 3\)",
    ):
        fs.win_put(x.half(), "w")
    with pytest.raises(ValueError, match=r"x is float32 .* holds bfloat16"):
        fs.win_accumulate(x.float(), "w")


@pytest.mark.mpi
def test_mpi_half_is_the_simulators_bit_for_bit():
    from tests import _jobs

    job = _jobs.fogrun(
        N, "-m", "tests.half_precision_driver", options=("--local-size", str(LOCAL)), timeout=120
    )
    job.check()
    count = len(DTYPES) * len(OPS)
    lines = sorted(line for line in job.stdout.splitlines() if line.strip())
    expect = [f"rank {r}: {count} ops agree" for r in range(N)]
    expect += [f"rank {r}: {len(DTYPES)} window runs agree" for r in range(N)]
    assert lines == sorted(expect), job.describe()
