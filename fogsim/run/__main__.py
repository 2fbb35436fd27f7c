"""``python -m fogsim.run``: the same as the ``fogrun`` command."""

from . import main

raise SystemExit(main())
