"""Write ``examples/index.md``: every script of ``examples/`` with its docstring and source.

conf.py runs this on every build, so that a new example appears without editing the page;
the page is git-ignored. Nothing is executed.
"""

from __future__ import annotations

import ast
from pathlib import Path

_LAUNCHERS = ("python ", "fogrun ", "mpiexec ", "torchrun ")


def _split(doc: str) -> tuple[str, list[str], str]:
    """Return the docstring's summary, its command lines and the rest of its text."""
    summary, _, body = doc.partition("\n\n")
    commands, rest = [], []
    for line in body.splitlines():
        if line.strip().startswith(_LAUNCHERS):
            commands.append(line.strip())
        else:
            rest.append(line)
    return " ".join(summary.split()), commands, "\n".join(rest).strip()


def _section(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix()
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    summary, commands, rest = _split(doc)
    if not commands:
        commands = [f"python {rel}"]
    parts = [f"## `{rel}`", "", summary, "", "```bash", *commands, "```", ""]
    if rest:
        parts += ["```text", rest, "```", ""]
    parts += [
        "```{literalinclude} ../../" + rel,
        ":language: python",
        "```",
        "",
    ]
    return "\n".join(parts)


def write_gallery(root: Path, page: Path) -> None:
    """Write the gallery page ``page`` for the scripts under ``root / "examples"``."""
    scripts = sorted((root / "examples").glob("*.py")) + sorted(
        (root / "examples" / "bluefog").glob("*.py")
    )
    scripts = [p for p in scripts if not p.name.startswith("_")]
    head = [
        "# Examples",
        "",
        "The scripts of the repository's `examples/` folder: fogsim's own, then",
        "`examples/bluefog/`, BlueFog programs that run on fogsim unchanged. Run them from the",
        "repository root; each runs simulated by default, and under `fogrun -np N` as N",
        "processes. `python examples/NAME.py --help` lists a script's options.",
        "",
    ]
    text = "\n".join(head) + "\n".join(_section(p, root) for p in scripts)
    page.parent.mkdir(exist_ok=True)  # the folder holds only this git-ignored page
    if not page.exists() or page.read_text() != text:  # unchanged: Sphinx rebuilds nothing
        page.write_text(text)
