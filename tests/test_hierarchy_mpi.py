"""Decomposed allreduce and hierarchical ops under mpiexec at 12, 8 and 6 processes.

Each job emulates machines (``fogrun --local-size``), runs the decomposed allreduce with the
factors of the issue (12 = 3 x 2 x 2, 8 = 2 x 2 x 2, 6 = 3 x 2), the machine-hierarchy
default, a machine-local allreduce and a hierarchical neighbor allreduce, and writes every
agent's results; the test compares them with the simulator, bit for bit, and with numpy.
Factors that do not multiply to the number of processes must raise on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from tests._jobs import fogrun_script

SCRIPT = """
import sys
import numpy as np
from mpi4py import MPI
import fogsim as fs

factors = tuple(int(f) for f in sys.argv[2].split("x"))
fs.init()
assert fs.local_size() == factors[0], fs.local_size()


def data(r):
    return np.random.default_rng(r).standard_normal(37)  # not a multiple of any factor


x = fs.local(data)
results = {
    "decomposed": fs.allreduce(x, algorithm="decomposed", factors=factors),
    "reversed": fs.allreduce(x, average=False, factors=factors[::-1]),
    "machines": fs.allreduce(x, algorithm="decomposed"),
    "local": fs.allreduce(x, is_hierarchical_local=True),
    "hierarchical": fs.hierarchical_neighbor_allreduce(x),
}
try:
    fs.allreduce(x, factors=(fs.size() + 1,))
    raised = "nothing"
except ValueError as exc:
    raised = str(exc)
views = {k: fs.global_view(v) for k, v in results.items()}
messages = MPI.COMM_WORLD.gather(raised, root=0)
if fs.is_main_process():
    np.savez(sys.argv[1], messages=np.array(messages), **views)
fs.shutdown()
"""


def _simulated(n: int, factors: tuple[int, ...]) -> dict[str, np.ndarray]:
    x = np.stack([np.random.default_rng(r).standard_normal(37) for r in range(n)])
    with fs.Context(backend="sim", size=n, local_size=factors[0]) as world:
        out = {
            "decomposed": fs.allreduce(x, algorithm="decomposed", factors=factors),
            "reversed": fs.allreduce(x, average=False, factors=factors[::-1]),
            "machines": fs.allreduce(x, algorithm="decomposed"),
            "local": fs.allreduce(x, is_hierarchical_local=True),
            "hierarchical": fs.hierarchical_neighbor_allreduce(x),
        }
    world.close()
    out["data"] = x
    return out


@pytest.mark.mpi
@pytest.mark.parametrize(
    "factors", [(3, 2, 2), (2, 2, 2), (3, 2)], ids=lambda f: "x".join(map(str, f))
)
def test_decomposed_and_hierarchical_ops_under_mpi_match_the_simulator(factors, tmp_path):
    n = int(np.prod(factors))
    out = tmp_path / "out.npz"
    run = fogrun_script(
        tmp_path,
        SCRIPT,
        n,
        str(out),
        "x".join(map(str, factors)),
        options=("--local-size", str(factors[0])),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got, sim = np.load(out), _simulated(n, factors)
    for key in ("decomposed", "reversed", "machines", "local", "hierarchical"):
        np.testing.assert_array_equal(got[key], sim[key], err_msg=key)
    data = sim["data"]
    np.testing.assert_allclose(got["decomposed"], np.tile(data.mean(0), (n, 1)), rtol=1e-13)
    np.testing.assert_allclose(got["reversed"], np.tile(data.sum(0), (n, 1)), rtol=1e-12)
    messages = list(got["messages"])
    assert len(messages) == n and len(set(messages)) == 1, messages
    assert f"multiply to {n + 1}, but there are {n} processes" in messages[0]
