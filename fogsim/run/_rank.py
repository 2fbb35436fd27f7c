"""The first code a rank of a fogrun job runs: ``python -m mpi4py -m fogsim.run._rank PROGRAM``.

It makes the rank report an uncaught exception and its warnings to fogrun
(`fogsim.run._hooks`) from the program's first line on, so that an error or a warning raised
before the program imports fogsim (a missing module, a bad argument) is also printed once for
all ranks, and then runs ``PROGRAM`` as Python would have: ``script.py [args]`` (the script's
folder first on ``sys.path``), ``-m module [args]``, ``-c code [args]`` or ``-`` (standard
input). The status the program ends with (``sys.exit(n)``, an exception, Ctrl-C) is recorded
for fogrun (`fogsim.run._status`) on its way out. Only the standard library and the light
`fogsim.run._hooks` are imported before the program, and, under ``fogrun --bluefog``
(``FOGSIM_BLUEFOG`` set), fogsim's BlueFog module aliases (`fogsim.run._bluefog`).
"""

from __future__ import annotations

import os
import runpy
import sys

from .. import _settings
from . import _hooks, _status

__all__ = ["main"]

USAGE = "usage: python -m fogsim.run._rank (script.py | -m module | -c code | -) [args]"


def main(argv: list[str]) -> None:
    """Run the program ``argv`` (``sys.argv[1:]`` of this module) as ``__main__``."""
    _hooks.install_from_environ(_settings.environ())
    try:
        _run(argv)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: how the rank ends
        _status.record(exc)
        raise


def _run(argv: list[str]) -> None:
    if _settings.environ().get("FOGSIM_BLUEFOG", "").strip():  # fogrun --bluefog
        from . import _bluefog

        _bluefog.install_from_environ()
    if not argv:
        raise SystemExit(USAGE)
    first, rest = argv[0], argv[1:]
    if first == "-m" and rest:
        sys.argv = [first, *rest[1:]]  # run_module puts the module's path in argv[0]
        runpy.run_module(rest[0], run_name="__main__", alter_sys=True)
    elif first == "-c" and rest:
        sys.argv = ["-c", *rest[1:]]
        _run_source(rest[0], "<string>")
    elif first == "-":
        sys.argv = ["-", *rest]
        _run_source(sys.stdin.read(), "<stdin>")
    elif first.startswith("-"):
        raise SystemExit(f"{USAGE}\nunknown option {first!r}")
    else:
        sys.argv = [first, *rest]
        sys.path[0] = os.path.dirname(os.path.abspath(first))  # python script.py does so
        runpy.run_path(first, run_name="__main__")


def _run_source(source: str, filename: str) -> None:
    loader = getattr(sys.modules["__main__"], "__loader__", None)
    namespace = {
        "__name__": "__main__",
        "__builtins__": __builtins__,
        "__doc__": None,
        "__spec__": None,
        "__loader__": loader,
    }
    exec(compile(source, filename, "exec"), namespace)


if __name__ == "__main__":
    main(sys.argv[1:])
