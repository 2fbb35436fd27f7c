"""A plain list or tuple of numbers means one thing in every mode: ``np.asarray(x)`` on every
agent, the same value for all of them, as a Python scalar is.

The user's script below passes lists to the ops and prints every agent's result; it is run as
users run it (``python script.py`` simulated, ``fogrun --spmd``, ``fogrun`` over MPI, the
torch backend under ``fogrun``, and the simulation sharded over two processes), and every
mode must print the same numbers, which are also the numbers worked out by hand. A list of
numbers that makes no array gets the same ValueError in every mode.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import fogsim as fs
from tests import _jobs, environment

FOGRUN = os.path.join(os.path.dirname(sys.executable), "fogrun")

SCRIPT = """
import json

import numpy as np

import fogsim as fs

fs.init(size=4)
results = {
    "neighbor_allreduce": fs.neighbor_allreduce([0.0, 1.0, 2.0, 3.0]),
    "allreduce": fs.allreduce((1.0, 2.0)),
    "allreduce_sum": fs.allreduce([[1.0, 2.0], [3.0, 4.0]], average=False),
    "allgather": fs.allgather([5.0, 6.0]),
    "broadcast": fs.broadcast([7.0, 8.0, 9.0], root_rank=1),
    "neighbor_allgather": fs.neighbor_allgather([1.5]),
    "mixed": fs.neighbor_allreduce(fs.local(lambda r: [float(r), 1.0])),
}
try:
    fs.neighbor_allreduce([[1.0], [2.0, 3.0]])
    error = None
except ValueError as exc:
    error = str(exc)[str(exc).find("x is"):]  # after the rank or agent it names, if any
views = {k: np.asarray(fs.global_view(v)).tolist() for k, v in results.items()}
if fs.is_main_process():
    print(json.dumps({"views": views, "error": error}))
fs.shutdown()
"""

MODES = {
    "simulated": None,
    "spmd": ("--spmd",),
    "mpi": (),
    "torch": (),
    "sharded": ("--sim", "--shards", "2"),
}


def _expected() -> dict[str, list]:
    """Worked out from the definitions: every agent holds the same list."""
    n = 4
    W = fs.topology.exponential_two_graph(n).to_dense()  # init()'s default topology
    mixed = W @ np.array([[float(r), 1.0] for r in range(n)])
    return {
        "neighbor_allreduce": [[0.0, 1.0, 2.0, 3.0]] * n,  # rows of W sum to 1
        "allreduce": [[1.0, 2.0]] * n,
        "allreduce_sum": [[[4.0, 8.0], [12.0, 16.0]]] * n,
        "allgather": [[5.0, 6.0] * n] * n,
        "broadcast": [[7.0, 8.0, 9.0]] * n,
        "mixed": mixed.tolist(),
    }


def _run(tmp_path, mode: str) -> dict:
    path = tmp_path / "lists.py"
    path.write_text(SCRIPT)
    options = MODES[mode]
    if options is None:
        job = _jobs.run([sys.executable, str(path)], timeout=120)
    else:
        if mode in ("mpi", "torch", "sharded"):
            environment.require_mpiexec()
        env = _jobs.job_env(**({"FOGSIM_BACKEND": "torch"} if mode == "torch" else {}))
        job = _jobs.run([FOGRUN, *options, "-np", "4", "python", str(path)], timeout=200, env=env)
    job.check()
    lines = [ln for ln in job.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, job.describe()
    return json.loads(lines[0])


def test_lists_of_numbers_give_the_same_numbers_in_every_mode(tmp_path):
    runs = {mode: _run(tmp_path, mode) for mode in MODES}
    first = runs["simulated"]
    for mode, run in runs.items():
        assert run == first, f"{mode} differs from the simulated run:\n{run}\n{first}"
    views = first["views"]
    for key, value in _expected().items():
        np.testing.assert_allclose(views[key], value, rtol=1e-15, err_msg=key)
    # every agent hears its in-neighbors' [1.5]: as many entries as it has in-neighbors
    assert all(set(row) == {1.5} for row in views["neighbor_allgather"])
    assert first["error"].startswith("x is a list of numbers that makes no array")


def test_a_list_is_one_value_like_a_scalar_in_the_simulator():
    fs.init(size=3)
    try:
        np.testing.assert_array_equal(fs.allreduce([1.0, 2.0]), [[1.0, 2.0]] * 3)
        np.testing.assert_array_equal(fs.allreduce(2.0), [2.0] * 3)
        # fs.local's list per agent stays one value per agent
        per_agent = fs.local(lambda r: [float(r), 0.0])
        np.testing.assert_array_equal(fs.allreduce(per_agent), [[1.0, 0.0]] * 3)
        # a list of arrays is the agents' values, stacked (what simulator-only code writes)
        rows = [np.full(2, float(r)) for r in range(3)]
        np.testing.assert_array_equal(fs.allreduce(rows), [[1.0, 1.0]] * 3)
        with pytest.raises(TypeError, match="allreduce averages, so x must be float32"):
            fs.allreduce([1, 2])  # integers, as distributed
    finally:
        fs.shutdown()
