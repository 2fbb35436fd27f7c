"""The ``fogsim`` command: ``fogsim timeline summarize PREFIX [--gantt FILE]``,
``fogsim experiments SPEC.json`` (a sweep; see :mod:`fogsim.experiments`).

(``fogrun`` is the launcher; see :mod:`fogsim.run`.)
"""

from __future__ import annotations

import sys

COMMANDS = {
    "timeline": "summarize timeline files (fogsim timeline summarize PREFIX)",
    "experiments": "sweep a grid of simulated runs (fogsim experiments SPEC.json)",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        print("usage: fogsim COMMAND ...\n\ncommands:", file=sys.stderr)
        for name, text in COMMANDS.items():
            print(f"  {name:<10} {text}", file=sys.stderr)
        return 0 if args and args[0] in ("-h", "--help") else 2
    if args[0] == "experiments":
        from . import experiments

        return experiments.main(args[1:])
    from . import timeline

    return timeline.main(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
