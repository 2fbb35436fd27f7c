"""``csr_combine_rows``: rows ``[start, stop)`` of ``csr_combine``, bit for bit, the rest of
``out`` untouched, in the compiled kernel and its numpy twin; both refuse bad ranges alike."""

import numpy as np
import pytest

from fogsim._core import _fallback
from tests.test_core_kernels import (
    CSR_SHAPES,
    CSR_STREAM_SHAPES,
    DTYPES,
    circulant_matrix,
    data,
    random_matrix,
    to_csr,
)

SENTINEL = 12345.0


def ranges(n):
    """Empty, single-row, head, tail, middle and whole row ranges of n rows."""
    cuts = {(0, 0), (0, n), (n, n), (0, n // 2), (n // 2, n), (n // 3, 2 * n // 3)}
    if n:
        cuts |= {(n - 1, n), (0, 1)}
    return sorted(cuts)


def check_rows(kernels, W, x, start, stop):
    csr = to_csr(W)
    whole = _fallback.csr_combine(*csr, x, np.empty_like(x))
    out = np.full_like(x, SENTINEL)
    assert kernels.csr_combine_rows(*csr, x, out, start, stop) is out
    np.testing.assert_array_equal(out[start:stop], whole[start:stop])
    assert (out[:start] == SENTINEL).all() and (out[stop:] == SENTINEL).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", [(0, 3), (4, 0), *CSR_SHAPES])
def test_rows_are_csr_combines_rows_bit_for_bit(impl, dtype, n, m):
    rng = np.random.default_rng(n * 1000 + m + 5)
    W = random_matrix(rng, n)
    x = data(rng, (n, m), dtype)
    for start, stop in ranges(n):
        check_rows(impl, W, x, start, stop)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,m", CSR_SHAPES[:3] + CSR_STREAM_SHAPES)
def test_streamed_rows_bit_for_bit(compiled, dtype, n, m):
    old = compiled._set_stream_min_bytes(0)
    try:
        rng = np.random.default_rng(n * 1000 + m + 6)
        W = random_matrix(rng, n)
        x = data(rng, (n, m), dtype)
        for start, stop in ranges(n):
            check_rows(compiled, W, x, start, stop)
    finally:
        compiled._set_stream_min_bytes(old)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ranges_in_any_order_assemble_the_whole(impl, dtype):
    rng = np.random.default_rng(9)
    n, m = 300, 4
    W = random_matrix(rng, n)
    x = data(rng, (n, m), dtype)
    csr = to_csr(W)
    out = np.empty_like(x)
    for start, stop in [(120, 300), (0, 7), (7, 120)]:
        impl.csr_combine_rows(*csr, x, out, start, stop)
    np.testing.assert_array_equal(out, _fallback.csr_combine(*csr, x, np.empty_like(x)))


def test_only_the_rows_entries_are_read(impl):
    # Entries of rows outside the range may be anything: a caller does a matrix in parts.
    rng = np.random.default_rng(10)
    n = 12
    indptr, indices, data_, sw = to_csr(random_matrix(rng, n, empty=0.0))
    x = rng.standard_normal((n, 2))
    whole = _fallback.csr_combine(indptr, indices, data_, sw, x, np.empty_like(x))
    broken = indices.copy()
    broken[indptr[8] :] = n + 5
    out = np.zeros_like(x)
    impl.csr_combine_rows(indptr, broken, data_, sw, x, out, 2, 8)
    np.testing.assert_array_equal(out[2:8], whole[2:8])
    with pytest.raises(ValueError, match=rf"indices\[{indptr[8]}\] = {n + 5} is out of range"):
        impl.csr_combine_rows(indptr, broken, data_, sw, x, out, 2, 9)


def rows_args(start, stop, **kw):
    n = 6  # a ring: 12 entries
    ring = circulant_matrix(np.array([1, 5]), np.full(2, 1 / 3), np.array(1 / 3), n)
    indptr, indices, data_, sw = to_csr(ring)
    args = dict(
        indptr=indptr,
        indices=indices,
        data=data_,
        self_weight=sw,
        x=np.ones((n, 2)),
        out=np.zeros((n, 2)),
        start=start,
        stop=stop,
    )
    args.update(kw)
    return args


ERRORS = {
    "start float": (rows_args(1.0, 3), TypeError, "start must be an integer, got float"),
    "stop bool": (rows_args(0, True), TypeError, "stop must be an integer, got bool"),
    "stop str": (rows_args(0, "3"), TypeError, "stop must be an integer, got str"),
    "start negative": (rows_args(-1, 3), ValueError, r"rows \[start, stop\) = \[-1, 3\)"),
    "stop past n": (rows_args(0, 7), ValueError, r"\[0, 7\) are not a range of the 6 rows"),
    "stop < start": (rows_args(4, 3), ValueError, "0 <= start <= stop <= n is required"),
    "x dtype": (
        rows_args(0, 3, x=np.ones((6, 2), np.float16)),
        TypeError,
        "x must have dtype",
    ),
    "indptr down": (
        rows_args(0, 3, indptr=np.array([0, 4, 2, 6, 8, 10, 12])),
        ValueError,
        r"indptr\[2\] = 2 < indptr\[1\] = 4",
    ),
    "indptr past nnz": (
        rows_args(0, 2, indptr=np.array([0, 2, 99, 6, 8, 10, 12])),
        ValueError,
        r"indptr\[2\] = 99 exceeds len\(indices\) = 12",
    ),
    "indptr negative": (
        rows_args(1, 3, indptr=np.array([0, -2, 4, 6, 8, 10, 12])),
        ValueError,
        r"indptr\[1\] must not be negative",
    ),
    "indptr end": (
        rows_args(0, 3, indptr=np.array([0, 2, 4, 6, 8, 10, 11])),
        ValueError,
        r"indptr\[6\] must equal len\(indices\) = 12",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(impl, case):
    kwargs, exc, match = ERRORS[case]
    with pytest.raises(exc, match=match):
        impl.csr_combine_rows(**kwargs)


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_agree(compiled, case):
    kwargs, exc, match = ERRORS[case]
    raised = []
    for module in (compiled, _fallback):
        with pytest.raises(exc, match=match) as info:
            module.csr_combine_rows(**kwargs)
        raised.append((type(info.value), str(info.value)))
    assert raised[0] == raised[1]
