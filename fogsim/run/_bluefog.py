"""Make ``import bluefog.torch as bf`` run on fogsim: module aliases in ``sys.modules``.

:func:`install` registers fogsim's BlueFog layer under BlueFog's module names, so existing
code runs without an edit:

=================================  ===========================================
BlueFog module                     fogsim module
=================================  ===========================================
``bluefog``                        a package module holding the two below
``bluefog.torch``                  :mod:`fogsim.compat.bluefog.torch`
``bluefog.common``                 :mod:`fogsim.compat.bluefog.common`
``bluefog.common.topology_util``   :mod:`fogsim.compat.bluefog.topology_util`
``bluefog.common.util``            :mod:`fogsim.compat.bluefog.common.util` (``env`` ...)
``bluefog.torch.topology_util``    :mod:`fogsim.compat.bluefog.topology_util`
=================================  ===========================================

A real BlueFog that Python can import is never shadowed unless ``force=True``. What runs a
program under BlueFog's names calls :func:`install` before the program's first line: the
ranks' bootstrap of ``fogrun --bluefog`` (which sets ``FOGSIM_BLUEFOG=1``), the runners of
``fogrun --spmd`` and ``--check-modes``, and ``python -m fogsim.compat.bluefog script.py``;
:mod:`fogsim.compat.bluefog` offers :func:`install` and :func:`uninstall` to its users. The
layer's modules are named here, not imported: installing the aliases imports them, as the
backend registry imports a backend on first use.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["install", "install_from_environ", "installed", "uninstall"]

#: BlueFog's module names and the fogsim modules they stand for.
ALIASES = {
    "bluefog.torch": "fogsim.compat.bluefog.torch",
    "bluefog.common": "fogsim.compat.bluefog.common",
    "bluefog.common.topology_util": "fogsim.compat.bluefog.topology_util",
    "bluefog.common.util": "fogsim.compat.bluefog.common.util",
    "bluefog.torch.topology_util": "fogsim.compat.bluefog.topology_util",
}
_MARK = "__fogsim_alias__"


def installed() -> bool:
    """Whether ``bluefog`` in ``sys.modules`` is fogsim's alias."""
    return getattr(sys.modules.get("bluefog"), _MARK, False)


def _real_bluefog() -> str | None:
    """Where a real BlueFog installation is, or None."""
    if "bluefog" in sys.modules and not installed():
        return getattr(sys.modules["bluefog"], "__file__", None) or "an imported module"
    try:
        spec = importlib.util.find_spec("bluefog")
    except (ImportError, ValueError):
        return None
    return None if spec is None else (spec.origin or "a namespace package")


def install(force: bool = False) -> None:
    """Register fogsim's BlueFog layer as the modules ``bluefog``, ``bluefog.torch``,
    ``bluefog.common`` and ``bluefog.common.topology_util``.

    Idempotent. Raises ``ImportError`` when a real BlueFog is importable (its location
    named), unless ``force`` is true, which then hides it for this process.

    Also a deliberate shim for BlueFog-era code: networkx 3 removed
    ``networkx.to_numpy_matrix``, which BlueFog's own tests call; when it is missing,
    install adds it as ``numpy.asmatrix(networkx.to_numpy_array(G, ...))`` with the same
    keyword arguments.
    """
    _add_to_numpy_matrix()
    if installed():
        return
    real = _real_bluefog()
    if real is not None and not force:
        raise ImportError(
            f"a real BlueFog is installed ({real}); fogsim does not shadow it. Use "
            "install(force=True) (fogrun --bluefog with FOGSIM_BLUEFOG=force) to run the "
            "script on fogsim anyway"
        )
    for name in [m for m in sys.modules if m == "bluefog" or m.startswith("bluefog.")]:
        del sys.modules[name]  # a real BlueFog imported before: hidden from now on
    package = types.ModuleType("bluefog", "BlueFog's API on fogsim (fogsim.compat.bluefog).")
    package.__path__ = []  # a package: "import bluefog.x" looks in sys.modules first
    package.__spec__ = importlib.machinery.ModuleSpec("bluefog", None, is_package=True)
    package.__dict__["__version__"] = "0.3.0"  # ModuleType declares no __version__ to set
    setattr(package, _MARK, True)
    sys.modules["bluefog"] = package
    for alias, target in ALIASES.items():
        module = importlib.import_module(target)
        sys.modules[alias] = module
        parent, _, child = alias.rpartition(".")
        setattr(sys.modules[parent], child, module)


def _add_to_numpy_matrix() -> None:
    """Give networkx back ``to_numpy_matrix`` (removed in networkx 3), only if missing."""
    import networkx as nx
    import numpy as np

    if hasattr(nx, "to_numpy_matrix"):
        return

    def to_numpy_matrix(G: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N803 - nx's name
        """networkx 2's ``to_numpy_matrix``: ``numpy.asmatrix(to_numpy_array(G, ...))``."""
        return np.asmatrix(nx.to_numpy_array(G, *args, **kwargs))

    nx.to_numpy_matrix = to_numpy_matrix


def uninstall() -> None:
    """Remove the aliases :func:`install` registered (nothing else)."""
    if not installed():
        return
    for name in ["bluefog", *ALIASES]:
        sys.modules.pop(name, None)


def install_from_environ(environ: Mapping[str, str] | None = None) -> None:
    """:func:`install` when ``FOGSIM_BLUEFOG`` is ``1`` (or ``force``), as fogrun sets it."""
    from .. import _settings

    value = (_settings.environ() if environ is None else environ).get("FOGSIM_BLUEFOG", "")
    value = value.strip()
    if value.lower() in ("", "0", "false", "no", "off"):
        return
    install(force=value.lower() == "force")
