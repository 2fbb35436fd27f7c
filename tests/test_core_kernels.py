"""Tests of fogsim._core: compiled kernels, numpy fallback and a float64 reference agree.

The compiled and fallback kernels must agree bit for bit (``np.array_equal``); both must match
``W @ x`` computed in float64 to rounding. Tests that need the extension are skipped with a
reason when it is not built.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from fogsim import _core
from fogsim._core import _fallback
from tests import _jobs

DTYPES = [np.float32, np.float64]
# Relative to |W| @ |x|; float32 sums of up to ~12 rounded products stay far below 1e-5.
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-13}


def assert_matches_reference(got, W, x):
    """Check got against W @ x in float64 (W dense or sparse), relative to |W| @ |x|."""
    x64 = x.astype(np.float64)
    err = np.abs(got.astype(np.float64) - W @ x64)
    assert np.all(err <= TOL[got.dtype] * (abs(W) @ np.abs(x64)) + 1e-300)


def data(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


# --- weighted_combine ------------------------------------------------------------------------

WC_SHAPES = [(1, 0), (1, 1), (5, 2), (7, 3), (8, 4), (33, 7), (2048 + 5, 3), (5000, 5)]


def weighted_case(rng, m, k, dtype):
    x = data(rng, m, dtype)
    ys = data(rng, (k, m), dtype)
    weights = rng.random(k)
    return 0.3 + rng.random(), x, weights, ys


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k", WC_SHAPES)
def test_weighted_combine_reference(impl, dtype, m, k):
    rng = np.random.default_rng(m * 100 + k)
    sw, x, weights, ys = weighted_case(rng, m, k, dtype)
    out = np.empty_like(x)
    assert impl.weighted_combine(out, sw, x, weights, ys) is out
    W = np.concatenate([[sw], weights])[None, :]
    stacked = np.concatenate([x[None, :], ys])
    assert_matches_reference(out[None, :], W, stacked)
    # out may be x itself.
    xin = x.copy()
    impl.weighted_combine(xin, sw, xin, weights, ys)
    assert np.array_equal(xin, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k", [(0, 2), *WC_SHAPES])
def test_weighted_combine_bitwise(compiled, dtype, m, k):
    rng = np.random.default_rng(m * 100 + k + 1)
    sw, x, weights, ys = weighted_case(rng, m, k, dtype)
    a = compiled.weighted_combine(np.empty_like(x), sw, x, weights, ys)
    b = _fallback.weighted_combine(np.empty_like(x), sw, x, weights, ys)
    assert a.dtype == b.dtype == dtype
    assert np.array_equal(a, b)


def test_float32_is_summed_in_float64_and_rounded_once(impl):
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    ys = x[::-1].copy()[None, :]
    out = impl.weighted_combine(np.empty_like(x), 0.1, x, np.array([0.7]), ys)
    expected = 0.1 * x.astype(np.float64)
    expected = (expected + 0.7 * ys[0].astype(np.float64)).astype(np.float32)
    assert np.array_equal(out, expected)
    # Casting the weights to float32 first, or summing in float32, gives other bits here.
    assert not np.array_equal(out, np.float32(0.1) * x + np.float32(0.7) * ys[0])


# --- csr_combine -----------------------------------------------------------------------------

CSR_SHAPES = [(1, 1), (1, 4), (2, 1), (5, 3), (17, 1), (33, 8), (64, 13), (300, 2), (3000, 1)]


def random_matrix(rng, n, max_degree=9, empty=0.2):
    """Return a sparse random weight matrix with some empty rows and rows longer than 3."""
    rows, cols = [np.arange(n)], [np.arange(n)]
    for i in range(n):
        if n == 1 or rng.random() < empty:
            continue
        deg = int(rng.integers(1, min(max_degree, n - 1) + 1))
        rows.append(np.full(deg, i))
        cols.append(rng.choice(np.delete(np.arange(n), i), deg, replace=False))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_array((rng.random(rows.size) + 0.1, (rows, cols)), shape=(n, n))


def to_csr(W):
    """Split W into (indptr, indices, data, self_weight), indices ascending per row."""
    W = sp.csr_array(W)
    diag = W.diagonal()
    off = sp.csr_array(W - sp.diags_array(diag, shape=W.shape))
    off.eliminate_zeros()
    off.sort_indices()
    return off.indptr.astype(np.int64), off.indices.astype(np.int32), off.data.copy(), diag


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", CSR_SHAPES)
def test_csr_combine_reference(impl, dtype, n, m):
    rng = np.random.default_rng(n * 1000 + m)
    W = random_matrix(rng, n)
    x = data(rng, (n, m), dtype)
    out = np.empty_like(x)
    assert impl.csr_combine(*to_csr(W), x, out) is out
    assert_matches_reference(out, W, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", [(0, 3), (4, 0), *CSR_SHAPES])
def test_csr_combine_bitwise(compiled, dtype, n, m):
    rng = np.random.default_rng(n * 1000 + m + 1)
    W = random_matrix(rng, n)
    x = data(rng, (n, m), dtype)
    a = compiled.csr_combine(*to_csr(W), x, np.empty_like(x))
    b = _fallback.csr_combine(*to_csr(W), x, np.empty_like(x))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_csr_combine_regular_degree_bitwise(compiled, dtype):
    # The fallback has a separate path for matrices whose rows all have one degree.
    rng = np.random.default_rng(7)
    n, m = 50, 3
    W = circulant_matrix(np.array([1, 4, 9, 30]), rng.random((4, n)), np.array(0.4), n)
    x = data(rng, (n, m), dtype)
    a = compiled.csr_combine(*to_csr(W), x, np.empty_like(x))
    b = _fallback.csr_combine(*to_csr(W), x, np.empty_like(x))
    assert np.array_equal(a, b)
    assert_matches_reference(a, W, x)


# --- circulant_combine -----------------------------------------------------------------------

CIRC_SHAPES = [(1, 1), (2, 1), (3, 2), (8, 1), (8, 5), (33, 3), (2100, 1), (5000, 1), (700, 4)]


def circulant_case(rng, n, m, dtype, per_row_weights, self_layout):
    nk = int(rng.integers(0, min(n - 1, 7) + 1))
    offsets = np.sort(rng.choice(np.arange(1, n), nk, replace=False)).astype(np.int64)
    weights = rng.random((nk, n) if per_row_weights else nk) + 0.1
    shape = {"scalar": (), "one": (1,), "rows": (n,)}[self_layout]
    self_weight = np.asarray(rng.random(shape) + 0.1)
    W = circulant_matrix(offsets, weights, self_weight, n)
    return (offsets, weights, self_weight, data(rng, (n, m), dtype)), W


def circulant_matrix(offsets, weights, self_weight, n):
    """Return the circulant weight matrix as a sparse array."""
    agents = np.arange(n)
    rows = np.tile(agents, len(offsets) + 1)
    cols = np.concatenate([agents, *[(agents + o) % n for o in offsets]])
    vals = np.concatenate(
        [
            np.broadcast_to(self_weight.reshape(-1), (n,)),
            *[np.broadcast_to(weights[k], (n,)) for k in range(len(offsets))],
        ]
    )
    return sp.csr_array((vals, (rows, cols)), shape=(n, n))


LAYOUTS = [(False, "scalar"), (False, "one"), (False, "rows"), (True, "scalar"), (True, "rows")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", CIRC_SHAPES)
@pytest.mark.parametrize("per_row,self_layout", LAYOUTS)
def test_circulant_combine_matches_csr(impl, dtype, n, m, per_row, self_layout):
    rng = np.random.default_rng(n * 100 + m)
    for _ in range(3):
        args, W = circulant_case(rng, n, m, dtype, per_row, self_layout)
        x = args[-1]
        out = np.empty_like(x)
        assert impl.circulant_combine(*args, out) is out
        assert_matches_reference(out, W, x)
        # Same matrix in CSR form: bit-identical, as the simulator relies on.
        via_csr = impl.csr_combine(*to_csr(W), x, np.empty_like(x))
        assert np.array_equal(out, via_csr)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", [(0, 2), (5, 0), *CIRC_SHAPES])
@pytest.mark.parametrize("per_row,self_layout", LAYOUTS)
def test_circulant_combine_bitwise(compiled, dtype, n, m, per_row, self_layout):
    rng = np.random.default_rng(n * 100 + m + 1)
    for _ in range(3):
        if n == 0:
            args = (np.zeros(0, np.int64), np.zeros(0), np.ones(()), np.zeros((0, m), dtype))
            W = sp.csr_array((0, 0))
        else:
            args, W = circulant_case(rng, n, m, dtype, per_row, self_layout)
        x = args[-1]
        a = compiled.circulant_combine(*args, np.empty_like(x))
        b = _fallback.circulant_combine(*args, np.empty_like(x))
        assert np.array_equal(a, b)
        assert np.array_equal(a, compiled.csr_combine(*to_csr(W), x, np.empty_like(x)))


# --- Combiner: a matrix checked once, applied to many x -------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", [(5, 0), *CIRC_SHAPES])
@pytest.mark.parametrize("per_row,self_layout", LAYOUTS)
def test_combiner_gives_the_combine_functions_bits(impl, dtype, n, m, per_row, self_layout):
    rng = np.random.default_rng(n * 100 + m + 2)
    args, W = circulant_case(rng, n, m, dtype, per_row, self_layout)
    x = args[-1]
    circ = impl.Combiner.circulant(*args[:-1], n)
    csr = impl.Combiner.csr(*to_csr(W), n)
    for _ in range(2):  # the same object, applied again, to another x
        expected = impl.circulant_combine(*args[:-1], x, np.empty_like(x))
        out = np.empty_like(x)
        assert circ.apply(x, out) is out
        assert np.array_equal(out, expected)
        assert np.array_equal(csr.apply(x, np.empty_like(x)), expected)
        x = data(rng, (n, m), dtype)


def test_combiner_checks_the_matrix_once_and_x_at_every_call(impl):
    offsets, weights, sw = np.array([1, 3], np.int64), np.array([0.25, 0.25]), np.array(0.5)
    with pytest.raises(ValueError, match="offsets"):
        impl.Combiner.circulant(np.array([0, 3], np.int64), weights, sw, 4)
    with pytest.raises(ValueError, match="weights"):
        impl.Combiner.circulant(offsets, np.array([np.nan, 0.25]), sw, 4)
    with pytest.raises(ValueError, match="out of range"):
        impl.Combiner.csr(
            np.array([0, 1, 1], np.int64), np.array([5], np.int32), np.ones(1), np.ones(2), 2
        )
    with pytest.raises(TypeError, match="n must be an integer"):
        impl.Combiner.circulant(offsets, weights, sw, 4.0)
    with pytest.raises(TypeError, match="Combiner.circulant"):
        impl.Combiner()
    c = impl.Combiner.circulant(offsets, weights, sw, 4)
    assert c.n == 4
    assert not offsets.flags.writeable  # what was checked cannot change under it
    x = np.arange(8.0).reshape(4, 2)
    with pytest.raises(ValueError, match="3 rows; this matrix combines 4"):
        c.apply(x[:3].copy(), np.empty((3, 2)))
    with pytest.raises(ValueError, match="share memory"):
        c.apply(x, x)
    with pytest.raises(ValueError):
        c.apply(x, np.empty((4, 3)))
    with pytest.raises(TypeError, match="float32 or float64"):
        c.apply(x.astype(np.int64), np.empty((4, 2), np.int64))


def test_dicts_unchanged_tells_the_same_untouched_dicts(compiled):
    import sys

    rows = [{1: 0.5}, {0: 0.5}]
    watched = compiled.dicts_watch(rows)
    if sys.version_info >= (3, 12):  # no dict version tags to read: callers compare items
        assert watched is None
        return
    assert compiled.dicts_unchanged(rows, watched)
    assert compiled.dicts_unchanged(tuple(rows), watched)  # the same dicts, in a tuple
    assert not compiled.dicts_unchanged([rows[0], dict(rows[1])], watched)  # an equal copy
    assert not compiled.dicts_unchanged(rows[:1], watched)
    rows[1][0] = 0.25
    rows[1][0] = 0.5  # changed, and changed back: the versions tell it was touched
    assert not compiled.dicts_unchanged(rows, watched)
    assert compiled.dicts_watch([{1: 0.5}, [0]]) is None  # only dicts are watched
    assert compiled.dicts_watch({1: 0.5}) is None
    assert _fallback.dicts_watch(rows) is None  # the twin reads no versions


# --- streaming stores ------------------------------------------------------------------------

# Large outputs are written with streaming stores: the last pass over a block writes out
# directly (SSE2 vectors from the first 16-byte aligned element, single-element stores before
# and after), earlier passes go to a stack buffer. The `streamed` fixture takes that path for
# every output, so small shapes reach its head, tail, block and pass boundaries.
STREAM_SHAPES = [(1, 1), (2, 1), (3, 2), (8, 5), (33, 3), (40, 61), (700, 4), (2100, 1)]
# Per-row weights stream only rows of at least 1 KB; rows longer than a block (2048
# elements) are done in pieces.
STREAM_LONG_ROWS = [(20, 300), (9, 2 * 2048 + 5), (2, 2048)]
# Start of out past a cache-line boundary: aligned, one element (not 16-byte aligned), 1 byte.
SHIFTS = [0, "item", 1]


@pytest.fixture
def streamed(compiled):
    """The compiled module, writing every output with streaming stores."""
    old = compiled._set_stream_min_bytes(0)
    yield compiled
    compiled._set_stream_min_bytes(old)


def guarded_out(shape, dtype, shift):
    """Return (out, intact): out starts `shift` bytes past a 64-byte boundary inside a
    larger buffer, and intact() tells whether the bytes around it are unchanged."""
    dtype = np.dtype(dtype)
    shift = dtype.itemsize if shift == "item" else shift
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.full(nbytes + 192, 0xA5, np.uint8)
    start = -raw.ctypes.data % 64 + 64 + shift
    out = raw[start : start + nbytes].view(dtype).reshape(shape)
    assert out.flags.c_contiguous and out.flags.aligned == (shift % dtype.itemsize == 0)

    def intact():
        return bool((raw[:start] == 0xA5).all() and (raw[start + nbytes :] == 0xA5).all())

    return out, intact


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", STREAM_SHAPES + STREAM_LONG_ROWS)
@pytest.mark.parametrize("per_row,self_layout", LAYOUTS)
@pytest.mark.parametrize("shift", SHIFTS)
def test_circulant_combine_streamed_bitwise(streamed, dtype, n, m, per_row, self_layout, shift):
    rng = np.random.default_rng(n * 100 + m + 2)
    for _ in range(3):
        args, W = circulant_case(rng, n, m, dtype, per_row, self_layout)
        x = args[-1]
        out, intact = guarded_out(x.shape, dtype, shift)
        assert streamed.circulant_combine(*args, out) is out
        assert intact()
        assert np.array_equal(out, _fallback.circulant_combine(*args, np.empty_like(x)))
        csr_out, intact = guarded_out(x.shape, dtype, shift)
        streamed.csr_combine(*to_csr(W), x, csr_out)
        assert intact()
        assert np.array_equal(out, csr_out)


# csr_combine streams only rows of at least 1 KB.
CSR_STREAM_SHAPES = [(1, 300), (3, 128), (17, 257), (33, 300), (5, 2 * 2048 + 5)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", CSR_SHAPES[:3] + CSR_STREAM_SHAPES)
@pytest.mark.parametrize("shift", SHIFTS)
def test_csr_combine_streamed_bitwise(streamed, dtype, n, m, shift):
    rng = np.random.default_rng(n * 1000 + m + 2)
    W = random_matrix(rng, n)
    x = data(rng, (n, m), dtype)
    out, intact = guarded_out(x.shape, dtype, shift)
    assert streamed.csr_combine(*to_csr(W), x, out) is out
    assert intact()
    assert np.array_equal(out, _fallback.csr_combine(*to_csr(W), x, np.empty_like(x)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [9000, 9001])
@pytest.mark.parametrize("per_row,self_layout", [(False, "one"), (True, "rows")])
@pytest.mark.parametrize("stream", [False, True])
def test_circulant_combine_column_ranges(compiled, dtype, m, per_row, self_layout, stream):
    # Rows read by up to 33 rows (offsets 1..32 of 64) are split into column ranges of about
    # 1 MB / 33, done for all rows in turn.
    n = 64
    offsets = np.array([1, 2, 4, 8, 16, 32], dtype=np.int64)
    rng = np.random.default_rng(m)
    weights = rng.random((6, n) if per_row else 6) + 0.1
    self_weight = np.asarray(rng.random({"one": (1,), "rows": (n,)}[self_layout]) + 0.1)
    args = (offsets, weights, self_weight, data(rng, (n, m), dtype))
    old = compiled._set_stream_min_bytes(0 if stream else 2**62)
    try:
        out = compiled.circulant_combine(*args, np.empty_like(args[-1]))
    finally:
        compiled._set_stream_min_bytes(old)
    assert np.array_equal(out, _fallback.circulant_combine(*args, np.empty_like(out)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,per_row", [(1, False), (7, False), (300, True)])
def test_large_outputs_bitwise(compiled, dtype, m, per_row):
    # Circulant outputs above the real threshold, with 2 offsets (one pass) and 5 (two).
    itemsize = np.dtype(dtype).itemsize
    n = compiled.STREAM_MIN_BYTES // (itemsize * m) + 3
    assert n * m * itemsize > compiled.STREAM_MIN_BYTES
    rng = np.random.default_rng(m)
    x = data(rng, (n, m), dtype)
    for offsets in ([1, n - 1], [1, 2, 4, 8, n - 3]):
        offsets = np.array(offsets, dtype=np.int64)
        k = offsets.size
        weights = rng.random((k, n) if per_row else k) + 0.1
        self_weight = np.asarray(rng.random(n if per_row else ()) + 0.1)
        args = (offsets, weights, self_weight, x)
        out = np.empty_like(x)
        compiled.circulant_combine(*args, out)
        assert np.array_equal(out, _fallback.circulant_combine(*args, np.empty_like(x)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_csr_output_bitwise(compiled, dtype):
    m = 300
    n = compiled.STREAM_MIN_BYTES // (np.dtype(dtype).itemsize * m) + 3
    rng = np.random.default_rng(3)
    x = data(rng, (n, m), dtype)
    W = random_matrix(rng, n, max_degree=5)
    out = compiled.csr_combine(*to_csr(W), x, np.empty_like(x))
    assert np.array_equal(out, _fallback.csr_combine(*to_csr(W), x, np.empty_like(x)))


# --- assemble_csr ----------------------------------------------------------------------------


def test_assemble_csr_item_kinds(impl):
    rows = [
        {3: 0.25, 1: 0.5},
        [3, 0],
        (0,),
        np.array([1], dtype=np.int16),
        None,
        {},
        {np.int64(0): np.float32(0.5), 2: 1},
    ]
    indptr, indices, data_ = impl.assemble_csr(7, rows, allow_self=True)
    assert indptr.dtype == np.int64 and indices.dtype == np.int32 and data_.dtype == np.float64
    assert indptr.tolist() == [0, 2, 4, 5, 6, 6, 6, 8]
    assert indices.tolist() == [1, 3, 0, 3, 0, 1, 0, 2]
    assert data_.tolist() == [0.5, 0.25, 1.0, 1.0, 1.0, 1.0, 0.5, 1.0]


@pytest.mark.parametrize("n,max_deg", [(0, 0), (1, 0), (2, 1), (50, 5), (200, 60), (40, 39)])
def test_assemble_csr_bitwise(compiled, n, max_deg):
    # Rows longer than 32 take the qsort path, shorter unsorted ones insertion sort.
    rng = np.random.default_rng(n + max_deg)
    rows = []
    for i in range(n):
        deg = int(rng.integers(0, max_deg + 1))
        ranks = rng.choice(np.delete(np.arange(n), i), deg, replace=False)
        kind = i % 3
        if kind == 0:
            rows.append({int(r): float(rng.random()) for r in ranks})
        elif kind == 1:
            rows.append([int(r) for r in ranks])
        else:
            rows.append(ranks)
    a = compiled.assemble_csr(n, rows)
    b = _fallback.assemble_csr(n, rows)
    for u, v in zip(a, b, strict=True):
        assert u.dtype == v.dtype and np.array_equal(u, v)
    indptr, indices, _ = a
    for i in range(n):
        row = indices[indptr[i] : indptr[i + 1]]
        assert np.all(np.diff(row) > 0) and len(row) == len(rows[i])


# --- the package -----------------------------------------------------------------------------


def test_public_namespace():
    assert sorted(_core.__all__) == sorted(
        [
            "Combiner",
            "FusedBatch",
            "FusionQueue",
            "Handle",
            "HandleTable",
            "assemble_csr",
            "circulant_combine",
            "combine_rows",
            "compiled",
            "csr_combine",
            "csr_combine_rows",
            "dicts_unchanged",
            "dicts_watch",
            "dispatch",
            "fallback",
            "fallback_dispatch",
            "fallback_fusion",
            "fallback_handles",
            "fallback_trace",
            "fusion",
            "handles",
            "format_trace_events",
            "kernels",
            "layout_fingerprint",
            "pack",
            "TraceOp",
            "TracePhase",
            "TraceRecorder",
            "trace",
            "trace_now_ns",
            "weighted_combine",
        ]
    )
    assert isinstance(_core.compiled, bool)
    assert _core.fallback is _fallback
    assert (_core.kernels is _fallback) is (not _core.compiled)
    for part in ("handles", "fusion", "trace"):
        twin = getattr(_core, "fallback_" + part)
        assert (getattr(_core, part) is twin) is (not _core.compiled)
    for name in (
        "assemble_csr",
        "circulant_combine",
        "csr_combine",
        "csr_combine_rows",
        "weighted_combine",
    ):
        assert getattr(_core, name) is getattr(_core.kernels, name)
    for name in (
        "Handle",
        "HandleTable",
        "pack",
        "combine_rows",
        "FusionQueue",
        "FusedBatch",
        "layout_fingerprint",
    ):
        assert getattr(_core, name) is getattr(_core.dispatch, name)


def test_falls_back_without_extension():
    code = (
        "import sys; sys.modules['fogsim._core._kernels'] = None\n"
        "import fogsim._core as c\n"
        "assert c.compiled is False and c.kernels is c.fallback\n"
        "assert c.csr_combine is c.fallback.csr_combine\n"
    )
    _jobs.python("-c", code, timeout=60).check()
