"""BlueFog's environment variables, read as BlueFog documents them (``bf.init()``)."""

from __future__ import annotations

import sys

import pytest

from tests import _jobs

MACHINES = """
import sys
import torch
import bluefog.torch as bf
from bluefog.common import topology_util

bf.init()
bf.set_machine_topology(topology_util.ExponentialGraph(bf.machine_size()))
y = bf.hierarchical_neighbor_allreduce(torch.full((2,), float(bf.rank())))
sys.stdout.write(f"{bf.rank()} {bf.local_size()} {bf.local_rank()} {bf.machine_size()} "
                 f"{bf.machine_rank()} {y.tolist()}\\n")
"""


def _rows(stdout: str) -> list[list[str]]:
    return sorted(line.split(" ", 5) for line in stdout.splitlines() if line.strip())


@pytest.mark.mpi
def test_nodes_per_machine_sets_the_machine_layout_under_mpi(tmp_path):
    job = _jobs.fogrun_script(
        tmp_path,
        MACHINES,
        4,
        options=("--bluefog",),
        timeout=120,
        env=_jobs.job_env(BLUEFOG_NODES_PER_MACHINE="2"),
    )
    job.check()
    # machines {0, 1} and {2, 3}; with two machines each averages the two machine means
    assert _rows(job.stdout) == [
        [str(r), "2", str(r % 2), "2", str(r // 2), "[1.5, 1.5]"] for r in range(4)
    ], job.describe()


def test_nodes_per_machine_as_spmd_agents(tmp_path):
    env = _jobs.job_env(BLUEFOG_NODES_PER_MACHINE="2")
    job = _jobs.fogrun_script(
        tmp_path, MACHINES, 4, options=("--bluefog", "--spmd"), timeout=120, env=env
    )
    job.check()
    assert [row[:5] for row in _rows(job.stdout)] == [
        [str(r), "2", str(r % 2), "2", str(r // 2)] for r in range(4)
    ], job.describe()


@pytest.mark.mpi
@pytest.mark.parametrize("value", ["two", "0", "3"])
def test_a_bad_nodes_per_machine_is_one_clear_error(tmp_path, value):
    job = _jobs.fogrun_script(
        tmp_path,
        MACHINES,
        4,
        options=("--bluefog",),
        timeout=120,
        env=_jobs.job_env(BLUEFOG_NODES_PER_MACHINE=value),
    )
    assert job.returncode not in (0, 124), job.describe()
    assert "fogrun: ranks 0-3: ValueError:" in job.stderr, job.describe()
    assert ("BLUEFOG_NODES_PER_MACHINE" if value != "3" else "local_size") in job.stderr, (
        job.describe()
    )
    assert job.stderr.count("Traceback") == 1, job.stderr


def test_fogsim_local_size_wins(monkeypatch):
    from fogsim.compat.bluefog import _api

    monkeypatch.setenv("BLUEFOG_NODES_PER_MACHINE", "2")
    assert _api._nodes_per_machine() == 2
    monkeypatch.setenv("FOGSIM_LOCAL_SIZE", "4")
    assert _api._nodes_per_machine() is None
    assert sys.modules["fogsim.compat.bluefog._api"] is _api


# -- bluefog.common.util.env ------------------------------------------------------------------
def test_env_sets_the_variables_for_the_block_and_restores_them(monkeypatch):
    import os

    from fogsim.compat.bluefog.common.util import env

    monkeypatch.setenv("FOGSIM_T_OLD", "old")
    monkeypatch.delenv("FOGSIM_T_NEW", raising=False)
    with pytest.raises(RuntimeError), env(FOGSIM_T_OLD="a", FOGSIM_T_NEW="b", FOGSIM_T_NONE=None):
        assert (os.environ["FOGSIM_T_OLD"], os.environ["FOGSIM_T_NEW"]) == ("a", "b")
        assert "FOGSIM_T_NONE" not in os.environ
        raise RuntimeError
    assert os.environ["FOGSIM_T_OLD"] == "old" and "FOGSIM_T_NEW" not in os.environ
    with pytest.raises(TypeError, match="FOGSIM_T_NEW must be a str"), env(FOGSIM_T_NEW=3):
        pass
    assert "FOGSIM_T_NEW" not in os.environ


def test_bluefog_common_util_is_an_alias_with_env():
    from fogsim.compat.bluefog.common import util
    from fogsim.run import _bluefog as _alias

    assert _alias.ALIASES["bluefog.common.util"] == util.__name__
    util.check_extension("torch", __file__, "torch", "mpi_lib")  # fogsim builds none
    assert util.mpi_built() in (True, False)
    assert util.extension_available("tensorflow") is False


# -- BLUEFOG_FUSION_THRESHOLD, BLUEFOG_TIMELINE, the notices -----------------------------------
def test_fusion_threshold_becomes_fogsims_and_fogsims_wins():
    from fogsim.compat.bluefog import _environ

    assert _environ.fusion_threshold({"BLUEFOG_FUSION_THRESHOLD": "1024"}) == 1024
    assert _environ.fusion_threshold({"BLUEFOG_FUSION_THRESHOLD": " 0 "}) == 0
    assert _environ.fusion_threshold({}) is None
    assert (
        _environ.fusion_threshold(
            {"BLUEFOG_FUSION_THRESHOLD": "1024", "FOGSIM_FUSION_THRESHOLD": "8"}
        )
        is None
    )
    for bad in ("64MB", "-1", "1.5"):
        with pytest.raises(ValueError, match=f"BLUEFOG_FUSION_THRESHOLD.*{bad!r}"):
            _environ.fusion_threshold({"BLUEFOG_FUSION_THRESHOLD": bad})


def test_fusion_threshold_reaches_the_settings_of_init(monkeypatch):
    import os

    import fogsim
    from fogsim import _settings
    from fogsim.compat.bluefog import _environ

    monkeypatch.delenv("FOGSIM_FUSION_THRESHOLD", raising=False)
    monkeypatch.setenv("BLUEFOG_FUSION_THRESHOLD", "4096")
    try:
        with _environ.init_environment():
            ctx = fogsim.init(backend="sim", size=2)
        assert ctx.settings.fusion_threshold == 4096 != _settings.DEFAULT_FUSION_THRESHOLD
        assert "FOGSIM_FUSION_THRESHOLD" not in os.environ  # only for the init
    finally:
        fogsim.shutdown()


def test_timeline_prefix_and_its_errors():
    from fogsim.compat.bluefog import _environ

    assert _environ.timeline_prefix({"BLUEFOG_TIMELINE": "/tmp/tl"}) == "/tmp/tl"
    assert _environ.timeline_prefix({}) is None
    assert _environ.timeline_prefix({"BLUEFOG_TIMELINE": "a", "FOGSIM_TIMELINE": "b"}) is None
    with pytest.raises(ValueError, match="BLUEFOG_TIMELINE must be a file prefix"):
        _environ.timeline_prefix({"BLUEFOG_TIMELINE": "  "})


def test_bluefog_timeline_makes_init_write_bluefogs_layout(tmp_path, monkeypatch):
    import json

    import numpy as np

    import fogsim
    import fogsim.compat.bluefog as bf
    from fogsim import timeline
    from fogsim._timeline_bluefog import BlueFogTimeline

    monkeypatch.delenv("FOGSIM_TIMELINE", raising=False)
    monkeypatch.setenv("BLUEFOG_TIMELINE", str(tmp_path / "bf"))
    monkeypatch.setenv("FOGSIM_BACKEND", "sim")
    monkeypatch.setenv("FOGSIM_SIZE", "4")
    try:
        bf.init()
        assert isinstance(timeline.active, BlueFogTimeline)
        bf.neighbor_allreduce(np.ones((4, 3)), name="x")
        text = (tmp_path / "bf.json").read_text()  # simulation: one file, before shutdown
    finally:
        fogsim.shutdown()
    assert '"name": "MPI_NEIGHBOR_ALLREDUCE"' in text and '"ENQUEUE_NEIGHBOR_ALLREDUCE"' in text
    assert json.loads((tmp_path / "bf.json").read_text())["traceEvents"]
    assert timeline.active is None


def test_bluefog_timeline_under_spmd_writes_one_file_per_agent(tmp_path, monkeypatch):
    import numpy as np

    import fogsim.compat.bluefog as bf
    from fogsim import spmd, timeline

    monkeypatch.delenv("FOGSIM_TIMELINE", raising=False)
    monkeypatch.setenv("BLUEFOG_TIMELINE", str(tmp_path / "bf"))

    def main():
        bf.init()
        bf.neighbor_allreduce(np.ones(3), name="x")
        bf.shutdown()

    spmd.run(main, size=3)
    for r in range(3):
        text = (tmp_path / f"bf{r}.json").read_text()
        assert '"name": "MPI_NEIGHBOR_ALLREDUCE", "ts":' in text, text
    assert timeline.active is None  # the agents' timelines stopped with their contexts


def test_a_no_effect_variable_gets_exactly_one_notice_on_rank_0(monkeypatch, capsys):
    from fogsim.compat.bluefog import _environ

    monkeypatch.setattr(_environ, "_noticed", set())
    env = {"BLUEFOG_CYCLE_TIME": "5", "BLUEFOG_UNKNOWN": "1", "BLUEFOG_TIMELINE": "x"}
    assert _environ.notice_no_effect(env, rank=1) == ["BLUEFOG_CYCLE_TIME"]
    assert capsys.readouterr().err == ""  # rank 1 prints nothing
    monkeypatch.setattr(_environ, "_noticed", set())
    assert _environ.notice_no_effect(env, rank=0) == ["BLUEFOG_CYCLE_TIME"]
    assert _environ.notice_no_effect(env, rank=0) == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BLUEFOG_CYCLE_TIME" in err and "no effect" in err, err


def test_init_gives_the_notice_once(monkeypatch, capsys):
    import fogsim
    import fogsim.compat.bluefog as bf
    from fogsim.compat.bluefog import _environ

    monkeypatch.setattr(_environ, "_noticed", set())
    monkeypatch.setenv("BLUEFOG_LOG_LEVEL", "info")
    monkeypatch.setenv("FOGSIM_BACKEND", "sim")
    monkeypatch.setenv("FOGSIM_SIZE", "4")
    try:
        bf.init()
        bf.init()
    finally:
        fogsim.shutdown()
    err = capsys.readouterr().err
    assert err.count("BLUEFOG_LOG_LEVEL is set but has no effect in fogsim") == 1, err


def test_every_documented_variable_is_in_the_table():
    from fogsim.compat.bluefog import _environ

    for name in (*_environ.HONOURED, *_environ.NO_EFFECT):
        assert f"``{name}``" in _environ.__doc__, name
