"""``bluefog.common.util`` on fogsim: BlueFog's helper functions, fogsim's answers.

``env`` sets environment variables for a ``with`` block, as BlueFog's does (its tests
start the timeline with ``with env(BLUEFOG_TIMELINE=prefix): bf.init()``). The extension
checks answer for fogsim, which builds no BlueFog extension of its own:
``check_extension`` never raises, ``extension_available("torch")`` and ``mpi_built()``
say whether torch and mpi4py can be imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sysconfig
from collections.abc import Iterator

__all__ = [
    "EXTENSIONS",
    "check_extension",
    "env",
    "extension_available",
    "get_ext_suffix",
    "get_extension_full_path",
    "mpi_built",
]

#: The framework layers BlueFog builds extensions for; fogsim's BlueFog layer is torch's.
EXTENSIONS = ["tensorflow", "torch"]


@contextlib.contextmanager
def env(**variables: str | None) -> Iterator[None]:
    """Set the environment ``variables`` for the ``with`` block, then restore them.

    A variable given as None is left alone. Each variable gets back its old value after
    the block, or is removed if it was unset, also when the block raises. Values must be
    strings (``TypeError`` otherwise, before anything changes).
    """
    given = {name: value for name, value in variables.items() if value is not None}
    for name, value in given.items():
        if not isinstance(value, str):
            raise TypeError(f"env: {name} must be a str (or None), got {type(value).__name__}")
    saved = {name: os.environ.get(name) for name in given}
    try:
        os.environ.update(given)  # (this helper exists to write the environment)
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def get_ext_suffix() -> str:
    """The file suffix of compiled Python extensions here (e.g. ``.cpython-311-...so``)."""
    return sysconfig.get_config_var("EXT_SUFFIX") or sysconfig.get_config_var("SO") or ".so"


def get_extension_full_path(pkg_path: str, *args: str) -> str:
    """Where BlueFog would put extension ``args[-1]`` under the folder of ``pkg_path``."""
    if not args:
        raise TypeError("get_extension_full_path needs at least one path part after pkg_path")
    folder = os.path.join(os.path.dirname(pkg_path), *args[:-1])
    return os.path.join(folder, args[-1] + get_ext_suffix())


def check_extension(ext_name: str, pkg_path: str, *args: str) -> None:
    """BlueFog raises ImportError when its extension was not built; fogsim builds none,
    so this never raises (a no-op)."""


def extension_available(ext_base_name: str, verbose: bool = False) -> bool:
    """Whether fogsim's BlueFog layer for ``ext_base_name`` works here: ``"torch"`` when
    torch can be imported; False for anything else (fogsim has no tensorflow layer)."""
    available = ext_base_name == "torch" and importlib.util.find_spec("torch") is not None
    if verbose:
        print(f"Extension {ext_base_name} {'was' if available else 'was NOT'} built.")
    return available


def mpi_built(verbose: bool = False) -> bool:
    """Whether fogsim can run over MPI here (mpi4py can be imported)."""
    built = importlib.util.find_spec("mpi4py") is not None
    if verbose:
        print(f"fogsim {'can' if built else 'cannot'} run over MPI (mpi4py).")
    return built
