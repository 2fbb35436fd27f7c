"""What the suite needs from this machine, and what a missing piece means.

Outside CI a missing piece skips the tests that need it, with the reason. With ``CI=true``
(as hosted CI services set it, and ``.ci/run``) nothing may silently fall back or skip: the
session refuses to start without the compiled extension or the venv's ``mpiexec``
(:func:`ci_problems`), and a skip whose reason is not in :data:`ALLOWED_UNDER_CI` (hardware
this machine lacks) fails the test instead (see ``conftest.py``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The shared documents beside the checkout (``../shared``); the seed listings live there.
SHARED = ROOT.parent / "shared"
SEEDS = SHARED / "seeds"
#: The MPI launcher of this venv (the ``mpich`` wheel puts it next to the interpreter).
MPIEXEC = Path(sys.executable).parent / "mpiexec"
COMPILED_MODULES = (
    "fogsim._core._kernels",
    "fogsim._core._handles",
    "fogsim._core._fusion",
    "fogsim._core._trace",
)
BUILD_HINT = "run: pip install -e . (or python setup.py build_ext --inplace)"

#: Skip reasons allowed under CI=true: each starts with this prefix and names the hardware.
NEEDS_HARDWARE = "needs hardware this machine lacks:"


def in_ci() -> bool:
    """True when ``CI`` is set to a true value (``true``, ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


def missing_compiled_modules() -> list[str]:
    """The compiled extension modules of ``fogsim._core`` that cannot be imported."""
    missing = []
    for name in COMPILED_MODULES:
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:
            spec = None
        if spec is None or not spec.origin or spec.origin.endswith(".py"):
            missing.append(name)
    return missing


def ci_problems() -> list[str]:
    """What stops the suite from being a full check on this machine (empty: nothing)."""
    problems = []
    missing = missing_compiled_modules()
    if missing:
        problems.append(
            f"the compiled extension is not built ({', '.join(missing)} missing; the "
            f"pure-Python twins would run instead): {BUILD_HINT}"
        )
    if not MPIEXEC.exists():
        problems.append(
            f"no mpiexec next to {sys.executable} (the MPI launcher of this venv; "
            "pip install 'fogsim[mpi]' installs the mpich wheel, which brings it)"
        )
    if importlib.util.find_spec("mpi4py") is None:
        problems.append("mpi4py is not installed (pip install 'fogsim[mpi]')")
    return problems


def require_mpiexec() -> None:
    """Skip the calling test (fail under CI) unless mpi4py and the venv's mpiexec exist."""
    if importlib.util.find_spec("mpi4py") is None:
        missing("mpi4py is not installed (pip install 'fogsim[mpi]')")
    if not MPIEXEC.exists():
        missing(f"no mpiexec next to {sys.executable} (pip install 'fogsim[mpi]')")


def require_compiled() -> None:
    """Skip the calling test (fail under CI) unless the compiled extension is built."""
    modules = missing_compiled_modules()
    if modules:
        missing(f"the compiled extension is not built ({', '.join(modules)}): {BUILD_HINT}")


def load_example(name: str):
    """Import ``examples/<name>.py`` as a module (the examples are scripts, not a package)."""
    path = ROOT / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"examples_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_hardware(what: str) -> str:
    """A skip reason for hardware this machine lacks (the only skips allowed under CI)."""
    return f"{NEEDS_HARDWARE} {what}"


def missing(reason: str) -> None:
    """Skip the calling test for ``reason``; under CI=true, fail it instead."""
    if in_ci():
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)
