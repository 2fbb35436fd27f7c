"""Every ``>>>`` example in fogsim's docstrings runs and prints what it shows.

The modules are found by their source (a ``>>>`` in the file), so a new example is run
without listing it here, and modules without examples (mpi4py's, torch's) are not imported.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import fogsim

PACKAGE = Path(fogsim.__file__).resolve().parent


def modules_with_examples() -> list[str]:
    """Return the dotted names of fogsim's modules whose source holds a ``>>>`` example."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" not in path.read_text(encoding="utf-8"):
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def test_some_modules_have_examples() -> None:
    assert "fogsim" in modules_with_examples()


@pytest.mark.parametrize("module_name", modules_with_examples())
def test_docstring_examples_run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, module_name) if t.examples]
    assert tests, f"{module_name} has '>>>' in its source but no example doctest finds"
    try:
        for test in tests:
            runner.run(test)
    finally:
        if fogsim.is_initialized():  # an example that failed before its fs.shutdown()
            fogsim.shutdown()
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed"
    assert result.attempted > 0
