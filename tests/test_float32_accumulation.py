"""float32 neighbor averages are summed in float64 and rounded to float32 once, in every mode.

The definition checked here, bit for bit: agent i's result is
``float32(w_ii x_i + w_ij1 x_j1 + w_ij2 x_j2 + ...)`` where every weight is the float64 one
given (or the one in the published weight matrix), every value is widened exactly to float64,
each product is rounded to float64, the sum runs left to right in float64 with the self term
first and the in-neighbors by ascending rank, and only the total is rounded to float32.
Summing in float32 (or casting the weights to float32 first) is off by an ulp on a good share
of such data, which BlueFog's own test of 50 fused tensors notices.

The reference below is written from that definition with numpy, not from fogsim's kernels.
The cases reach every path of the kernels: one value per agent, short rows, rows longer than
a block (2048 elements), more neighbors than one pass adds (3), per-agent circulant weights,
streaming stores, in the compiled kernels and their pure-Python twins; then the simulator,
the pure-Python simulator (``FOGSIM_PURE_PYTHON=1``), SPMD threads and MPI on 4 ranks, where
the last two run tensor fusion too.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim._core import _fallback, _fallback_fusion
from tests import _jobs, environment

BLOCK = 2048  # elements per block of the kernels: rows longer than this are split
CHUNK = 3  # neighbor terms one pass of the kernels adds


# --- the definition --------------------------------------------------------------------------


def reference(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x_i <- float32(w_ii x_i + sum_j w_ij x_j)``, summed in float64 left to right, the
    in-neighbors j (nonzero off-diagonal entries of row i) by ascending index."""
    n = x.shape[0]
    flat = x.reshape(n, -1).astype(np.float64)  # exact
    out = np.empty_like(flat)
    for i in range(n):
        acc = W[i, i] * flat[i]
        for j in np.flatnonzero(W[i]):
            if j != i:
                acc = acc + W[i, j] * flat[j]
        out[i] = acc
    return out.astype(np.float32).reshape(x.shape)


def summed_in_float32(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The same sum with the weights cast to float32 and every step rounded to float32."""
    n = x.shape[0]
    flat = x.reshape(n, -1)
    W32 = W.astype(np.float32)
    out = np.empty_like(flat)
    for i in range(n):
        acc = W32[i, i] * flat[i]
        for j in np.flatnonzero(W[i]):
            if j != i:
                acc = acc + W32[i, j] * flat[j]
        out[i] = acc
    return out.reshape(x.shape)


def assert_rounded_once(got, W: np.ndarray, x: np.ndarray, discriminating: bool = True) -> None:
    """Check ``got`` against :func:`reference` bit for bit; with ``discriminating``, also
    check that the data tell a float32 sum apart (so that the test can fail)."""
    got = np.asarray(got)
    want = reference(W, x)
    assert got.dtype == np.float32 and got.shape == want.shape
    bad = np.flatnonzero(got.reshape(-1).view(np.uint32) != want.reshape(-1).view(np.uint32))
    assert bad.size == 0, (
        f"{bad.size} of {want.size} values are not the float64 sum rounded once, e.g. "
        f"flat index {bad[0]}: got {got.reshape(-1)[bad[0]]!r}, want {want.reshape(-1)[bad[0]]!r}"
    )
    if discriminating:
        assert not np.array_equal(want, summed_in_float32(W, x)), "the data do not discriminate"


def values(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """float32 values of a few tens, where an ulp (4e-6) is what a float32 sum gets wrong."""
    return rng.uniform(-60.0, 60.0, shape).astype(np.float32)


def random_matrix(rng: np.random.Generator, n: int, degrees: tuple[int, int]) -> np.ndarray:
    """A dense row-stochastic weight matrix: in-degrees in [lo, hi] (some rows without
    neighbors), positive weights."""
    W = np.zeros((n, n))
    for i in range(n):
        d = min(n - 1, int(rng.integers(degrees[0], degrees[1] + 1)) if rng.random() > 0.1 else 0)
        others = np.delete(np.arange(n), i)
        W[i, rng.choice(others, d, replace=False)] = rng.random(d) + 0.05
        W[i, i] = rng.random() + 0.05
    return W / W.sum(axis=1, keepdims=True)


def circulant_matrix(offsets, weights, self_weight, n: int) -> np.ndarray:
    """Row i: ``self_weight[i]`` on the diagonal, ``weights[k](i)`` at ``(i + offsets[k]) % n``."""
    W = np.zeros((n, n))
    rows = np.arange(n)
    W[rows, rows] = np.broadcast_to(np.asarray(self_weight).reshape(-1), (n,))
    for k, off in enumerate(offsets):
        W[rows, (rows + off) % n] = np.broadcast_to(weights[k], (n,))
    return W


# --- the kernels, compiled and pure Python ---------------------------------------------------


@pytest.fixture(params=["pure-python", "compiled", "compiled-streamed"])
def kernels(request):
    """The kernel module in turn: the numpy twins, the compiled kernels, and the compiled
    kernels writing every output with streaming stores."""
    if request.param == "pure-python":
        yield _fallback
        return
    environment.require_compiled()
    compiled = importlib.import_module("fogsim._core._kernels")
    old = compiled._set_stream_min_bytes(0 if request.param == "compiled-streamed" else 2**62)
    try:
        yield compiled
    finally:
        compiled._set_stream_min_bytes(old)


@pytest.fixture(params=["pure-python", "compiled"])
def combine_rows(request):
    """``combine_rows`` (the MPI and torch runtimes' combine) of each implementation."""
    if request.param == "pure-python":
        return _fallback_fusion.combine_rows
    environment.require_compiled()
    return importlib.import_module("fogsim._core._fusion").combine_rows


@pytest.mark.parametrize("m", [64, BLOCK + 5, 3 * BLOCK + 1])
@pytest.mark.parametrize("k", [1, CHUNK, CHUNK + 1, 2 * CHUNK + 2])
def test_weighted_combine(kernels, m, k):
    rng = np.random.default_rng(m + k)
    x, ys = values(rng, m), values(rng, (k, m))
    sw, weights = rng.random() + 0.05, rng.random(k) + 0.05
    W = np.zeros((k + 1, k + 1))
    W[0] = np.concatenate([[sw], weights])
    got = kernels.weighted_combine(np.empty_like(x), sw, x, weights, ys)
    # Agent 0 holds x, agent 1 + t holds ys[t]: the terms in their order.
    stacked = np.concatenate([x[None], ys])
    want = reference(W, stacked)[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(want, summed_in_float32(W, stacked)[0])


@pytest.mark.parametrize("m", [1, 64, BLOCK + 5])
@pytest.mark.parametrize("k", [2, CHUNK + 1, 2 * CHUNK + 1])
@pytest.mark.parametrize("select", [False, True])
def test_combine_rows(combine_rows, m, k, select):
    rng = np.random.default_rng(10 * m + k)
    x, recv = values(rng, (2, m)), values(rng, (k + 2, 2, m))  # rows of (2, m) values
    rows = rng.permutation(k + 2)[:k] if select else np.arange(k)
    sw, weights = rng.random() + 0.05, rng.random(k) + 0.05
    got = combine_rows(
        np.empty_like(x), sw, x, weights, recv, 0, rows.astype(np.int64) if select else None
    )
    # Agent 0 holds x; agent 1 + t holds received row rows[t] (ascending agent = term order).
    stacked = np.concatenate([x[None], recv[rows]])
    W = np.zeros((k + 1, k + 1))
    W[0] = np.concatenate([[sw], weights])
    want = reference(W, stacked)[0]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    if m > 1:
        assert not np.array_equal(want, summed_in_float32(W, stacked)[0])


@pytest.mark.parametrize("n,m", [(40, 1), (40, 7), (12, 300), (9, 2 * BLOCK + 5), (3000, 1)])
def test_csr_combine(kernels, n, m):
    rng = np.random.default_rng(n + m)
    W = random_matrix(rng, n, (1, 8))
    x = values(rng, (n, m))
    off = W.copy()
    np.fill_diagonal(off, 0.0)
    counts = (off != 0).sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.concatenate([np.flatnonzero(row) for row in off]).astype(np.int32)
    data = off[off != 0]  # row-major: each row's entries by ascending column
    got = kernels.csr_combine(indptr, indices, data, np.diag(W).copy(), x, np.empty_like(x))
    assert_rounded_once(got, W, x)


# (n, m, offsets): more offsets than one pass adds; rows longer than a block; n = 64 with
# offsets up to 32 and 9001 columns, which the kernel splits into column ranges.
CIRCULANT = [
    (16, 1, [1, 2, 4, 8]),
    (16, 5, [1, 2, 4, 8, 15]),
    (33, 300, [3, 7, 20]),
    (11, 2 * BLOCK + 5, [1, 5, 6, 10]),
    (700, 1, [1, 2, 4, 8, 16, 32, 64]),
    (64, 9001, [1, 2, 4, 8, 16, 32]),
]
LAYOUTS = ["shared", "self-per-agent", "all-per-agent"]


@pytest.mark.parametrize("n,m,offsets", CIRCULANT)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_circulant_combine(kernels, n, m, offsets, layout):
    rng = np.random.default_rng(n + m + len(offsets))
    k = len(offsets)
    weights = rng.random((k, n) if layout == "all-per-agent" else k) + 0.05
    self_weight = rng.random(n if layout != "shared" else 1) + 0.05
    x = values(rng, (n, m))
    offs = np.array(offsets, dtype=np.int64)
    got = kernels.circulant_combine(offs, weights, self_weight, x, np.empty_like(x))
    W = circulant_matrix(offsets, weights, self_weight, n)
    assert_rounded_once(got, W, x)


# --- the simulator -----------------------------------------------------------------------------


@pytest.fixture(params=["plain", "streamed"])
def world(request):
    """A simulated world of 16 agents; ``streamed``: the compiled kernels stream every store."""
    compiled = None
    if request.param == "streamed":
        environment.require_compiled()
        compiled = importlib.import_module("fogsim._core._kernels")
        old = compiled._set_stream_min_bytes(0)
    try:
        with fs.Context(backend="sim", size=16, topology=T.exponential_two_graph) as ctx:
            yield ctx
        ctx.close()
    finally:
        if compiled is not None:
            compiled._set_stream_min_bytes(old)


STATIC = {
    "ring": T.ring_graph,  # circulant, 2 neighbors
    "exp2": T.exponential_two_graph,  # circulant, 4 neighbors
    "full": T.fully_connected_graph,  # circulant, 15 neighbors
    "star": T.star_graph,  # CSR, degrees 1 and 15
}
SHAPES = [(1,), (5,), (3, 100), (2 * BLOCK + 5,)]


@pytest.mark.parametrize("name", STATIC)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_simulator_static_uniform(world, name, shape):
    topo = STATIC[name](16)
    fs.set_topology(topo)
    x = values(np.random.default_rng(len(shape) + shape[-1]), (16, *shape))
    # The weights are the published uniform matrix's (exactly stochastic rows).
    W = fs.load_topology().uniform().to_dense()
    assert_rounded_once(fs.neighbor_allreduce(x), W, x, discriminating=shape != (1,))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_simulator_static_weighted(world, shape):
    rng = np.random.default_rng(3)
    W = random_matrix(rng, 16, (2, 9))
    fs.set_topology(W, is_weighted=True, check_weights=False)
    x = values(rng, (16, *shape))
    assert_rounded_once(fs.neighbor_allreduce(x), W, x, discriminating=shape != (1,))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_simulator_per_call_weights(world, shape):
    rng = np.random.default_rng(4)
    W = random_matrix(rng, 16, (1, 7))  # edges the topology does not have: a dynamic call
    x = values(rng, (16, *shape))
    src = [{int(j): W[i, j] for j in np.flatnonzero(W[i]) if j != i} for i in range(16)]
    dst = [[int(i) for i in np.flatnonzero(W[:, j]) if i != j] for j in range(16)]
    got = fs.neighbor_allreduce(x, self_weight=np.diag(W).copy(), src_weights=src, dst_weights=dst)
    assert_rounded_once(got, W, x, discriminating=shape != (1,))
    # The same weights as a matrix, and as one per-agent circulant (shift by 1 and by 3).
    assert_rounded_once(fs.neighbor_allreduce(x, src_weights=W), W, x, discriminating=False)
    weights, self_weight = rng.random((2, 16)) + 0.05, rng.random(16) + 0.05
    total = weights.sum(axis=0) + self_weight  # row i holds weights[:, i] and self_weight[i]
    C = circulant_matrix([1, 3], weights / total, self_weight / total, 16)
    got = fs.neighbor_allreduce(x, self_weight=np.diag(C).copy(), src_weights=T.Topology(C))
    assert_rounded_once(got, C, x, discriminating=shape != (1,))


def test_simulator_large_output_streams(world):
    # 16 agents x 2**18 float32 = 16 MiB: the size from which the kernels stream by default.
    x = values(np.random.default_rng(5), (16, 2**18 + 3))
    W = fs.load_topology().uniform().to_dense()
    assert_rounded_once(fs.neighbor_allreduce(x), W, x)


def test_simulator_hierarchical():
    # Machines of 2 agents: each machine's float32 mean (its agents summed in local-rank
    # order, then halved), combined among the 8 machines by the rule above.
    x = values(np.random.default_rng(6), (16, 300))
    with fs.Context(backend="sim", size=16, local_size=2) as ctx:
        got = np.asarray(fs.hierarchical_neighbor_allreduce(x))
        M = fs.load_machine_topology().uniform().to_dense()
    ctx.close()
    mean = (x[0::2] + x[1::2]) / np.float32(2)
    want = np.repeat(reference(M, mean), 2, axis=0)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(want, np.repeat(summed_in_float32(M, mean), 2, axis=0))


def test_simulator_bluefog_fused_tensors():
    # BlueFog's fused case: 50 nonblocking calls on tensors filled with i + rank (dims 1, 2, 3
    # of 23) over the exp2 graph of 4 agents.
    with fs.Context(backend="sim", size=4, topology=T.exponential_two_graph) as ctx:
        W = fs.load_topology().uniform().to_dense()
        for dim in (1, 2, 3):
            xs = [
                fs.local(lambda r, i=i, d=dim: np.full((23,) * d, i + r, np.float32))
                for i in range(50)
            ]
            handles = [fs.neighbor_allreduce_nonblocking(x, name=f"t{i}") for i, x in enumerate(xs)]
            outs = [np.asarray(fs.wait(h)) for h in handles]
            for i, (x, out) in enumerate(zip(xs, outs, strict=True)):
                assert_rounded_once(out, W, x, discriminating=False)
                check_bluefog_bound(out, i)
    ctx.close()


def check_bluefog_bound(out: np.ndarray, i: int) -> None:
    """BlueFog's check on 4 ranks: ``(out_r - i) * 3`` (float32) within 1e-5 of the sum of
    rank r and its in-neighbors ``(r - 1) % 4`` and ``(r - 2) % 4``."""
    for r in range(4):
        normalized = (out[r] - np.float32(i)) * np.float32(3)
        want = r + (r - 1) % 4 + (r - 2) % 4
        assert np.abs(normalized - np.float32(want)).max() < 1e-5, (i, r)


# --- every mode: a job under fogrun ----------------------------------------------------------

JOB = """
import sys

import numpy as np

import fogsim as fs
from fogsim import _core
from fogsim import topology as T

ctx = fs.init(topology=T.exponential_two_graph)
n = fs.size()
saved = {"compiled": np.array(_core.compiled), "backend": np.array(type(ctx.backend).__name__)}


def data(seed, shape):
    rng = np.random.default_rng(seed)
    return rng.uniform(-60.0, 60.0, (n, *shape)).astype(np.float32)


def keep(tag, W, x, got):
    saved[tag + "|W"], saved[tag + "|x"] = W, x
    saved[tag + "|got"] = np.asarray(fs.global_view(got))


shapes = [(1,), (5,), (3, 100), (2 * 2048 + 5,)]
W = fs.load_topology().uniform().to_dense()
for shape in shapes:
    x = data(1, shape)
    keep(f"static{shape}", W, x, fs.neighbor_allreduce(fs.local(lambda r: x[r].copy())))

rng = np.random.default_rng(2)
M = np.zeros((n, n))
for i in range(n):
    d = min(n - 1, int(rng.integers(1, 8)))
    M[i, rng.choice(np.delete(np.arange(n), i), d, replace=False)] = rng.random(d) + 0.05
    M[i, i] = rng.random() + 0.05
for shape in shapes:
    x = data(3, shape)
    got = fs.neighbor_allreduce(
        fs.local(lambda r: x[r].copy()),
        self_weight=fs.local(lambda r: float(M[r, r])),
        src_weights=fs.local(lambda r: {int(j): M[r, j] for j in np.flatnonzero(M[r]) if j != r}),
        dst_weights=fs.local(lambda r: [int(i) for i in np.flatnonzero(M[:, r]) if i != r]),
    )
    keep(f"dynamic{shape}", M, x, got)

fs.set_topology(M, is_weighted=True, check_weights=False)
for shape in shapes:
    x = data(4, shape)
    keep(f"weighted{shape}", M, x, fs.neighbor_allreduce(fs.local(lambda r: x[r].copy())))

fs.set_topology(T.exponential_two_graph)
W = fs.load_topology().uniform().to_dense()
for dim in (1, 2, 3):
    xs = [fs.local(lambda r, i=i: np.full((23,) * dim, i + r, np.float32)) for i in range(50)]
    handles = [fs.neighbor_allreduce_nonblocking(x, name=f"t{i}") for i, x in enumerate(xs)]
    for i, (x, h) in enumerate(zip(xs, handles)):
        keep(f"fused{dim}-{i}", W, np.asarray(fs.global_view(x)), fs.wait(h))

if fs.is_main_process():
    np.savez(sys.argv[1], **saved)
fs.shutdown()
"""

# mode: (processes, fogrun options, extra environment, backend class, compiled kernels)
MODES = {
    "mpi": (4, (), {}, "MPIBackend", True),
    "spmd": (4, ("--spmd",), {}, "SpmdBackend", True),
    "pure-python-sim": (16, ("--sim",), {"FOGSIM_PURE_PYTHON": "1"}, "SimBackend", False),
}


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=pytest.mark.mpi) if m == "mpi" else m for m in MODES]
)
def test_every_mode_rounds_once(mode, tmp_path):
    n, options, env, backend, compiled = MODES[mode]
    if compiled:
        environment.require_compiled()
    out = tmp_path / "out.npz"
    _jobs.fogrun_script(tmp_path, JOB, n, str(out), options=options, timeout=150, env=env).check()
    with np.load(out) as saved:
        got = {key: saved[key] for key in saved.files}
    assert (str(got.pop("backend")), bool(got.pop("compiled"))) == (backend, compiled)
    tags = sorted({key.split("|")[0] for key in got})
    assert len(tags) == 3 * 4 + 3 * 50, tags
    for tag in tags:
        W, x = got[tag + "|W"], got[tag + "|x"]
        assert x.shape[0] == n, tag
        fused = tag.startswith("fused")
        assert_rounded_once(got[tag + "|got"], W, x, discriminating=not fused and "(1,)" not in tag)
        if fused and n == 4:
            check_bluefog_bound(got[tag + "|got"], int(tag.split("-")[1]))
