"""Run the cases of dual_cases.py under mpiexec; rank 0 prints one JSON line per case.

fogrun -np 4 python -m tests.dual_driver [case_name ...]   (from the repository root)
"""

from __future__ import annotations

import json
import sys
import traceback

from mpi4py import MPI

import fogsim as fs
from tests import dual_cases


def main() -> None:
    comm = MPI.COMM_WORLD
    with fs.Context() as world:  # the cases must test the MPI runtime, even on one process
        assert world.backend.name == "mpi", f"dual_driver runs on {world.backend.name}"
    world.close()
    names = sys.argv[1:] or dual_cases.CASES
    for name in names:
        try:
            getattr(dual_cases, name)()
            outcome = None
        except Exception:  # noqa: BLE001 - reported per case, per rank
            outcome = traceback.format_exc(limit=6)
            fs.shutdown()
        outcomes = comm.gather(outcome, root=0)
        if comm.Get_rank() == 0:
            failed = {r: o for r, o in enumerate(outcomes) if o is not None}
            print(json.dumps({"case": name, "failed": failed}), flush=True)


if __name__ == "__main__":
    main()
