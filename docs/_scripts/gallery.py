"""Write ``examples/index.md``: every script of ``examples/`` with its docstring and source.

conf.py runs this on every build, so that a new example appears without editing the page;
the page is git-ignored. Nothing is executed.
"""

from __future__ import annotations

import ast
import re
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


def _markdown(text: str) -> str:
    """Return a docstring's reST-flavoured text as Markdown.

    The docstrings use little markup: ````code```` becomes `code`; ``**bold**``, ``*``
    lists and blocks indented by 4 spaces (equations: Markdown's indented code blocks) read
    the same in both. Runs of blank lines, left where command lines were taken out, shrink.
    """
    text = re.sub(r"``(.+?)``", r"`\1`", text)
    return re.sub(r"\n{3,}", "\n\n", text)


def _section(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    summary, commands, rest = _split(doc)
    if not commands:
        commands = [f"python {rel}"]
    # a plain file name: the page's contents list in the right sidebar has room for it
    parts = [f"### {path.name}", "", _markdown(summary), "", "```bash", *commands, "```", ""]
    if rest:
        parts += [_markdown(rest), ""]
    # the code after the docstring: the docstring is shown once, as text, above
    lines = path.read_text().splitlines()
    first = tree.body[0].end_lineno or 0 if doc else 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    parts += [
        "```{literalinclude} ../../" + rel,
        ":language: python",
        f":lines: {first + 1}-",
        "```",
        "",
    ]
    return "\n".join(parts)


def write_gallery(root: Path, page: Path) -> None:
    """Write the gallery page ``page`` for the scripts under ``root / "examples"``."""
    groups = [
        ("fogsim's examples (`examples/`)", root / "examples"),
        ("BlueFog programs (`examples/bluefog/`)", root / "examples" / "bluefog"),
    ]
    head = [
        "# Examples",
        "",
        "The scripts of the repository's `examples/` folder: fogsim's own, then",
        "`examples/bluefog/`, BlueFog programs that run on fogsim unchanged. Run them from the",
        "repository root; each runs simulated by default, and under `fogrun -np N` as N",
        "processes. `python examples/NAME.py --help` lists a script's options.",
        "",
    ]
    parts = ["\n".join(head)]
    for title, folder in groups:
        scripts = [p for p in sorted(folder.glob("*.py")) if not p.name.startswith("_")]
        parts += [f"## {title}\n", *(_section(p, root) for p in scripts)]
    text = "\n".join(parts)
    page.parent.mkdir(exist_ok=True)  # the folder holds only this git-ignored page
    if not page.exists() or page.read_text() != text:  # unchanged: Sphinx rebuilds nothing
        page.write_text(text)
