"""Tests of fogsim._core: compiled kernels, numpy fallback and a float64 reference agree.

The compiled and fallback kernels must agree bit for bit (``np.array_equal``); both must match
``W @ x`` computed in float64 to rounding. Tests that need the extension are skipped with a
reason when it is not built.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from fogsim import _core
from fogsim._core import _fallback

BUILD_HINT = "fogsim._core._kernels is not built (run: python setup.py build_ext --inplace)"
DTYPES = [np.float32, np.float64]
# Relative to |W| @ |x|; float32 sums of up to ~12 rounded products stay far below 1e-5.
TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-13}


@pytest.fixture
def compiled():
    return pytest.importorskip("fogsim._core._kernels", reason=BUILD_HINT)


@pytest.fixture(params=["fallback", "compiled"])
def impl(request):
    if request.param == "fallback":
        return _fallback
    return pytest.importorskip("fogsim._core._kernels", reason=BUILD_HINT)


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


def test_float32_weights_are_cast_first(impl):
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    ys = x[::-1].copy()[None, :]
    out = impl.weighted_combine(np.empty_like(x), 0.1, x, np.array([0.7]), ys)
    expected = np.float32(0.1) * x
    expected = expected + np.float32(0.7) * ys[0]
    assert np.array_equal(out, expected)


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


# --- argument validation ---------------------------------------------------------------------


def wc_args(**kw):
    args = dict(
        out=np.zeros(4), self_weight=0.5, x=np.ones(4), weights=np.ones(2), ys=np.ones((2, 4))
    )
    args.update(kw)
    return "weighted_combine", args


def csr_args(**kw):
    n = 6
    ring = circulant_matrix(np.array([1, 5]), np.full(2, 1 / 3), np.array(1 / 3), n)
    indptr, indices, data_, _ = to_csr(ring)
    args = dict(
        indptr=indptr,
        indices=indices,
        data=data_,
        self_weight=np.full(n, 1 / 3),
        x=np.ones((n, 2)),
        out=np.zeros((n, 2)),
    )
    args.update(kw)
    return "csr_combine", args


def circ_args(**kw):
    args = dict(
        offsets=np.array([1, 5]),
        weights=np.full(2, 1 / 3),
        self_weight=np.array(1 / 3),
        x=np.ones((6, 2)),
        out=np.zeros((6, 2)),
    )
    args.update(kw)
    return "circulant_combine", args


def asm_args(**kw):
    args = dict(n=8, rows=[{(i + 1) % 8: 0.5} for i in range(8)])
    args.update(kw)
    return "assemble_csr", args


def readonly(a):
    a.flags.writeable = False
    return a


_buf = np.zeros(9)
_rows = [{(i + 1) % 8: 0.5} for i in range(8)]
ERRORS = {
    "wc x dtype": (wc_args(x=np.ones(4, np.int64)), TypeError, "x must have dtype float32 or"),
    "wc x list": (wc_args(x=[1.0] * 4), TypeError, "x must be a numpy.ndarray"),
    "wc out dtype": (wc_args(out=np.zeros(4, np.float32)), TypeError, "out must have dtype"),
    "wc ys dtype": (wc_args(ys=np.ones((2, 4), np.float32)), TypeError, "ys must have dtype"),
    "wc weights dtype": (wc_args(weights=np.ones(2, np.float32)), TypeError, "weights must"),
    "wc ys shape": (wc_args(ys=np.ones((3, 4))), ValueError, r"ys must have shape \(2, 4\)"),
    "wc out shape": (wc_args(out=np.zeros(5)), ValueError, "out must have shape"),
    "wc x ndim": (wc_args(x=np.ones((4, 1))), ValueError, "x must be 1-D"),
    "wc x strided": (wc_args(x=np.ones(8)[::2]), ValueError, "x must be C-contiguous"),
    "wc out readonly": (wc_args(out=readonly(np.zeros(4))), ValueError, "out is read-only"),
    "wc sw nan": (wc_args(self_weight=float("nan")), ValueError, "self_weight must be finite"),
    "wc sw str": (wc_args(self_weight="1"), TypeError, "self_weight must be a real number"),
    "wc sw bool": (wc_args(self_weight=True), TypeError, "self_weight must be a real number"),
    "wc weight inf": (
        wc_args(weights=np.array([1.0, np.inf])),
        ValueError,
        r"weights\[1\] must be finite",
    ),
    "wc out in ys": (
        wc_args(out=_buf[:4], ys=_buf[1:9].reshape(2, 4)),
        ValueError,
        "out must not share",
    ),
    "wc out overlaps x": (wc_args(out=_buf[:4], x=_buf[1:5]), ValueError, "out must be x"),
    "csr x dtype": (csr_args(x=np.ones((6, 2), np.float16)), TypeError, "x must have dtype"),
    "csr x ndim": (csr_args(x=np.ones(6), out=np.zeros(6)), ValueError, "x must be 2-D"),
    "csr indptr dtype": (
        csr_args(indptr=np.arange(0, 13, 2, dtype=np.int32)),
        TypeError,
        "indptr must have",
    ),
    "csr indices dtype": (
        csr_args(indices=np.zeros(12, np.int64)),
        TypeError,
        "indices must have dtype int32",
    ),
    "csr data dtype": (csr_args(data=np.ones(12, np.float32)), TypeError, "data must have"),
    "csr indptr shape": (
        csr_args(indptr=np.arange(0, 15, 2, dtype=np.int64)),
        ValueError,
        "indptr must have",
    ),
    "csr data shape": (csr_args(data=np.ones(11)), ValueError, r"data must have shape \(12,\)"),
    "csr sw shape": (csr_args(self_weight=np.ones(5)), ValueError, "self_weight must have"),
    "csr index high": (
        csr_args(indices=np.full(12, 6, np.int32)),
        ValueError,
        r"indices\[0\] = 6 is out of range for 6 agents",
    ),
    "csr index negative": (
        csr_args(indices=np.array([1] * 11 + [-1], np.int32)),
        ValueError,
        r"indices\[11\] = -1",
    ),
    "csr indptr start": (
        csr_args(indptr=np.array([1, 2, 4, 6, 8, 10, 12])),
        ValueError,
        r"indptr\[0\] must be 0",
    ),
    "csr indptr down": (
        csr_args(indptr=np.array([0, 4, 2, 6, 8, 10, 12])),
        ValueError,
        "non-decreasing",
    ),
    "csr indptr end": (
        csr_args(indptr=np.array([0, 2, 4, 6, 8, 10, 11])),
        ValueError,
        r"indptr\[6\] must equal len\(indices\) = 12",
    ),
    "csr out is x": (
        csr_args(out=_buf[:6].reshape(6, 1), x=_buf[:6].reshape(6, 1)),
        ValueError,
        "out must not share memory with x",
    ),
    "circ offsets dtype": (circ_args(offsets=np.array([1, 5], np.int32)), TypeError, "offsets"),
    "circ offset zero": (
        circ_args(offsets=np.array([0, 5])),
        ValueError,
        r"offsets\[0\] = 0 is out of range",
    ),
    "circ offset n": (circ_args(offsets=np.array([1, 6])), ValueError, r"offsets\[1\] = 6"),
    "circ offsets order": (circ_args(offsets=np.array([5, 1])), ValueError, "strictly ascending"),
    "circ offsets dup": (circ_args(offsets=np.array([2, 2])), ValueError, "strictly ascending"),
    "circ weights shape": (circ_args(weights=np.ones(3)), ValueError, "weights must have shape"),
    "circ weights rows": (circ_args(weights=np.ones((2, 5))), ValueError, "weights must have"),
    "circ weight nan": (
        circ_args(weights=np.array([np.nan, 1.0])),
        ValueError,
        r"weights\[0\] must be finite",
    ),
    "circ sw inf": (circ_args(self_weight=np.array(np.inf)), ValueError, "self_weight must be"),
    "circ sw shape": (circ_args(self_weight=np.ones(2)), ValueError, "self_weight must have"),
    "circ sw float": (circ_args(self_weight=0.5), TypeError, "self_weight must be a numpy"),
    "circ out is x": (
        circ_args(out=_buf[:6].reshape(6, 1), x=_buf[:6].reshape(6, 1)),
        ValueError,
        "out must not share memory with x",
    ),
    "asm len": (asm_args(rows=_rows[:7]), ValueError, "src_weights has 7 items, expected 8"),
    "asm rows type": (asm_args(rows=5), TypeError, "src_weights must be a sequence"),
    "asm n type": (asm_args(n=8.0), TypeError, "n must be an integer"),
    "asm n negative": (asm_args(n=-1, rows=[]), ValueError, "n must be non-negative"),
    "asm item type": (
        asm_args(rows=[*_rows[:2], "abc", *_rows[3:]]),
        TypeError,
        r"src_weights\[2\] must be",
    ),
    "asm item 2-D": (
        asm_args(rows=[np.ones((1, 1), int), *_rows[1:]]),
        TypeError,
        r"src_weights\[0\] must",
    ),
    "asm key str": (
        asm_args(rows=[{"1": 0.5}, *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: rank '1' is not",
    ),
    "asm key bool": (asm_args(rows=[[True], *_rows[1:]]), TypeError, "is not an integer"),
    "asm key float": (asm_args(rows=[{1.0: 0.5}, *_rows[1:]]), TypeError, "is not an integer"),
    "asm rank high": (
        asm_args(rows=[*_rows[:3], {9: 0.5}, *_rows[4:]]),
        ValueError,
        r"^src_weights\[3\]: rank 9 is out of range for 8 agents$",
    ),
    "asm rank negative": (asm_args(rows=[[-1], *_rows[1:]]), ValueError, "rank -1 is out of"),
    "asm rank huge": (asm_args(rows=[[2**70], *_rows[1:]]), ValueError, "is out of range"),
    "asm weight str": (asm_args(rows=[{1: "a"}, *_rows[1:]]), TypeError, "not a real number"),
    "asm weight bool": (asm_args(rows=[{1: True}, *_rows[1:]]), TypeError, "not a real number"),
    "asm weight complex": (asm_args(rows=[{1: 1j}, *_rows[1:]]), TypeError, "not a real"),
    "asm weight nan": (
        asm_args(rows=[{1: float("nan")}, *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: weight nan for rank 1 is not finite",
    ),
    "asm weight inf": (asm_args(rows=[{1: np.inf}, *_rows[1:]]), ValueError, "not finite"),
    "asm duplicate": (
        asm_args(rows=[[3, 1, 3], *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: rank 3 appears more than once",
    ),
    "asm own rank": (
        asm_args(rows=[*_rows[:3], {3: 0.5}, *_rows[4:]]),
        ValueError,
        r"^src_weights\[3\] contains agent 3's own rank; give it as self_weight$",
    ),
    "asm argname": (
        asm_args(rows=[[9], *_rows[1:]], argname="dst_weights"),
        ValueError,
        r"^dst_weights\[0\]: rank 9",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(impl, case):
    (name, kwargs), exc, match = ERRORS[case]
    with pytest.raises(exc, match=match):
        getattr(impl, name)(**kwargs)


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_agree(compiled, case):
    (name, kwargs), _, _ = ERRORS[case]
    raised = []
    for module in (compiled, _fallback):
        with pytest.raises((TypeError, ValueError)) as info:
            getattr(module, name)(**kwargs)
        raised.append((type(info.value), str(info.value)))
    assert raised[0] == raised[1]


def test_assemble_csr_allow_self(impl):
    indptr, indices, data_ = impl.assemble_csr(2, [{0: 0.5, 1: 0.5}, [1]], allow_self=True)
    assert indptr.tolist() == [0, 2, 3] and indices.tolist() == [0, 1, 1]


# --- the package -----------------------------------------------------------------------------


def test_public_namespace():
    assert sorted(_core.__all__) == [
        "assemble_csr",
        "circulant_combine",
        "compiled",
        "csr_combine",
        "fallback",
        "kernels",
        "weighted_combine",
    ]
    assert isinstance(_core.compiled, bool)
    assert _core.fallback is _fallback
    assert (_core.kernels is _fallback) is (not _core.compiled)
    for name in ("assemble_csr", "circulant_combine", "csr_combine", "weighted_combine"):
        assert getattr(_core, name) is getattr(_core.kernels, name)


def test_falls_back_without_extension():
    code = (
        "import sys; sys.modules['fogsim._core._kernels'] = None\n"
        "import fogsim._core as c\n"
        "assert c.compiled is False and c.kernels is c.fallback\n"
        "assert c.csr_combine is c.fallback.csr_combine\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
