"""The teaching notebooks run top to bottom, headless, and are saved stripped.

How long they take is measured by benchmarks/bench_notebooks.py, not here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))

#: Seconds one cell may run before it counts as hung (a guard, far above what a cell takes).
CELL_TIMEOUT = 600


def _ids(path: Path) -> str:
    return path.name


def test_the_lessons_are_there():
    names = {p.name for p in NOTEBOOKS}
    lessons = {
        "01_consensus.ipynb",
        "02_decentralized_optimization.ipynb",
        "03_push_sum_and_async.ipynb",
        "05_compiled_local_solvers.ipynb",
    }
    assert lessons <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_is_listed_in_readme(path):
    assert path.name in (NOTEBOOK_DIR / "README.md").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_is_saved_stripped(path):
    """Outputs stay out of git: no outputs, no execution counts (strip them with nbformat)."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code
    dirty = [i for i, c in enumerate(code) if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: code cells {dirty} have outputs or execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_executes(path, tmp_path):
    """Each runs from a copy of notebooks/ beside examples/, so what it writes stays out of git."""
    nbformat = pytest.importorskip("nbformat", reason="the notebooks extra is not installed")
    nbclient = pytest.importorskip("nbclient", reason="the notebooks extra is not installed")
    nb = nbformat.read(path, as_version=4)
    (tmp_path / "examples").symlink_to(NOTEBOOK_DIR.parent / "examples")
    workdir = tmp_path / "notebooks"
    workdir.mkdir()
    resources = {"metadata": {"path": str(workdir)}}  # run from the notebook's folder, as Jupyter
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources=resources
    )
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, [f"{e.ename}: {e.evalue}" for e in errors]
    if path.name == "04_fish_school.ipynb":  # its animation lands next to it
        assert (workdir / "fish_school.gif").is_file()


def _extra_requires(extras: dict[str, list[str]], name: str) -> set[str]:
    """The distributions an extra brings, following ``fogsim[...]`` to other extras."""
    names: set[str] = set()
    for requirement in extras[name]:
        dist = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        nested = re.match(r"fogsim\[(.*)\]", requirement)
        if nested:
            for other in nested.group(1).split(","):
                names |= _extra_requires(extras, other.strip())
        else:
            names.add(dist)
    return names


def test_readme_says_how_to_open_them_in_jupyter():
    """From a fresh checkout: a venv with an extra that brings JupyterLab, then its jupyter."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
    text = (NOTEBOOK_DIR / "README.md").read_text()
    section = text[text.index("\n## Opening them\n") :]
    block = re.search(r"\n```bash\n(.*?)\n```", section, re.S)
    assert block, "no bash block under '## Opening them'"
    setup, start = block.group(1).splitlines()
    install = re.fullmatch(
        r'python3 -m venv \.venv && \.venv/bin/pip install -e "\.\[(\w+)\]"', setup
    )
    assert install, setup
    extras = tomllib.loads((NOTEBOOK_DIR.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    brings = _extra_requires(extras, install.group(1))
    assert {"jupyterlab", "ipykernel"} <= brings, brings
    assert start == ".venv/bin/jupyter lab notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_title_is_numbered_as_its_file(path):
    """``04_fish_school.ipynb`` opens with ``# 4. ...``, as the tutorials' list shows it."""
    first = json.loads(path.read_text())["cells"][0]
    title = "".join(first["source"]).splitlines()[0]
    assert first["cell_type"] == "markdown" and title.startswith(f"# {int(path.name[:2])}. ")


def test_the_pages_count_the_lessons_right():
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    root = NOTEBOOK_DIR.parent
    for page in (root / "README.md", root / "docs" / "guide" / "algorithms.md"):
        counts = re.findall(r"\b(\w+) lessons\b", page.read_text())
        assert counts and set(counts) == {words[len(NOTEBOOKS)]}, (page.name, counts)
