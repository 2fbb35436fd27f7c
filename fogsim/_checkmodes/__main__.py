"""``python -m fogsim._checkmodes``: fogrun --check-modes, or (``--child``) one recorded run."""

import sys

from . import main
from ._record import child

if sys.argv[1:2] == ["--child"]:
    child(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:])
else:
    sys.exit(main())
