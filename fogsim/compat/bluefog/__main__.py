"""``python -m fogsim.compat.bluefog script.py [args]``: run BlueFog code unchanged.

Registers fogsim's BlueFog layer as ``bluefog``/``bluefog.torch``/``bluefog.common``
(:func:`fogsim.compat.bluefog.install`) and runs the program as Python would
(``script.py``, ``-m module`` or ``-c code``) through fogrun's bootstrap
(`fogsim.run._rank`), so that a rank of ``fogrun --bluefog``, which starts here, reports to
fogrun as any other. Under MPI without fogrun:
``mpiexec -n 4 python -m mpi4py -m fogsim.compat.bluefog script.py``.
"""

import os
import sys

from ...run import _rank
from ._alias import install_from_environ

if __name__ == "__main__":
    os.environ.setdefault("FOGSIM_BLUEFOG", "1")
    _rank.main(sys.argv[1:], prepare=install_from_environ)
