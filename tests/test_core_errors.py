"""Argument validation of fogsim._core: both implementations refuse bad input alike."""

import numpy as np
import pytest

from fogsim._core import _fallback
from tests.test_core_kernels import circulant_matrix, to_csr

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
    "wc weights dtype": (
        wc_args(weights=np.ones(2, np.float32)),
        TypeError,
        "weights must have dtype float64",
    ),
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
        r"indptr must be non-decreasing, but indptr\[2\] = 2 < indptr\[1\] = 4",
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
    "circ offsets dtype": (
        circ_args(offsets=np.array([1, 5], np.int32)),
        TypeError,
        "offsets must have dtype int64",
    ),
    "circ offset zero": (
        circ_args(offsets=np.array([0, 5])),
        ValueError,
        r"offsets\[0\] = 0 is out of range",
    ),
    "circ offset n": (circ_args(offsets=np.array([1, 6])), ValueError, r"offsets\[1\] = 6"),
    "circ offsets order": (
        circ_args(offsets=np.array([5, 1])),
        ValueError,
        "offsets must be strictly ascending",
    ),
    "circ offsets dup": (
        circ_args(offsets=np.array([2, 2])),
        ValueError,
        "offsets must be strictly ascending",
    ),
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
    "asm key bool": (
        asm_args(rows=[[True], *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: rank True is not an integer",
    ),
    "asm key float": (
        asm_args(rows=[{1.0: 0.5}, *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: rank 1.0 is not an integer",
    ),
    "asm rank high": (
        asm_args(rows=[*_rows[:3], {9: 0.5}, *_rows[4:]]),
        ValueError,
        r"^src_weights\[3\]: rank 9 is out of range for 8 agents$",
    ),
    "asm rank negative": (
        asm_args(rows=[[-1], *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: rank -1 is out of",
    ),
    "asm rank huge": (
        asm_args(rows=[[2**70], *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: rank \d+ is out of range",
    ),
    "asm weight str": (
        asm_args(rows=[{1: "a"}, *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: weight 'a' for rank 1 is not a real number",
    ),
    "asm weight bool": (
        asm_args(rows=[{1: True}, *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: weight True for rank 1 is not a real number",
    ),
    "asm weight complex": (
        asm_args(rows=[{1: 1j}, *_rows[1:]]),
        TypeError,
        r"src_weights\[0\]: weight 1j for rank 1 is not a real",
    ),
    "asm weight nan": (
        asm_args(rows=[{1: float("nan")}, *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: weight nan for rank 1 is not finite",
    ),
    "asm weight inf": (
        asm_args(rows=[{1: np.inf}, *_rows[1:]]),
        ValueError,
        r"src_weights\[0\]: weight inf for rank 1 is not finite",
    ),
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
    (name, kwargs), exc, match = ERRORS[case]
    raised = []
    for module in (compiled, _fallback):
        with pytest.raises(exc, match=match) as info:
            getattr(module, name)(**kwargs)
        raised.append((type(info.value), str(info.value)))
    assert raised[0] == raised[1]


def test_assemble_csr_allow_self(impl):
    indptr, indices, data_ = impl.assemble_csr(2, [{0: 0.5, 1: 0.5}, [1]], allow_self=True)
    assert indptr.tolist() == [0, 2, 3] and indices.tolist() == [0, 1, 1]
