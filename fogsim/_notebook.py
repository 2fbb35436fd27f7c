"""A Jupyter notebook's code, as Python would run it top to bottom (for the SPMD runner and the
mode checker).

Each code cell is compiled on its own with the file name ``<path>[cell K]`` (``K`` counts every
cell of the notebook from 1, markdown ones included), so tracebacks and the mode checker's call
sites say ``notebook.ipynb[cell 7]:3``. IPython's line magics (``%matplotlib inline``) and shell
escapes (``!pip ...``) become blank lines; a cell that starts with a cell magic (``%%time``) is
left out. Nothing else of IPython is emulated: the last expression of a cell is evaluated and
not displayed.
"""

from __future__ import annotations

import json
import os
from types import CodeType

__all__ = ["is_notebook", "notebook_code"]


def is_notebook(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a Jupyter notebook (by its ``.ipynb`` suffix)."""
    return os.fspath(path).endswith(".ipynb")


def notebook_code(path: str | os.PathLike[str]) -> list[CodeType]:
    """The compiled code cells of the notebook at ``path``, in order."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            cells = json.load(f)["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a readable Jupyter notebook: {exc}") from None
    code = []
    for k, cell in enumerate(cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if source.lstrip().startswith("%%"):
            continue
        lines = [
            "" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n")
        ]
        code.append(compile("\n".join(lines) + "\n", f"{path}[cell {k}]", "exec"))
    return code
