"""Every public name of every public module has an entry in the API reference (docs/api/).

A public module is one under ``fogsim`` with no ``_``-prefixed part in its name. A name of
its ``__all__`` counts as documented when a page of docs/api/ lists an object of that name
that is the same object (so ``fogsim.topology.builders.ring_graph`` is documented by the
entry ``fogsim.topology.ring_graph``): an ``autosummary`` entry under a ``currentmodule``,
a ``py:class``/``py:data`` directive, or, for a module, an ``automodule``. A new public name
without an entry fails here, before the site is built.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
from pathlib import Path

import pytest

import fogsim

API = Path(__file__).resolve().parents[1] / "docs" / "api"

_DIRECTIVE = re.compile(r"^\.\. (currentmodule|automodule|module|py:class|py:data)::\s*(\S+)")
_ENTRY = re.compile(r"^   ([A-Za-z_]\w*)$")


def public_modules() -> list[str]:
    """Return the public modules of fogsim (``fogsim`` included), imported or not."""
    names = ["fogsim"]
    for info in pkgutil.walk_packages(fogsim.__path__, "fogsim."):
        parts = info.name.split(".")[1:]
        if not any(p.startswith("_") for p in parts):
            names.append(info.name)
    return names


def documented() -> tuple[set[str], set[str]]:
    """Return the full names of the objects and the modules that docs/api/ documents."""
    objects: set[str] = set()
    modules: set[str] = set()
    for page in sorted(API.glob("*.rst")):
        module = ""
        in_autosummary = False
        for line in page.read_text().splitlines():
            directive = _DIRECTIVE.match(line)
            if directive:
                kind, name = directive.groups()
                in_autosummary = False
                if kind in ("currentmodule", "automodule", "module"):
                    module = name
                    if kind != "currentmodule":
                        modules.add(name)
                else:
                    objects.add(f"{module}.{name}")
                continue
            if line.startswith(".. autosummary::"):
                in_autosummary = True
                continue
            if line.startswith(".. ") or (line and not line.startswith(" ")):
                in_autosummary = False
            entry = _ENTRY.match(line)
            if in_autosummary and entry:
                objects.add(f"{module}.{entry.group(1)}")
    return objects, modules


def _resolve(full_name: str) -> object:
    module, _, name = full_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_api_pages_exist() -> None:
    objects, modules = documented()
    assert "fogsim" in modules and len(objects) > 100


@pytest.mark.parametrize("module_name", public_modules())
def test_every_public_name_is_documented(module_name: str) -> None:
    module = importlib.import_module(module_name)
    objects, modules = documented()
    by_name: dict[str, list[str]] = {}
    for full in objects:
        by_name.setdefault(full.rpartition(".")[2], []).append(full)
    missing = []
    for name in getattr(module, "__all__", []):
        try:
            value = getattr(module, name)
        except AttributeError:  # a submodule that __all__ names (``import *`` imports it)
            value = importlib.import_module(f"{module_name}.{name}")
        if isinstance(value, types.ModuleType):
            if value.__name__ not in modules:
                missing.append(name)
            continue
        if not any(_resolve(full) is value for full in by_name.get(name, [])):
            missing.append(name)
    assert not missing, f"{module_name}: no entry in docs/api/ for {missing}"


def test_every_entry_exists() -> None:
    """An entry for a name that no longer exists fails here too, not only in the build."""
    objects, modules = documented()
    for module in modules:
        importlib.import_module(module)
    for full in objects:
        _resolve(full)
