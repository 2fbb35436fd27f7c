"""SPMD mode: per-agent code run as N threads of one process.

Code written for one agent, as in BlueFog's listings and under MPI (``rank()`` is an
int, each agent holds its own arrays), runs unchanged and without a launcher::

    import fogsim as fs
    import fogsim.spmd

    def main():
        fs.init()
        x = np.full(3, float(fs.rank()))
        return fs.neighbor_allreduce(x)

    results = fogsim.spmd.run(main, size=8)   # one result per agent, in rank order

Every op is a rendezvous: when all N agents have called it, it runs once, vectorized, on
the simulator of size N (the same kernels and the same numbers as the MPI runtime), and
each agent gets its own row back. Agents must therefore call the same ops in the same
order; a mismatch raises a ``ValueError`` naming the agents on each side, and an agent that
fails or returns early stops the others instead of leaving them waiting.
"""

from __future__ import annotations

from ._errors import SpmdAborted, SpmdError, SpmdTimeout
from ._run import run, run_path

__all__ = ["SpmdAborted", "SpmdError", "SpmdTimeout", "run", "run_path"]
