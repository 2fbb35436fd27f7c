"""Every ```python block of README.md and docs/**/*.md runs as pasted, in a fresh interpreter.

Each block is one test, named ``file:line`` (the line of its opening fence), run by itself
in a new Python process (``sys.executable``, working directory a fresh temporary folder,
the environment of the suite's other jobs: fogsim imported as installed, no backend or
size inherited). Pages are found by glob, so a page added under ``docs/`` is checked
without an edit here.

A block that cannot run as pasted (it needs a launcher, a GPU, a file) is marked by the
line ``<!-- snippet: no-run (reason) -->`` just before it. Such blocks are not collected at
all (``CI=true`` allows no skip but for missing hardware), and
:func:`test_every_no_run_marker_gives_its_reason` keeps the markers honest. The README's
set-up and main-job commands are checked against what ``.ci/run`` runs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import _jobs, environment

ROOT = _jobs.ROOT
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_MARKER = re.compile(r"<!--\s*snippet:")
_NO_RUN = re.compile(r"^[ \t]*<!-- snippet: no-run \((?P<reason>[^()]*\S[^()]*)\) -->[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    marker: str | None  # the nearest non-blank line before the fence, if it is a snippet marker

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/ (the built site excluded)."""
    found = sorted(
        p for p in (ROOT / "docs").glob("**/*.md") if "_build" not in p.relative_to(ROOT).parts
    )
    return [README, *found]


def blocks(page: Path) -> list[Block]:
    """Return the fenced code blocks of ``page``, indented ones (in list items) included."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if (
                closing
                and not closing["info"]
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
            ):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = before if _MARKER.search(before) else None
        language = opening["info"].split()[0] if opening["info"] else ""
        out.append(Block(page, i + 1, language, "\n".join(body) + "\n", marker))
        i = j + 1
    return out


def python_blocks() -> list[Block]:
    """Every ```python block of every page, less those marked no-run."""
    return [
        b for page in pages() for b in blocks(page) if b.language == "python" and b.marker is None
    ]


def _section_commands(text: str, heading: str) -> list[str]:
    """The lines of the first ```bash block after the Markdown heading ``heading``."""
    start = text.index(f"\n{heading}\n")
    section = text[start:]
    block = re.search(r"\n```bash\n(.*?)\n```", section, re.S)
    assert block, f"no bash block under {heading!r}"
    return block.group(1).splitlines()


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: b.id)
def test_python_block_runs_as_pasted(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(block.code, encoding="utf-8")
    env = _jobs.job_env(MPLBACKEND="Agg")
    job = _jobs.python(str(script), timeout=120, env=env, cwd=tmp_path)
    if not job.ok:
        pytest.fail(
            f"the ```python block at {block.id} does not run as pasted:\n"
            f"{block.code}\n{job.describe()}",
            pytrace=False,
        )


def test_every_page_is_found_and_read() -> None:
    found = pages()
    assert found[0] == README
    assert python_blocks(), "README.md should hold at least one runnable example"
    for page in found:
        assert page.suffix == ".md" and page.is_file()


def test_every_no_run_marker_gives_its_reason() -> None:
    problems = []
    for page in pages():
        lines = page.read_text(encoding="utf-8").splitlines()
        fences = {b.line: b for b in blocks(page)}
        for number, line in enumerate(lines, start=1):
            if not _MARKER.search(line):
                continue
            where = f"{page.relative_to(ROOT).as_posix()}:{number}"
            if not _NO_RUN.match(line):
                problems.append(f"{where}: write exactly <!-- snippet: no-run (reason) -->")
                continue
            following = next((k for k in range(number, len(lines)) if lines[k].strip()), None)
            block = fences.get(following + 1) if following is not None else None
            if block is None or block.language != "python":
                problems.append(f"{where}: the marker must stand just before a ```python block")
    assert not problems, "\n".join(problems)


def _require_ci_script() -> None:
    if not CI_RUN.is_file():  # e.g. tests run from an sdist, which has no .ci/
        environment.missing(f"no {CI_RUN} to compare the README's commands with")


def test_the_readme_setup_commands_are_those_ci_runs() -> None:
    _require_ci_script()
    ci = [line.strip() for line in CI_RUN.read_text().splitlines()]
    install = next(line for line in ci if "pip install" in line and "venv" in line)
    suite = next(line for line in ci if line.endswith("-m pytest"))
    commands = _section_commands(README.read_text(encoding="utf-8"), "## Set-up and tests")
    assert commands == [install, suite]


def test_the_readme_main_job_is_one_command_on_an_example() -> None:
    _require_ci_script()
    commands = _section_commands(README.read_text(encoding="utf-8"), "## Run the main job")
    assert commands == [".venv/bin/python examples/consensus.py"]
    assert (ROOT / "examples" / "consensus.py").is_file()
    # the same interpreter as the test command of .ci/run
    assert any(
        line.strip().startswith(".venv/bin/python ") for line in CI_RUN.read_text().splitlines()
    )


def test_the_readme_first_example_prints_one_line_alike_in_every_mode(tmp_path: Path) -> None:
    """A new user pastes the README's first example into a file and runs it simulated, as
    16 SPMD agents and under ``fogrun -np 16``: one line, the same each time."""
    first = blocks(README)[0]
    assert first.language == "python", first.id
    script = tmp_path / "script.py"
    script.write_text(first.code)
    fogrun = str(Path(sys.executable).parent / "fogrun")
    outputs = {"simulated": _jobs.run([sys.executable, str(script)], timeout=120)}
    environment.require_mpiexec()
    for mode, options in {"spmd": ["--spmd"], "mpi": []}.items():
        outputs[mode] = _jobs.run(
            [fogrun, *options, "-np", "16", "python", str(script)], timeout=300
        )
    printed = {mode: job.check().stdout for mode, job in outputs.items()}
    assert len(set(printed.values())) == 1, printed
    lines = printed["simulated"].splitlines()
    assert len(lines) == 1 and lines[0].startswith("average 7.5"), lines
    assert f"It prints `{lines[0]}`" in README.read_text(encoding="utf-8")
