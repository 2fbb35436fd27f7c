"""Write the intersphinx inventories the docs build reads: a cached subset, no network.

The build machine has no network, so ``docs/conf.py`` points ``intersphinx_mapping`` at the
``*.inv`` files next to this script instead of downloading each project's ``objects.inv``.
Each file here is a Sphinx v2 inventory holding only the names fogsim's pages and
docstrings reference (collected from the ``-n`` warnings of a build without them), each
pointing at its real page in that project's published documentation. Where autodoc writes
a class under the module that defines it (``networkx.classes.digraph.DiGraph``,
``torch.nn.modules.module.Module``), the entry has that name too, pointing at the public
name's page.

To regenerate after adding a reference: add its entry to ``ENTRIES`` below and run

    python docs/_intersphinx/make_inventories.py

then commit the changed ``.inv`` files. (With network access, the full inventories can be
fetched instead, e.g. ``curl -o docs/_intersphinx/numpy.inv
https://numpy.org/doc/stable/objects.inv``; the build works with either.)
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project -> (name as in the inventory header, version, [(name, role, relative uri), ...]).
# The uri is relative to the project's base URL in conf.py's intersphinx_mapping.
PY = "library/"
ENTRIES: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "python": (
        "Python",
        "3",
        [
            ("int", "py:class", PY + "functions.html#int"),
            ("float", "py:class", PY + "functions.html#float"),
            ("str", "py:class", PY + "stdtypes.html#str"),
            ("bool", "py:class", PY + "functions.html#bool"),
            ("bytes", "py:class", PY + "stdtypes.html#bytes"),
            ("object", "py:class", PY + "functions.html#object"),
            ("dict", "py:class", PY + "stdtypes.html#dict"),
            ("list", "py:class", PY + "stdtypes.html#list"),
            ("tuple", "py:class", PY + "stdtypes.html#tuple"),
            ("set", "py:class", PY + "stdtypes.html#set"),
            ("frozenset", "py:class", PY + "stdtypes.html#frozenset"),
            ("type", "py:class", PY + "functions.html#type"),
            ("slice", "py:class", PY + "functions.html#slice"),
            ("range", "py:class", PY + "stdtypes.html#range"),
            ("Exception", "py:exception", PY + "exceptions.html#Exception"),
            ("RuntimeError", "py:exception", PY + "exceptions.html#RuntimeError"),
            ("TimeoutError", "py:exception", PY + "exceptions.html#TimeoutError"),
            ("ValueError", "py:exception", PY + "exceptions.html#ValueError"),
            ("TypeError", "py:exception", PY + "exceptions.html#TypeError"),
            ("KeyError", "py:exception", PY + "exceptions.html#KeyError"),
            ("UserWarning", "py:exception", PY + "exceptions.html#UserWarning"),
            ("RuntimeWarning", "py:exception", PY + "exceptions.html#RuntimeWarning"),
            ("DeprecationWarning", "py:exception", PY + "exceptions.html#DeprecationWarning"),
            ("None", "py:data", PY + "constants.html#None"),
            ("NotImplemented", "py:data", PY + "constants.html#NotImplemented"),
            ("Ellipsis", "py:data", PY + "constants.html#Ellipsis"),
            ("enum.Enum", "py:class", PY + "enum.html#enum.Enum"),
            ("enum.IntEnum", "py:class", PY + "enum.html#enum.IntEnum"),
            ("typing.Any", "py:data", PY + "typing.html#typing.Any"),
            ("typing.Literal", "py:data", PY + "typing.html#typing.Literal"),
            ("typing.NamedTuple", "py:class", PY + "typing.html#typing.NamedTuple"),
            ("typing.Protocol", "py:class", PY + "typing.html#typing.Protocol"),
            ("typing.Generic", "py:class", PY + "typing.html#typing.Generic"),
            ("collections.abc.Callable", "py:class", PY + "collections.abc.html#$"),
            ("collections.abc.Iterable", "py:class", PY + "collections.abc.html#$"),
            ("collections.abc.Iterator", "py:class", PY + "collections.abc.html#$"),
            ("collections.abc.Mapping", "py:class", PY + "collections.abc.html#$"),
            ("collections.abc.Sequence", "py:class", PY + "collections.abc.html#$"),
            ("collections.abc.Hashable", "py:class", PY + "collections.abc.html#$"),
            ("contextlib.AbstractContextManager", "py:class", PY + "contextlib.html#$"),
            ("argparse.ArgumentParser", "py:class", PY + "argparse.html#$"),
            ("argparse.Namespace", "py:class", PY + "argparse.html#$"),
            ("os.PathLike", "py:class", PY + "os.html#$"),
            ("pathlib.Path", "py:class", PY + "pathlib.html#$"),
            ("runpy.run_path", "py:function", PY + "runpy.html#$"),
            ("threading.Thread", "py:class", PY + "threading.html#$"),
            ("warnings.warn", "py:function", PY + "warnings.html#$"),
            ("logging.Logger", "py:class", PY + "logging.html#$"),
            ("subprocess.Popen", "py:class", PY + "subprocess.html#$"),
            ("types.ModuleType", "py:class", PY + "types.html#$"),
        ],
    ),
    "numpy": (
        "NumPy",
        "stable",
        [
            ("numpy.ndarray", "py:class", "reference/generated/$.html#$"),
            ("numpy.dtype", "py:class", "reference/generated/$.html#$"),
            ("numpy.float32", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.float64", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.int64", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.integer", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.floating", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.bool_", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.generic", "py:class", "reference/arrays.scalars.html#$"),
            ("numpy.random.Generator", "py:class", "reference/random/generator.html#$"),
            (
                "numpy.random.SeedSequence",
                "py:class",
                "reference/random/bit_generators/generated/$.html#$",
            ),
            ("numpy.typing.NDArray", "py:data", "reference/typing.html#$"),
            ("numpy.typing.ArrayLike", "py:data", "reference/typing.html#$"),
            ("numpy.typing.DTypeLike", "py:data", "reference/typing.html#$"),
            ("numpy.allclose", "py:function", "reference/generated/$.html#$"),
        ],
    ),
    "scipy": (
        "SciPy",
        "stable",
        [
            ("scipy.sparse.csr_array", "py:class", "reference/generated/$.html#$"),
            (
                "scipy.sparse._csr.csr_array",
                "py:class",
                "reference/generated/scipy.sparse.csr_array.html#scipy.sparse.csr_array",
            ),
            ("scipy.sparse.csr_matrix", "py:class", "reference/generated/$.html#$"),
            ("scipy.sparse.sparray", "py:class", "reference/generated/$.html#$"),
            ("scipy.sparse.spmatrix", "py:class", "reference/generated/$.html#$"),
        ],
    ),
    "torch": (
        "PyTorch",
        "stable",
        [
            ("torch.Tensor", "py:class", "tensors.html#$"),
            ("torch.dtype", "py:class", "tensor_attributes.html#$"),
            ("torch.device", "py:class", "tensor_attributes.html#$"),
            ("torch.nn.Module", "py:class", "generated/$.html#$"),
            (
                "torch.nn.modules.module.Module",
                "py:class",
                "generated/torch.nn.Module.html#torch.nn.Module",
            ),
            (
                "torch.nn.Parameter",
                "py:class",
                "generated/torch.nn.parameter.Parameter.html#torch.nn.parameter.Parameter",
            ),
            ("torch.optim.Optimizer", "py:class", "optim.html#$"),
            ("torch.optim.optimizer.Optimizer", "py:class", "optim.html#torch.optim.Optimizer"),
            ("torch.distributed", "py:module", "distributed.html#module-$"),
            ("torch.distributed.ProcessGroup", "py:class", "distributed.html#$"),
        ],
    ),
    "networkx": (
        "NetworkX",
        "stable",
        [
            ("networkx.DiGraph", "py:class", "reference/classes/digraph.html#$"),
            (
                "networkx.classes.digraph.DiGraph",
                "py:class",
                "reference/classes/digraph.html#networkx.DiGraph",
            ),
            ("networkx.Graph", "py:class", "reference/classes/graph.html#$"),
            (
                "networkx.classes.graph.Graph",
                "py:class",
                "reference/classes/graph.html#networkx.Graph",
            ),
        ],
    ),
    "mpi4py": (
        "MPI for Python",
        "stable",
        [
            ("mpi4py", "py:module", "mpi4py.html#module-$"),
            ("mpi4py.MPI.Comm", "py:class", "reference/$.html#$"),
            ("mpi4py.MPI.Intracomm", "py:class", "reference/$.html#$"),
            ("mpi4py.MPI.Win", "py:class", "reference/$.html#$"),
        ],
    ),
    "matplotlib": (
        "Matplotlib",
        "stable",
        [
            ("matplotlib.axes.Axes", "py:class", "api/_as_gen/$.html#$"),
            ("matplotlib.figure.Figure", "py:class", "api/_as_gen/$.html#$"),
            ("matplotlib.animation.FuncAnimation", "py:class", "api/_as_gen/$.html#$"),
        ],
    ),
}


def write(path: Path, project: str, version: str, entries: list[tuple[str, str, str]]) -> None:
    """Write one Sphinx v2 inventory (``objects.inv`` format) of ``entries``."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    # name domain:role priority uri dispname; "-": a display name equal to the name. The
    # "$" of ENTRIES stands for the name and is expanded here (Sphinx expands only a
    # trailing one).
    lines = "".join(
        f"{name} {role} 1 {uri.replace('$', name)} -\n" for name, role, uri in sorted(entries)
    )
    path.write_bytes(header.encode() + zlib.compress(lines.encode(), 9))


def main() -> None:
    for key, (project, version, entries) in ENTRIES.items():
        write(HERE / f"{key}.inv", project, version, entries)


if __name__ == "__main__":
    main()
