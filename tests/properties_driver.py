"""Run drawn property cases under mpiexec; rank 0 reports each and saves every result.

From the repository root: ``fogrun -np N python -m tests.properties_driver CASES.json OUT.npz``.
Each case runs on a fresh world; a case that raises reports, per rank, the exception's type
and message (a bad call must raise the same error on every rank, and the next case must
still run). Rank 0 prints one JSON line per case and saves the stacked results in OUT.npz
under ``"<case>.<output>"``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

import fogsim as fs
from tests import property_cases


def main(cases_path: str, out_path: str) -> None:
    comm = MPI.COMM_WORLD
    with fs.Context() as world:  # the cases must test the MPI runtime, even on one process
        assert world.backend.name == "mpi", f"the driver runs on {world.backend.name}"
    world.close()
    with open(cases_path) as f:
        cases = json.load(f)
    saved = {}
    for k, case in enumerate(cases):
        results, exc = property_cases.outcome(case)
        error = None if exc is None else [type(exc).__name__, str(exc)]
        errors = comm.gather(error, root=0)
        gathered = comm.gather(results, root=0)
        if comm.Get_rank() == 0:
            if all(g is not None for g in gathered):
                for m in range(len(gathered[0])):
                    saved[f"{k}.{m}"] = np.stack([g[m] for g in gathered])
            print(json.dumps({"case": str(k), "errors": errors}), flush=True)
    if comm.Get_rank() == 0:
        np.savez(out_path, **saved)


if __name__ == "__main__":
    main(*sys.argv[1:3])
