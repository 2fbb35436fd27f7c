"""``python -m fogsim.compat.bluefog script.py [args]``: run BlueFog code unchanged.

Registers fogsim's BlueFog layer as ``bluefog``/``bluefog.torch``/``bluefog.common``
(:func:`fogsim.compat.bluefog.install`) and runs the program as Python would
(``script.py``, ``-m module`` or ``-c code``). Under MPI without fogrun:
``mpiexec -n 4 python -m mpi4py -m fogsim.compat.bluefog script.py``.
"""

import os
import sys

from ...run import _rank

if __name__ == "__main__":
    os.environ.setdefault("FOGSIM_BLUEFOG", "1")
    _rank.main(sys.argv[1:])
