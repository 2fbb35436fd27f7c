"""The documentation site as a user gets it: the build command.

* ``make -C docs html`` right after the README's set-up, with no venv activated, runs the
  venv's ``sphinx-build`` (checked with ``make -n``: no build here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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
