"""Sphinx configuration of fogsim's documentation site (``make -C docs html``).

The build needs no network: intersphinx reads the inventories cached in ``_intersphinx/``,
the notebooks of ``notebooks/`` are copied into ``tutorials/notebooks/`` (git-ignored) and
executed by myst-nb with a jupyter-cache under ``_build/``, so that a rebuild with unchanged
notebooks executes nothing.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's fogsim, also without an installed one

import fogsim  # noqa: E402
import fogsim._types  # noqa: E402
import fogsim.compat.bluefog._types  # noqa: E402

project = "fogsim"
author = "the fogsim developers"
copyright = "the fogsim developers"
version = release = fogsim.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_copybutton",
    "matplotlib.sphinxext.plot_directive",
    # MathJax 3 copied into the site (_static/mathjax/): the maths is typeset with no network,
    # e.g. on a cluster's login node, where the default MathJax from a CDN cannot load.
    "sphinx-mathjax-offline",
]

exclude_patterns = ["_build", "_intersphinx", "_scripts", "**.ipynb_checkpoints"]
templates_path = ["_templates"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# -- theme --------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"fogsim {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
}
html_show_sourcelink = False
# Pages with no pages under them: no left sidebar, whose section navigation would be empty.
_LEAVES = ["install", "examples/index", "migration", "architecture", "benchmarks", "changelog"]
html_sidebars = {page: [] for page in _LEAVES}

# -- API reference ------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# Type aliases shown by name (``x0: ArrayLike``), not as the unions they stand for (whose
# members would be numpy's private classes): fogsim's modules write annotations as strings,
# which autodoc evaluates through this table. fogsim._types's names stay as written; see
# _TYPE_ALIASES below for their references.
autodoc_type_aliases = {
    **{name: name for name in fogsim._types.__all__},
    **{name: name for name in fogsim.compat.bluefog._types.__all__},  # Tensor
    "npt.ArrayLike": "numpy.typing.ArrayLike",
    "npt.DTypeLike": "numpy.typing.DTypeLike",
}
# Methods without a docstring of their own stay out (not torch.nn.Module's text on fogsim's
# pages, whose references point into torch's own pages).
autodoc_inherit_docstrings = False
numpydoc_show_class_members = False  # the class template lists the members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
add_module_names = False

# No nitpick_ignore: numpydoc leaves the docstrings' type words ("array", "optional") as
# text (numpydoc_xref_param_type = False), so every reference left is a real one.

# -- intersphinx: cached inventories, no network (see _intersphinx/make_inventories.py) ----
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", "_intersphinx/python.inv"),
    "numpy": ("https://numpy.org/doc/stable/", "_intersphinx/numpy.inv"),
    "scipy": ("https://docs.scipy.org/doc/scipy/", "_intersphinx/scipy.inv"),
    "torch": ("https://docs.pytorch.org/docs/stable/", "_intersphinx/torch.inv"),
    "networkx": ("https://networkx.org/documentation/stable/", "_intersphinx/networkx.inv"),
    "mpi4py": ("https://mpi4py.readthedocs.io/en/stable/", "_intersphinx/mpi4py.inv"),
    "matplotlib": ("https://matplotlib.org/stable/", "_intersphinx/matplotlib.inv"),
}
intersphinx_timeout = 1

# -- MyST and notebooks ---------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / "jupyter_cache")
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_merge_streams = True

# -- links: no network (make -C docs linkcheck checks internal links only) ---------------------
linkcheck_ignore = [r"https?://.*"]

# -- benchmark plots drawn at build time (docs/benchmarks.md) --------------------------------
plot_include_source = False
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]


# String annotations (``from __future__ import annotations``) that autodoc cannot evaluate
# keep their module abbreviations; these are the ones fogsim's modules use.
_ABBREVIATIONS = {
    "np.": "numpy.",
    "npt.": "numpy.typing.",
    "sp.": "scipy.sparse.",
    "nx.": "networkx.",
    "nn.": "torch.nn.",
}
_BARE = {
    "Axes": "matplotlib.axes.Axes",
    "Path": "pathlib.Path",
    "StackedGenerator": "fogsim._rng.StackedGenerator",
}
# Classes that an evaluated annotation names by the private module defining them.
_DEFINED_PRIVATELY = {
    "numpy.random._generator.Generator": "numpy.random.Generator",
    "scipy.sparse._base.sparray": "scipy.sparse.sparray",
    "scipy.sparse._matrix.spmatrix": "scipy.sparse.spmatrix",
}
# fogsim._types's aliases (and the BlueFog layer's), which have no page of their own: shown
# by name, as text.
_TYPE_ALIASES = frozenset(fogsim._types.__all__) | frozenset(fogsim.compat.bluefog._types.__all__)


def _expand_abbreviation(app: object, env: object, node: dict, contnode: object) -> None:
    """Rewrite ``np.ndarray`` to ``numpy.ndarray`` (and so on) before intersphinx looks it up."""
    target = node.get("reftarget", "")
    if target in _BARE or target in _DEFINED_PRIVATELY:
        node["reftarget"] = _BARE.get(target) or _DEFINED_PRIVATELY[target]
    else:
        for short, full in _ABBREVIATIONS.items():
            if target.startswith(short):
                node["reftarget"] = full + target[len(short) :]
                break
    if node["reftarget"].startswith("numpy.typing.") and node.get("reftype") == "class":
        node["reftype"] = "data"  # numpy's inventory has its type aliases as data


def _private_unlinked(app: object, env: object, node: dict, contnode: object) -> object:
    """Show a type of a private fogsim module (``fogsim._arrays.Kind``), an alias of
    :mod:`fogsim._types` (``ArrayLike``) or a private module itself as text, unlinked.

    Private helpers appear in the annotations of a few public signatures, and private
    modules in a few public docstrings, but have no page, nor have the aliases; every
    other unresolved reference still fails the build.
    """
    target, kind = node.get("reftarget", ""), node.get("reftype")
    if kind == "class" and (_PRIVATE.match(target) or target in _TYPE_ALIASES):
        return contnode
    if kind == "mod" and _PRIVATE.match(target):
        return contnode
    return None


_PRIVATE = re.compile(r"fogsim(\.\w+)*\._\w+(\.\w+)*$")


def _public_source(app: object, modname: str, fullname: str) -> str:
    """Give ``[source]`` links only into public modules' code.

    viewcode links an object to the page of the module that defines it, and most public
    names are defined in private modules (``fogsim.init`` in ``fogsim._api``); such a link
    would lead from the reference into a private module's page. Named here by the module it
    is documented under (which has no code for it), the object gets no link.
    """
    obj: object = importlib.import_module(modname)
    for part in fullname.split("."):
        obj = getattr(obj, part, None)
    defined_in = getattr(obj, "__module__", None)
    if isinstance(defined_in, str) and not _is_private_module(defined_in):
        return defined_in
    return modname


def _is_private_module(name: str) -> bool:
    return any(part.startswith("_") for part in name.split("."))


def _factory_default(
    app: object,
    what: str,
    name: str,
    obj: object,
    options: object,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:
    """Write a dataclass field's ``default_factory`` default as ``...``, not ``<factory>``.

    ``<factory>`` is no Python expression, so Sphinx could not parse such a signature.
    """
    if signature and "<factory>" in signature:
        return signature.replace("<factory>", "..."), return_annotation
    return None


def _alias_names(
    app: object,
    what: str,
    name: str,
    obj: object,
    options: object,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:
    """Write a type alias inside a union (``ArrayLike | None``) by its name.

    Sphinx gives it as the repr of its placeholder, ``TypeAliasForwardRef('ArrayLike')``.
    """
    if not _ALIAS_REPR.search(f"{signature} {return_annotation}"):
        return None
    return (
        signature and _ALIAS_REPR.sub(r"\1", signature),
        return_annotation and _ALIAS_REPR.sub(r"\1", return_annotation),
    )


_ALIAS_REPR = re.compile(r"TypeAliasForwardRef\('([\w.]+)'\)")


def setup(app: Any) -> None:
    # before intersphinx's own missing-reference handler (priority 500)
    app.connect("missing-reference", _expand_abbreviation, priority=400)
    app.connect("missing-reference", _private_unlinked, priority=900)
    app.connect("autodoc-process-signature", _factory_default)
    app.connect("autodoc-process-signature", _alias_names)
    app.connect("viewcode-follow-imported", _public_source)


def _copy_notebooks() -> None:
    """Copy ``notebooks/*.ipynb`` into ``tutorials/notebooks/`` (git-ignored).

    Only changed files are copied, so that Sphinx's and the jupyter-cache's change
    detection sees the notebook as unchanged on a rebuild. The fish-school notebook writes
    its GIF next to itself, that is into this git-ignored folder.
    """
    target = DOCS / "tutorials" / "notebooks"
    target.mkdir(exist_ok=True)
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in sources:
        copy = target / path.name
        if not copy.exists() or copy.read_bytes() != path.read_bytes():
            shutil.copyfile(path, copy)
    wanted = {p.name for p in sources}
    for stale in target.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()


_copy_notebooks()

# What a notebook writes to the temporary directory (tempfile.gettempdir()) stays in the
# build folder; the executing kernels inherit this environment.
os.environ["TMPDIR"] = str(DOCS / "_build" / "tmp")
(DOCS / "_build" / "tmp").mkdir(parents=True, exist_ok=True)

sys.path.insert(0, str(DOCS / "_scripts"))
from gallery import write_gallery  # noqa: E402

write_gallery(ROOT, DOCS / "examples" / "index.md")
