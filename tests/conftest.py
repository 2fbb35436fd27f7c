"""Fixtures shared by the tests of fogsim._core."""

import pytest

from fogsim._core import _fallback, _fallback_dispatch

BUILD_HINT = "fogsim._core._kernels is not built (run: python setup.py build_ext --inplace)"


@pytest.fixture
def compiled():
    """The compiled kernels (skipped with a reason when the extension is not built)."""
    return pytest.importorskip("fogsim._core._kernels", reason=BUILD_HINT)


@pytest.fixture(params=["fallback", "compiled"])
def impl(request):
    """Each implementation of the kernels in turn."""
    if request.param == "fallback":
        return _fallback
    return pytest.importorskip("fogsim._core._kernels", reason=BUILD_HINT)


@pytest.fixture(params=["fallback", "compiled"])
def dispatch(request):
    """Each implementation of the dispatch module (handles, pack, combine_rows) in turn."""
    if request.param == "fallback":
        return _fallback_dispatch
    return pytest.importorskip("fogsim._core._dispatch", reason=BUILD_HINT)
