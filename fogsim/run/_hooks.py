"""What a rank of a fogrun job tells fogrun instead of printing it, installed at its start.

Under ``fogrun`` (``FOGSIM_RANK_DIR`` set, and a rank given by the MPI launcher) each rank,
from the first line of the bootstrap `fogsim.run._rank` (or from ``import fogsim`` where
fogrun could not start it that way), reports to the fogrun watching ``FOGSIM_RANK_DIR``:

* its uncaught exception (`fogsim.run._errors`): fogrun prints each distinct error once;
* the warnings it would print (`fogsim.run._warnings`): fogrun prints each once, with
  the ranks that raised it;
* the status it ends with (`fogsim.run._status`): fogrun returns the status of the rank
  that failed first.

Once the MPI backend knows the rank, it also keeps a socket open to fogrun
(`fogsim.run._liveness`), which tells which rank died first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from .. import _settings
from . import _errors, _status, _warnings

__all__ = ["install", "install_from_environ"]

# The launchers' variables holding the rank (as in fogsim._settings).
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


def install(rank_dir: str, rank: int) -> None:
    """Make this process, rank ``rank``, report to the fogrun watching ``rank_dir``."""
    _status.install(rank_dir, rank)
    _errors.install(rank_dir, rank)
    _warnings.install(rank_dir, rank)


def install_from_environ(environ: Mapping[str, str] | None = None) -> None:
    """:func:`install` when ``FOGSIM_RANK_DIR`` and a launcher's rank variable are set.

    With ``FOGSIM_RANK_DIR`` alone (``fogrun --sim`` or ``--spmd``: one process, no rank)
    only the ``KeyboardInterrupt`` of fogrun's Ctrl-C is left for fogrun to tell.
    """
    env = _settings.environ() if environ is None else environ
    rank_dir = env.get("FOGSIM_RANK_DIR", "").strip()
    if not rank_dir:
        return
    for name in _RANK_VARS:
        with contextlib.suppress(ValueError):
            if name in env:
                install(rank_dir, int(env[name]))
                return
    _errors.install(rank_dir, None)
