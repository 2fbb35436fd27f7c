"""Suite-wide rules (CI=true: no silent fall-back, no skip but for missing hardware) and the
fixtures of the tests of fogsim._core."""

from __future__ import annotations

import importlib

import pytest

from fogsim._core import _fallback, _fallback_fusion, _fallback_handles

from . import environment


def pytest_sessionstart(session):
    """Under CI=true, refuse to run a suite that would test less than it claims."""
    if environment.in_ci():
        problems = environment.ci_problems()
        if problems:
            lines = "\n".join(f"  - {p}" for p in problems)
            pytest.exit(f"CI=true, but the suite cannot run in full:\n{lines}", returncode=1)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_forbidden_skip(report) -> None:
    reason = _skip_reason(report)
    if reason.startswith(environment.NEEDS_HARDWARE):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true, where only skips for missing hardware are allowed "
        f"(reasons starting {environment.NEEDS_HARDWARE!r}): {reason}"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and environment.in_ci() and not hasattr(report, "wasxfail"):
        _fail_forbidden_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and environment.in_ci():
        _fail_forbidden_skip(report)


def _compiled_module(name: str):
    environment.require_compiled()
    return importlib.import_module(f"fogsim._core.{name}")


@pytest.fixture
def compiled():
    """The compiled kernels (skipped with a reason, or failed under CI, when not built)."""
    return _compiled_module("_kernels")


@pytest.fixture(params=["fallback", "compiled"])
def impl(request):
    """Each implementation of the kernels in turn."""
    if request.param == "fallback":
        return _fallback
    return _compiled_module("_kernels")


@pytest.fixture(params=["fallback", "compiled"])
def handles(request):
    """Each implementation of the handles module (Handle, HandleTable) in turn."""
    if request.param == "fallback":
        return _fallback_handles
    return _compiled_module("_handles")


@pytest.fixture
def fusion(handles):
    """The fusion module (pack, combine_rows, FusionQueue) of ``handles``' implementation."""
    if handles is _fallback_handles:
        return _fallback_fusion
    return _compiled_module("_fusion")
