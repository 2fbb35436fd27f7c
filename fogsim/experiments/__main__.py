"""``python -m fogsim.experiments SPEC.json``: sweep a grid written in JSON."""

from __future__ import annotations

from ._main import main

if __name__ == "__main__":
    raise SystemExit(main())
