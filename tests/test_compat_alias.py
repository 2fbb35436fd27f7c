"""BlueFog code runs unchanged: ``import bluefog.torch as bf`` under ``fogrun --bluefog``,
``python -m fogsim.compat.bluefog``, or after ``fogsim.compat.bluefog.install()``."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests import _jobs, environment

# Written as BlueFog's documentation writes its examples: nothing of fogsim in it.
BLUEFOG_SCRIPT = """
import sys
import torch
import bluefog.torch as bf
from bluefog.common import topology_util

bf.init()
bf.set_topology(topology_util.RingGraph(bf.size()))
x = torch.full((3,), float(bf.rank()))
y = bf.neighbor_allreduce(x)
members = {bf.rank(), *bf.in_neighbor_ranks()}
expected = sum(float(r) for r in members) / len(members)
ok = all(abs(v - expected) < 1e-6 for v in y.tolist())
sys.stdout.write(f"rank {bf.rank()} of {bf.size()}: {ok}\\n")  # one write: ranks do not mix
"""


def _lines(stdout: str) -> list[str]:
    return sorted(line for line in stdout.splitlines() if line.strip())


@pytest.fixture
def clean_modules():
    saved = {k: v for k, v in sys.modules.items() if k == "bluefog" or k.startswith("bluefog.")}
    yield
    from fogsim.compat.bluefog import uninstall

    uninstall()
    for k in [k for k in sys.modules if k == "bluefog" or k.startswith("bluefog.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_install_registers_bluefogs_module_names(clean_modules):
    import fogsim.compat.bluefog as fb
    import fogsim.compat.bluefog.torch as fbt

    fb.install()
    fb.install()  # twice: nothing changes
    bf = importlib.import_module("bluefog.torch")
    common = importlib.import_module("bluefog.common")
    tu = importlib.import_module("bluefog.common.topology_util")
    assert bf is fbt and common.topology_util is tu is fb.topology_util
    assert bf.neighbor_allreduce is fb.neighbor_allreduce
    assert bf.DistributedAdaptThenCombineOptimizer is fb.DistributedAdaptThenCombineOptimizer
    from bluefog.common import topology_util

    assert topology_util.ExponentialTwoGraph(8).number_of_nodes() == 8
    fb.uninstall()
    assert "bluefog" not in sys.modules and "bluefog.torch" not in sys.modules


def test_a_real_bluefog_is_not_shadowed_unless_asked(clean_modules, tmp_path, monkeypatch):
    package = tmp_path / "bluefog"
    package.mkdir()
    (package / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fogsim.compat.bluefog as fb

    with pytest.raises(ImportError, match=r"a real BlueFog is installed \(.*bluefog.*force=True"):
        fb.install()
    assert "bluefog.torch" not in sys.modules
    assert importlib.import_module("bluefog").REAL  # still the real one
    fb.install(force=True)
    assert not hasattr(importlib.import_module("bluefog"), "REAL")
    assert importlib.import_module("bluefog.torch").size is fb.size


@pytest.mark.mpi
def test_fogrun_bluefog_runs_bluefog_code_unchanged_under_mpi(tmp_path):
    job = _jobs.fogrun_script(tmp_path, BLUEFOG_SCRIPT, 3, options=("--bluefog",), timeout=120)
    job.check()
    assert _lines(job.stdout) == [f"rank {r} of 3: True" for r in range(3)]


def test_fogrun_bluefog_runs_it_as_spmd_agents_too(tmp_path):
    job = _jobs.fogrun_script(
        tmp_path, BLUEFOG_SCRIPT, 4, options=("--bluefog", "--spmd"), timeout=120
    )
    job.check()
    assert _lines(job.stdout) == [f"rank {r} of 4: True" for r in range(4)]


def test_without_the_alias_bluefog_is_not_there(tmp_path):
    job = _jobs.fogrun_script(tmp_path, BLUEFOG_SCRIPT, 2, options=("--spmd",), timeout=120)
    assert job.returncode != 0 and "No module named 'bluefog'" in job.stderr, job.describe()


@pytest.mark.mpi
def test_python_m_fogsim_compat_bluefog_under_mpiexec(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(BLUEFOG_SCRIPT)
    environment.require_mpiexec()
    job = _jobs.run(
        [
            str(_jobs.MPIEXEC),
            "-n",
            "2",
            sys.executable,
            "-m",
            "mpi4py",
            "-m",
            "fogsim.compat.bluefog",
            str(script),
        ],
        timeout=120,
        env=_jobs.job_env(),
    )
    job.check()
    assert _lines(job.stdout) == [f"rank {r} of 2: True" for r in range(2)]
