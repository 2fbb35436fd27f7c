"""``fogrun --sim -np N --shards P``: one simulation of N agents over P MPI processes;
command and environment building, pure (a real launch: tests/test_fogrun_launch.py)."""

from __future__ import annotations

import sys

import pytest

from fogsim import run as fr
from fogsim.run import _launch, _mpi
from tests.test_fogrun import MPICH, NO_MPI, OPENMPI, opts


def test_sim_shards_runs_one_simulation_over_p_mpi_processes():
    o = opts("--sim", "-np", "1000", "--shards", "4", "python", "s.py", "--shards", "9")
    assert o.command == ("python", "s.py", "--shards", "9")  # the script's own option
    argv, env = fr.build_command(o, {"FOGSIM_BACKEND": "mpi", "FOGSIM_SIZE": "7"}, MPICH)
    assert argv == [
        "/opt/mpi/bin/mpiexec",
        "-n",
        "4",
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "fogsim.run._rank",
        "s.py",
        "--shards",
        "9",
    ]
    assert env == {
        "FOGSIM_BACKEND": "sim",
        "FOGSIM_SIZE": "1000",
        "FOGSIM_SHARDS": "4",
        "NUMBA_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    # Open MPI: every host's processes get the simulation's size and shard count.
    argv, env = fr.build_command(o, {}, OPENMPI)
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert {"FOGSIM_BACKEND", "FOGSIM_SIZE", "FOGSIM_SHARDS"} <= set(exported)
    assert argv[:3] == ["/opt/ompi/bin/mpiexec", "-n", "4"]
    assert env["OMPI_MCA_btl"] == "self,sm"


def test_sim_shards_takes_the_mpi_options():
    o = opts(
        "--sim",
        "-np",
        "10",
        "--shards",
        "2",
        "--hosts",
        "a,b",
        "--extra-mpi-flags",
        "-v",
        "./a.out",
    )
    argv, env = fr.build_command(o, {"OMP_NUM_THREADS": "4"}, MPICH)
    assert argv == ["/opt/mpi/bin/mpiexec", "-n", "2", "-hosts", "a,b", "-v", "./a.out"]
    assert env["OMP_NUM_THREADS"] == "4"  # the user's thread count still wins


def test_sim_shards_needs_mpi():
    with pytest.raises(fr.LaunchError, match="no MPI found"):
        fr.build_command(opts("--sim", "-np", "8", "--shards", "2", "python", "s.py"), {}, None)


def test_one_shard_is_plain_sim():
    plain = opts("--sim", "-np", "8", "python", "s.py")
    one = opts("--sim", "-np", "8", "--shards", "1", "python", "s.py")
    assert (plain.shards, one.shards) == (1, 1)
    assert fr.build_command(one, {}, None) == fr.build_command(plain, {}, None)
    assert "FOGSIM_SHARDS" not in fr.build_command(plain, {}, None)[1]
    # A FOGSIM_SHARDS left in the shell would have one process wait for absent peers.
    _, env = fr.build_command(plain, {"FOGSIM_SHARDS": "4"}, None)
    assert env["FOGSIM_SHARDS"] == "1"


def test_sim_shards_dry_run(monkeypatch, capsys):
    monkeypatch.setattr(_mpi, "find_mpi", lambda environ: MPICH)
    monkeypatch.setattr(_launch.subprocess, "Popen", None)  # would fail if anything ran
    assert fr.main(["--sim", "--dry-run", "-np", "1000", "--shards", "2", "python", "s.py"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert {"FOGSIM_BACKEND=sim", "FOGSIM_SIZE=1000", "FOGSIM_SHARDS=2"} <= set(lines)
    assert lines[-1] == (
        f"/opt/mpi/bin/mpiexec -n 2 {sys.executable} -m mpi4py -m fogsim.run._rank s.py"
    )


def test_sim_shards_without_mpi_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(_mpi, "find_mpiexec", lambda environ: None)
    assert fr.main(["--sim", "--dry-run", "-np", "8", "--shards", "2", "python", "s.py"]) == 2
    assert capsys.readouterr().err == NO_MPI + "\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-np", "4", "--shards", "2", "python", "s.py"], "--shards needs --sim"),
        (["--spmd", "-np", "4", "--shards", "2", "python", "s.py"], "--shards needs --sim"),
        (["--sim", "-np", "3", "--shards", "4", "python", "s.py"], "--shards 4 is more processes"),
        (["--sim", "-np", "3", "--shards", "0", "python", "s.py"], "0 is not >= 1"),
        (["--sim", "-np", "3", "--shards", "two", "python", "s.py"], "not an integer"),
    ],
)
def test_bad_shards_are_usage_errors(argv, message, capsys):
    assert fr.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fogrun")
    assert message in err
