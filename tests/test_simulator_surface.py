"""Simulator-only features reach the simulator through Context.simulator, which names the
feature and the backend when the world is not simulated (under MPI, on every rank)."""

from __future__ import annotations

import pytest

import fogsim as fs
from fogsim import faults
from tests._jobs import fogrun_script


def test_simulated_world_hands_out_its_simulator():
    with fs.Context(backend="sim", size=4) as ctx:
        assert ctx.is_simulated
        assert ctx.simulator("faults.inject") is ctx.backend
        f = faults.inject(link_drop=0.5, seed=1)
        assert faults.current() is f
        faults.clear()
        assert faults.current() is None
    ctx.close()


SCRIPT = """
import sys
import fogsim as fs
from fogsim import faults
from fogsim.hierarchy import cost

ctx = fs.init()
lines = [f"simulated {ctx.is_simulated}"]
for what, call in (("faults.inject", lambda: faults.inject(link_drop=0.1)),
                   ("attach_cost_model",
                    lambda: cost.attach_cost_model(cost.Network.cluster(fs.size(), 1)))):
    try:
        call()
        lines.append(f"{what} no error")
    except ValueError as exc:
        lines.append(f"{what} {str(exc).startswith(what + ' is for the simulator')} "
                     f"{'mpi backend' in str(exc)}")
faults.clear()  # nothing to clear: no error
cost.detach_cost_model()
lines.append(f"current {faults.current()}")
sys.stdout.write("".join(f"rank {fs.rank()} {line}\\n" for line in lines))
"""


@pytest.mark.mpi
def test_simulator_features_refuse_other_backends_on_every_rank(tmp_path):
    job = fogrun_script(tmp_path, SCRIPT, 2, timeout=120)
    job.check()
    for r in range(2):
        mine = [
            line.split(" ", 2)[2]
            for line in job.stdout.splitlines()
            if line.startswith(f"rank {r} ")
        ]
        assert mine == [
            "simulated False",
            "faults.inject True True",
            "attach_cost_model True True",
            "current None",
        ], job.describe()
