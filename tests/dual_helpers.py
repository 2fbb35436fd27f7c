"""Helpers of the op test bodies in dual_cases.py and dual_cases_machines.py."""

from __future__ import annotations

import numpy as np


def _same(got, want, exact=False, rtol=1e-12):
    if isinstance(got, list):  # ragged results in simulation
        assert isinstance(want, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, exact, rtol)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact:
        assert np.array_equal(got, want), np.max(np.abs(got - want))
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def _raises_everywhere(exc_type, match, fn, *args, **kwargs):
    """Call ``fn``: it must raise ``exc_type`` with ``match`` (or each part of a tuple) in it."""
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        for part in match if isinstance(match, tuple) else (match,):
            assert part in str(exc), f"{part!r} not in {str(exc)!r}"
        return str(exc)
    raise AssertionError(f"{fn.__name__} did not raise {exc_type.__name__}")


def _data(n, shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


def _is_mpi() -> bool:
    from fogsim import _context

    return _context.current().backend.name == "mpi"
