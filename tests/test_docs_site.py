"""The documentation site as a user gets it: the build command, the built pages, their sources.

* ``make -C docs html`` right after the README's set-up, with no venv activated, runs the
  venv's ``sphinx-build`` (checked with ``make -n``: no build here).
* The built site (``docs/_build/html``, which ``.ci/run`` builds before the tests) links no
  page of a private module (``fogsim._weightcheck``, ``fogsim.compress._base``, ...) and
  typesets its maths with a MathJax of its own, with no network; no page has an empty
  section navigation. Without a built site these tests skip outside CI and fail under
  ``CI=true``. They read the last build: rebuild after changing the docs (an incremental
  build keeps the pages of modules no longer shown: remove docs/_build/html and
  docs/_build/doctrees first).
* The examples page shows each script's docstring once, as text, then its code.
* No page of the site, nor anything it includes or shows (BENCHMARKS.md, CHANGELOG.md, the
  notebooks, the examples, the docstrings and the source of fogsim), cites an issue number
  of the project: the site is written for users.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import environment

ROOT = environment.ROOT
DOCS = ROOT / "docs"
SITE = DOCS / "_build" / "html"
VENV_BIN = ROOT / ".venv" / "bin"


# -- make -C docs html ----------------------------------------------------------------------


def _user_env() -> dict[str, str]:
    """The environment of a fresh shell: no venv activated, no SPHINXBUILD."""
    venv_bins = {str(VENV_BIN), str(VENV_BIN.resolve())}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p not in venv_bins]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "SPHINXBUILD")}
    env["PATH"] = os.pathsep.join(path)
    return env


def _make_dry_run(docs: Path, *args: str) -> list[str]:
    """The commands ``make -n -C docs html`` would run (``make`` from the user's PATH)."""
    env = _user_env()
    make = shutil.which("make", path=env["PATH"])
    if make is None:
        environment.missing("no make on PATH (the README builds the site with make -C docs html)")
    job = subprocess.run(
        [make, "-n", "--no-print-directory", "-C", str(docs), "html", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert job.returncode == 0, job.stderr
    return [line for line in job.stdout.splitlines() if line.strip()]


def test_make_html_runs_the_venvs_sphinx_build() -> None:
    sphinx_build = VENV_BIN / "sphinx-build"
    if not sphinx_build.is_file():
        environment.missing(f"no {sphinx_build}: the README's set-up (the dev extra) makes it")
    commands = _make_dry_run(DOCS)
    assert len(commands) == 1, commands
    program = commands[0].split()[0]
    assert Path(program) == sphinx_build, commands[0]
    # and it runs from a shell whose PATH lacks the venv
    job = subprocess.run(
        [program, "--version"], env=_user_env(), capture_output=True, text=True, timeout=60
    )
    assert job.returncode == 0 and "sphinx-build" in job.stdout, job.stderr


def test_make_html_takes_sphinxbuild_from_the_command_line() -> None:
    commands = _make_dry_run(DOCS, "SPHINXBUILD=/opt/elsewhere/sphinx-build")
    assert commands[0].split()[0] == "/opt/elsewhere/sphinx-build"


def test_make_html_without_a_venv_runs_sphinx_build_from_path(tmp_path: Path) -> None:
    docs = tmp_path / "docs"  # a checkout with no .venv beside docs/
    docs.mkdir()
    shutil.copyfile(DOCS / "Makefile", docs / "Makefile")
    commands = _make_dry_run(docs)
    assert commands[0].split()[0] == "sphinx-build"


# -- the built site -------------------------------------------------------------------------


def _site() -> Path:
    if not (SITE / "index.html").is_file():
        environment.missing(
            f"no built site in {SITE}: run make -C docs html first (.ci/run builds it)"
        )
    return SITE


def _pages(site: Path) -> list[Path]:
    """Every HTML page of the site (viewcode's source pages included)."""
    skip = {"_static", "_sources", "_images"}
    return [p for p in sorted(site.rglob("*.html")) if not skip & set(p.relative_to(site).parts)]


_HREF = re.compile(r"""\bhref\s*=\s*["']([^"']*)["']""")
_SRC = re.compile(r"""<script\b[^>]*\bsrc\s*=\s*["']([^"']*)["']""", re.I)
#: A private module's name in a link's path or anchor: ``fogsim/_api.html``,
#: ``fogsim.compress._base``, ``#fogsim._weightcheck.WeightWarning`` (not ``__version__``).
_PRIVATE = re.compile(r"\bfogsim(?:[./][A-Za-z]\w*)*[./]_(?!_)\w")


def private_links(site: Path) -> list[str]:
    """``page: href`` for every internal link of the site into a private module."""
    found = []
    for page in _pages(site):
        for href in _HREF.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", href, re.I):  # http:, mailto:, ...
                continue
            if _PRIVATE.search(href):
                found.append(f"{page.relative_to(site)}: {href}")
    return found


def test_no_page_links_a_private_module() -> None:
    site = _site()
    links = private_links(site)
    assert not links, f"{len(links)} links into private modules, e.g.\n" + "\n".join(links[:20])
    sources = sorted(p.relative_to(site) for p in (site / "_modules").rglob("*.html"))
    assert not [p for p in sources if _PRIVATE.search(p.as_posix())], sources


def test_the_api_reference_still_links_source_code() -> None:
    """Public modules keep their ``[source]`` links (what the check above must not drop)."""
    page = _site() / "api" / "generated" / "fogsim.topology.ring_graph.html"
    assert "_modules/fogsim/topology/builders.html#ring_graph" in page.read_text()


def test_maths_is_typeset_without_network() -> None:
    """Pages with maths load MathJax from the site itself, not from a CDN."""
    site = _site()
    with_maths = [p for p in _pages(site) if 'class="math' in p.read_text(encoding="utf-8")]
    assert len(with_maths) >= 6, "the notebooks' pages should have maths"
    for page in with_maths:
        scripts = [s for s in _SRC.findall(page.read_text(encoding="utf-8")) if "mathjax" in s]
        where = page.relative_to(site)
        assert scripts, f"{where}: no MathJax script"
        for src in scripts:
            assert not re.match(r"([a-z]+:)?//", src, re.I), f"{where} loads {src}"
            script = (page.parent / src.split("?")[0]).resolve()
            assert script.is_file() and script.stat().st_size > 100_000, f"{where}: {src}"
            fonts = script.parent / "output" / "chtml" / "fonts" / "woff-v2"
            assert list(fonts.glob("*.woff")), f"no MathJax fonts beside {script}"


def test_no_page_has_an_empty_section_navigation() -> None:
    """A page with no pages under it has no left sidebar rather than an empty one."""
    site = _site()
    empty = re.compile(r'<div class="bd-toc-item navbar-nav">\s*</div>')
    pages = [p.relative_to(site) for p in _pages(site) if empty.search(p.read_text())]
    assert not pages, pages


def test_the_gallery_shows_each_docstring_once(tmp_path: Path) -> None:
    """The examples page: a script's docstring as text, then its code without it."""
    spec = importlib.util.spec_from_file_location("gallery", DOCS / "_scripts" / "gallery.py")
    assert spec and spec.loader
    gallery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gallery)
    page = tmp_path / "index.md"
    gallery.write_gallery(ROOT, page)
    text = page.read_text()
    markup = re.findall(r"``[^`\n]+``", text)
    assert not markup, f"reST markup left on the page: {markup[:5]}"
    shown = re.findall(
        r"\{literalinclude\} \.\./\.\./(\S+)\n:language: python\n:lines: (\d+)-", text
    )
    scripts = [p for p in (ROOT / "examples").rglob("*.py") if not p.name.startswith("_")]
    assert len(shown) == len(scripts)
    for script, first in shown:
        docstring = ast.parse((ROOT / script).read_text()).body[0]
        assert int(first) > (docstring.end_lineno or 0), script


# -- issue numbers --------------------------------------------------------------------------

#: ``issue 23``, ``Issues 23 and 24``, ``PR 7``, ``#12`` (not ``python/mypy#3186``, ``&#123;``).
ISSUE_NUMBER = re.compile(
    r"(?i)\b(?:issues?|pr|pull requests?)\s+(?:no\.?\s*)?#?\d+|(?<![\w/&#])#\d+\b"
)
_INCLUDE = re.compile(r"^```\{(?:include|literalinclude)\}\s+(\S+)", re.M)


def site_sources() -> list[Path]:
    """What the site shows: its pages, the files they include, notebooks, examples, fogsim."""
    generated = {"_build", "generated", "notebooks"}  # built, or copied from elsewhere
    pages = [
        p
        for p in sorted(DOCS.rglob("*"))
        if p.suffix in (".md", ".rst")
        and not generated & set(p.relative_to(DOCS).parts)
        and p.relative_to(DOCS).as_posix() != "examples/index.md"
    ]
    included = {
        (page.parent / target).resolve()
        for page in pages
        for target in _INCLUDE.findall(page.read_text(encoding="utf-8"))
    }
    shown = [
        *sorted((ROOT / "notebooks").glob("*.ipynb")),
        *sorted((ROOT / "notebooks").glob("*.md")),
        *sorted((ROOT / "examples").rglob("*.py")),
        *sorted((ROOT / "fogsim").rglob("*.py")),
    ]
    return [*pages, *sorted(included), *shown]


def test_site_sources_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in site_sources()}
    assert {"BENCHMARKS.md", "CHANGELOG.md", "docs/index.md"} <= names
    assert "notebooks/01_consensus.ipynb" in names and "examples/consensus.py" in names


def test_no_issue_numbers_on_the_site() -> None:
    found = []
    for path in site_sources():
        text = path.read_text(encoding="utf-8")
        for match in ISSUE_NUMBER.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not found, "issue numbers in what the site shows:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "cites"),
    [
        ("the goal of issue 23", True),
        ("Work of issues 23 (compressed) and 24", True),
        ("Issue 20's figure", True),
        ("see #14", True),
        ("python/mypy#3186", False),
        ("color &#123;", False),
        ("issues with 2 ranks", False),
        ("#1f77b4", False),
    ],
)
def test_the_issue_number_pattern(text: str, cites: bool) -> None:
    assert bool(ISSUE_NUMBER.search(text)) is cites
