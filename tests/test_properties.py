"""Property-based tests (hypothesis) of the simulator's ops and of tensor fusion.

Generated cases (fixed database-free derandomized runs, so CI sees the same ones every
time): random directed topologies, per-agent weights (sometimes NaN, infinite, negative,
naming ranks that do not exist or senders their receivers do not list), shapes and
dtypes. Valid calls must match the numpy reference ``W @ X``; invalid ones must raise a
ValueError/TypeError naming the argument. Fused tensors must come back byte for byte.
About 1,300 cases in all.
"""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="pip install hypothesis (the dev extra)")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fogsim as fs  # noqa: E402
from fogsim import _core  # noqa: E402

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)
# The generated weights are arbitrary on purpose (rows and columns sum to anything): the
# properties are about the arithmetic, not about weights fit for averaging.
pytestmark = pytest.mark.filterwarnings("ignore::fogsim.WeightWarning")


@st.composite
def worlds(draw):
    """(n, adjacency with A[i, j] = j sends to i, data, dtype)."""
    n = draw(st.integers(1, 7))
    bits = draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n))
    A = np.array(bits, dtype=bool).reshape(n, n)
    np.fill_diagonal(A, False)
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    shape = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    seed = draw(st.integers(0, 2**31 - 1))
    data = np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)
    return n, A, data, seed


def _reference(W, data):
    return np.einsum("ij,j...->i...", W, data.astype(np.float64))


def _close(got, want, dtype):
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=tol, atol=tol)


@given(worlds())
@SETTINGS
def test_dynamic_weights_match_numpy(world):
    n, A, data, seed = world
    rng = np.random.default_rng(seed)
    R = rng.uniform(-1, 1, (n, n)) * A  # negative weights are allowed: they are finite
    S = rng.uniform(0.1, 2, (n, n)) * A
    sw = rng.uniform(0, 1, n)
    src = [{int(j): float(R[i, j]) for j in np.flatnonzero(A[i])} for i in range(n)]
    dst = [{int(i): float(S[i, j]) for i in np.flatnonzero(A[:, j])} for j in range(n)]
    with fs.Context(backend="sim", size=n) as world_:
        got = fs.neighbor_allreduce(data, self_weight=sw, src_weights=src, dst_weights=dst)
    world_.close()
    _close(got, _reference(np.diag(sw) + R * S, data), data.dtype)
    assert np.asarray(got).dtype == data.dtype


@given(worlds())
@SETTINGS
def test_topologies_as_matrices_match_numpy(world):
    n, A, data, seed = world
    W = np.random.default_rng(seed).uniform(0, 1, (n, n)) * (A | np.eye(n, dtype=bool))
    with fs.Context(backend="sim", size=n) as world_:
        fs.set_topology(W, is_weighted=True)
        static = fs.neighbor_allreduce(data)
        fs.set_topology(W, is_weighted=False)
        uniform = fs.neighbor_allreduce(data)
        step = fs.neighbor_allreduce(data, src_weights=W)
    world_.close()
    _close(static, _reference(W, data), data.dtype)
    _close(step, _reference(W, data), data.dtype)
    U = (A | np.eye(n, dtype=bool)) / (A.sum(axis=1, keepdims=True) + 1)
    _close(uniform, _reference(U, data), data.dtype)


BAD = [
    "nan_weight",
    "inf_self",
    "unknown_rank",
    "unlisted_sender",
    "int_dtype",
    "bad_shape",
    "src_without_self",
    "negative_rank",
]


@given(worlds(), st.sampled_from(BAD))
@SETTINGS
def test_invalid_calls_raise_naming_the_argument(world, bad):
    n, A, data, seed = world
    rng = np.random.default_rng(seed)
    src = [{int(j): 0.5 for j in np.flatnonzero(A[i])} for i in range(n)]
    dst = [{int(i): 1.0 for i in np.flatnonzero(A[:, j])} for j in range(n)]
    sw = np.full(n, 0.5)
    x = data
    i = int(rng.integers(n))
    expect: tuple[type, str]
    if bad == "nan_weight":
        src[i] = {**src[i], (i + 1) % n: float("nan")} if n > 1 else {}
        if n == 1:
            sw[0] = float("nan")
        expect = (ValueError, f"src_weights[{i}]: weight nan" if n > 1 else "self_weight[0] is nan")
    elif bad == "inf_self":
        sw[i] = float("inf")
        expect = (ValueError, f"self_weight[{i}] is inf")
    elif bad == "unknown_rank":
        src[i] = {**src[i], n + 3: 0.5}
        expect = (ValueError, f"src_weights[{i}]: rank {n + 3} is out of range")
    elif bad == "negative_rank":
        dst[i] = {**dst[i], -1: 1.0}
        expect = (ValueError, f"dst_weights[{i}]: rank -1 is out of range")
    elif bad == "unlisted_sender":
        if n == 1:
            return
        j = (i + 1) % n
        src[i] = {k: w for k, w in src[i].items() if k != j}
        dst[j] = {**dst[j], i: 1.0}  # j sends to i, which does not expect it
        expect = (ValueError, f"agent {j} sends to agent {i} (dst_weights[{j}])")
    elif bad == "int_dtype":
        x = np.arange(n * 2).reshape(n, 2)
        expect = (TypeError, "x must be float32 or float64")
    elif bad == "bad_shape":
        x = np.ones((n + 1, 2))
        expect = (ValueError, f"x has {n + 1} entries on its leading (agent) axis")
    else:  # src_without_self
        sw = None
        dst = None
        expect = (ValueError, "src_weights was given without self_weight")
    with fs.Context(backend="sim", size=n) as world_:
        with pytest.raises(expect[0]) as info:
            fs.neighbor_allreduce(x, self_weight=sw, src_weights=src, dst_weights=dst)
    world_.close()
    assert expect[1] in str(info.value), (bad, str(info.value))


DTYPES = [np.float64, np.float32, np.int32, np.uint8, np.int64, np.float16]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(DTYPES),
            st.lists(st.integers(0, 5), max_size=3),
            st.integers(0, 2**31 - 1),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["compiled", "python"]),
)
@SETTINGS
def test_fusion_packs_every_tensor_byte_exact(specs, impl):
    dispatch = _core.dispatch if impl == "compiled" else _core.fallback_dispatch
    if impl == "compiled" and not _core.compiled:
        return
    arrays = []
    for dtype, shape, seed in specs:
        raw = np.random.default_rng(seed).integers(
            0, 256, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, dtype=np.uint8
        )
        arrays.append(raw.view(dtype).reshape(shape))  # any bit pattern, NaNs included
    offsets, at = [], 0
    for a in arrays:
        offsets.append(at)
        at += (a.nbytes + 7) // 8 * 8
    buf = np.full(at + 8, 0xAB, dtype=np.uint8)
    dispatch.pack(buf, arrays, offsets)
    for a, off in zip(arrays, offsets, strict=True):
        back = buf[off : off + a.nbytes].view(a.dtype).reshape(a.shape)
        assert back.tobytes() == a.tobytes()
    gaps = np.ones(len(buf), dtype=bool)
    for a, off in zip(arrays, offsets, strict=True):
        gaps[off : off + a.nbytes] = False
    assert not buf[gaps].any()  # the gaps (and the tail) are zeroed
