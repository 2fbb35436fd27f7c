"""``python -m fogsim.spmd -np N script.py [args ...]``: run a per-agent script as N threads.

What ``fogrun --spmd -np N python script.py`` runs. The script runs once per agent, each
in its own thread with its own scalar ``rank()`` (see :mod:`fogsim.spmd`); ``sys.argv``
is ``[script.py, args ...]`` as under MPI. An exception in an agent stops the others and
is printed with the agent's rank; the exit status is then 1. Ctrl-C stops the agents and
exits with 130, printing one line (none under fogrun, which prints its own).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from .. import _settings
from . import run_path
from ._errors import SpmdError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fogsim.spmd",
        description="Run a per-agent fogsim script as N agent threads of one process.",
    )
    parser.add_argument(
        "-np", "-n", dest="np", type=int, required=True, metavar="N", help="number of agents"
    )
    parser.add_argument("--local-size", type=int, metavar="K", help="agents per machine")
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="longest wait of an agent in one op"
    )
    parser.add_argument("script", help="the per-agent script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    ns = parser.parse_args(argv)
    if ns.np < 1:
        parser.error(f"-np must be >= 1, got {ns.np}")
    from ..run import _bluefog

    _bluefog.install_from_environ()  # fogrun --spmd --bluefog
    try:
        run_path(ns.script, size=ns.np, argv=ns.args, local_size=ns.local_size, timeout=ns.timeout)
    except SpmdError as exc:
        print(f"fogsim.spmd: {exc}", file=sys.stderr)
        return 1
    except (FileNotFoundError, IsADirectoryError) as exc:
        print(f"fogsim.spmd: cannot run {ns.script!r}: {exc.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the agents stopped; fogrun says so in its own line
        if not _settings.environ().get("FOGSIM_RANK_DIR"):
            print("fogsim.spmd: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BaseException:  # the agent's own exception, its rank in a note
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
