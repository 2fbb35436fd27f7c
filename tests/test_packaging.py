"""The package metadata and the code agree: one version number, the declared license shipped."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

import pytest

import fogsim

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_distributions():
    assert fogsim.__version__ == importlib.metadata.version("fogsim")
    assert "__version__" in fogsim.__all__
    assert "__version__" in dir(fogsim)


def test_pyproject_reads_the_version_from_the_package():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert getattr(importlib.import_module(module), name) == fogsim.__version__


def test_license_file_is_the_declared_license():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    for name in project["license-files"]:
        text = (ROOT / name).read_text()
        assert "Apache License" in text and "Version 2.0, January 2004" in text
