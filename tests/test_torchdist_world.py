"""The torch.distributed backend in process: where the ranks meet, from the launcher's
variables (no communication; the ops themselves: tests/test_torchdist.py)."""

from __future__ import annotations

import pytest

from fogsim import _settings
from fogsim.backends.torchdist import _world

_TORCHRUN = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1234"}


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, (0, 1, "127.0.0.1", 0, "tcp", True)),
        # torchrun's variables: rank 0 serves the store (fogsim opens it) ...
        (_TORCHRUN, (1, 4, "h", 1234, "tcp", False)),
        # ... unless torchrun's agent serves it
        ({**_TORCHRUN, "TORCHELASTIC_USE_AGENT_STORE": "True"}, (1, 4, "h", 1234, "env", False)),
        ({**_TORCHRUN, "LOCAL_WORLD_SIZE": "4"}, (1, 4, "h", 1234, "tcp", True)),
        ({**_TORCHRUN, "LOCAL_WORLD_SIZE": "2"}, (1, 4, "h", 1234, "tcp", False)),
        ({**_TORCHRUN, "FOGSIM_TORCH_PORT": "999"}, (1, 4, "h", 999, "tcp", False)),
        (
            {**_TORCHRUN, "MASTER_ADDR": "localhost"},
            (1, 4, "localhost", 1234, "tcp", True),
        ),
        (
            {"PMI_RANK": "2", "PMI_SIZE": "3", "MASTER_PORT": "1234"},
            (2, 3, "127.0.0.1", 1234, "tcp", True),
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "FOGSIM_TORCH_PORT": "7"},
            (1, 2, "127.0.0.1", 7, "tcp", True),
        ),
        (
            {"PMI_RANK": "0", "PMI_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "7"},
            (0, 2, "10.0.0.1", 7, "tcp", False),
        ),
    ],
)
def test_endpoint_from_the_launcher_variables(env, want):
    ep = _world.endpoint(_settings.load(env))
    assert (ep.rank, ep.size, ep.addr, ep.port, ep.how, ep.one_host) == want


def test_endpoint_under_mpi_without_a_port(monkeypatch):
    env = {"PMI_RANK": "0", "PMI_SIZE": "2", "SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}
    ep = _world.endpoint(_settings.load(env))
    # rank 0 picks, MPI tells (and whether the ranks share one host)
    assert (ep.how, ep.port, ep.addr, ep.one_host) == ("mpi", None, None, None)
    monkeypatch.setattr(_world.importlib.util, "find_spec", lambda name: None)  # no mpi4py
    ep = _world.endpoint(_settings.load(env))
    assert ep.how == "tcp" and ep.port == _world.default_port("77.3")
    assert _world.BASE_PORT <= ep.port < _world.BASE_PORT + 1000


def test_default_port_is_the_same_for_one_job():
    assert _world.default_port("job-1") == _world.default_port("job-1")
    assert _world.default_port(None, parent_pid=41) == _world.default_port(None, parent_pid=41)
    assert len({_world.default_port(f"job-{k}") for k in range(50)}) > 40


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a TCP port"),
        ({"FOGSIM_TORCH_PORT": "x"}, "FOGSIM_TORCH_PORT='x' is not an integer"),
        ({"RANK": "-1"}, "RANK=-1 must be >= 0"),
    ],
)
def test_bad_torch_settings(env, match):
    with pytest.raises(ValueError, match=match):
        _settings.load(env)


def test_rank_out_of_range_is_refused():
    env = {"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    with pytest.raises(ValueError, match="RANK=4 is out of range for a job of 4 processes"):
        _world.endpoint(_settings.load(env))
