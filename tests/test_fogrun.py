"""The ``fogrun`` launcher: command and environment building, pure (real launches:
tests/test_fogrun_launch.py)."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fogsim import run as fr
from fogsim.run import _launch, _mpi

ROOT = Path(__file__).resolve().parent.parent
NO_MPI = (
    "fogrun: no MPI found; install it with: pip install 'fogsim[mpi]' (mpi4py and the mpich wheel)"
)
MPICH = fr.MPIInfo(mpiexec="/opt/mpi/bin/mpiexec", implementation=fr.MPICH)
OPENMPI = fr.MPIInfo(mpiexec="/opt/ompi/bin/mpiexec", implementation=fr.OPENMPI)
OPENMPI4 = fr.MPIInfo("/usr/bin/mpiexec", fr.OPENMPI, "4.1.2")


def opts(*args: str) -> fr.Options:
    return fr.parse_args(list(args))


# ---------------------------------------------------------------- the command, pure


def test_public_namespace():
    assert set(fr.__all__) == {
        "MPICH",
        "OPENMPI",
        "UNKNOWN",
        "TIMEOUT_EXIT_CODE",
        "LaunchError",
        "MPIInfo",
        "Options",
        "build_command",
        "env_changes",
        "find_mpi",
        "find_mpiexec",
        "implementation",
        "is_python",
        "main",
        "make_parser",
        "parse_args",
        "run",
        "with_mpi4py",
    }
    for name in fr.__all__:
        assert hasattr(fr, name), name


def test_mpich_command():
    o = opts(
        "-np",
        "4",
        "--hosts",
        "a,b",
        "--extra-mpi-flags",
        "-genv A 'x y' -v",
        "python",
        "train.py",
        "--lr",
        "0.1",
    )
    argv, env = fr.build_command(o, {"PATH": "/bin"}, MPICH)
    assert argv == [
        "/opt/mpi/bin/mpiexec",
        "-n",
        "4",
        "-hosts",
        "a,b",
        "-genv",
        "A",
        "x y",
        "-v",
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "fogsim.run._rank",
        "train.py",
        "--lr",
        "0.1",
    ]
    assert env == {
        "PATH": "/bin",
        "FOGSIM_BACKEND": "mpi",
        "NUMBA_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def test_openmpi_command_and_laptop_environment():
    o = opts("-np", "3", "--hosts", "n1:2,n2:1", "--local-size", "2", "python3", "-m", "pkg.mod")
    argv, env = fr.build_command(o, {}, OPENMPI)
    assert argv == [
        "/opt/ompi/bin/mpiexec",
        "-n",
        "3",
        "--host",
        "n1:2,n2:1",
        "-x",
        "FOGSIM_BACKEND",
        "-x",
        "FOGSIM_LOCAL_SIZE",
        "-x",
        "NUMBA_NUM_THREADS",
        "-x",
        "OMP_NUM_THREADS",
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "fogsim.run._rank",
        "-m",
        "pkg.mod",
    ]
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert env["PRTE_MCA_rmaps_default_mapping_policy"] == ":oversubscribe"
    assert (env["OMPI_MCA_osc"], env["OMPI_MCA_pml"]) == ("^ucx", "ob1")
    assert env["OMPI_MCA_btl"] == "self,sm,tcp"  # several hosts need a network transport
    assert env["FOGSIM_LOCAL_SIZE"] == "2"
    _, env = fr.build_command(opts("-np", "3", "python", "s.py"), {}, OPENMPI)
    assert env["OMPI_MCA_btl"] == "self,sm"


def test_openmpi4_gets_its_own_names():
    # ORTE has no PRRTE mapping policy, and its shared-memory transport is "vader": asked
    # for "sm", Open MPI 4 stops at a stub that says so.
    _, env = fr.build_command(opts("-np", "3", "python", "s.py"), {}, OPENMPI4)
    assert not [k for k in env if k.startswith("PRTE_")]
    assert env["OMPI_MCA_rmaps_base_oversubscribe"] == "1"
    assert (env["OMPI_MCA_btl"], env["OMPI_MCA_pml"], env["OMPI_MCA_osc"]) == (
        "self,vader",
        "ob1",
        "^ucx",
    )
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    argv, env = fr.build_command(opts("--hosts", "a,b", "-np", "3", "s.py"), {}, OPENMPI4)
    assert env["OMPI_MCA_btl"] == "self,vader,tcp"
    assert argv[:5] == ["/usr/bin/mpiexec", "-n", "3", "--host", "a,b"]
    # An Open MPI whose version could not be read gets the current (5) names.
    _, env = fr.build_command(opts("-np", "3", "s.py"), {}, fr.MPIInfo("/m", fr.OPENMPI))
    assert env["OMPI_MCA_btl"] == "self,sm"
    assert (OPENMPI4.major, fr.MPIInfo("/m", fr.MPICH, "2021.10").major, OPENMPI.major) == (
        4,
        2021,
        None,
    )


def test_options_stop_at_the_command():
    o = opts(
        "-np",
        "2",
        "--extra-mpi-flags",
        "-v",
        "--",
        "python",
        "s.py",
        "-np",
        "9",
        "--sim",
        "--extra-mpi-flags",
        "-x",
    )
    assert (o.np, o.sim, o.extra_mpi_flags) == (2, False, "-v")
    assert o.command == ("python", "s.py", "-np", "9", "--sim", "--extra-mpi-flags", "-x")
    assert opts("-n", "3", "--extra-mpi-flags=-a -b", "./a.out").extra_mpi_flags == "-a -b"


def test_mpich_gets_no_openmpi_variables():
    _, env = fr.build_command(opts("-np", "2", "python", "s.py"), {}, MPICH)
    assert not [k for k in env if k.startswith(("OMPI_", "PRTE_"))]


def test_user_variables_win_over_defaults():
    user = {
        "OMP_NUM_THREADS": "8",
        "NUMBA_NUM_THREADS": "2",
        "OMPI_MCA_btl": "self,tcp",
        "OMPI_MCA_pml": "ucx",
        "FOGSIM_BACKEND": "torch",
    }
    o = opts("-np", "2", "python", "s.py")
    argv, env = fr.build_command(o, user, OPENMPI)
    for name, value in user.items():
        assert env[name] == value
    changes = fr.env_changes(o, user, OPENMPI)
    assert not set(changes) & set(user)
    # Nothing set by fogrun needs exporting; the user's fogsim setting still goes to every host.
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-x"] == ["FOGSIM_BACKEND"]


def test_openmpi_exports_every_fogsim_setting():
    # Open MPI gives its environment to the ranks on this host only; a FOGSIM_SEED that
    # reached some ranks and not others would change the numbers.
    user = {"FOGSIM_SEED": "3", "FOGSIM_TIMELINE": "t x/", "PYTHONPATH": "/src", "HOME": "/h"}
    o = opts("-np", "4", "--hosts", "a,b", "python", "s.py")
    argv, env = fr.build_command(o, user, OPENMPI)
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exported == [
        "FOGSIM_BACKEND",
        "FOGSIM_SEED",
        "FOGSIM_TIMELINE",
        "NUMBA_NUM_THREADS",
        "OMP_NUM_THREADS",
    ]
    assert env["FOGSIM_TIMELINE"] == "t x/"  # -x NAME: the value travels in the environment
    argv, _ = fr.build_command(o, user, MPICH)  # Hydra passes the whole environment itself
    assert "-x" not in argv


def test_openmpi_exports_where_torch_ranks_meet_and_listen():
    # the torch backend's ranks on every host must meet at one MASTER_ADDR and bind gloo
    # to the interface the user named
    user = {"MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29500", "GLOO_SOCKET_IFNAME": "eth1"}
    o = opts("-np", "4", "--hosts", "a,b", "python", "s.py")
    argv, _ = fr.build_command(o, {**user, "HOME": "/h"}, OPENMPI)
    exported = {argv[i + 1] for i, a in enumerate(argv) if a == "-x"}
    assert set(user) <= exported and "HOME" not in exported


def test_explicit_options_override_user_variables():
    user = {"FOGSIM_BACKEND": "mpi", "FOGSIM_SIZE": "7", "FOGSIM_TIMELINE": "old"}
    o = opts("--sim", "-np", "5", "--timeline-filename", "tl/run", "python", "s.py")
    _, env = fr.build_command(o, user)
    assert (env["FOGSIM_BACKEND"], env["FOGSIM_SIZE"], env["FOGSIM_TIMELINE"]) == (
        "sim",
        "5",
        "tl/run",
    )


def test_sim_runs_one_process_without_mpi():
    o = opts(
        "--sim", "-np", "1000", "--hosts", "a,b", "--extra-mpi-flags", "-v", "python", "s.py", "-x"
    )
    argv, env = fr.build_command(o, {"OMP_NUM_THREADS": "4"}, None)
    assert argv == [sys.executable, "s.py", "-x"]
    assert env == {"OMP_NUM_THREADS": "4", "FOGSIM_BACKEND": "sim", "FOGSIM_SIZE": "1000"}
    assert "NUMBA_NUM_THREADS" not in env  # one process: its thread pools do not collide


def test_spmd_runs_the_script_per_agent_in_threads_without_mpi():
    o = opts("--spmd", "-np", "8", "--local-size", "2", "python", "s.py", "-x", "--y")
    argv, env = fr.build_command(o, {"FOGSIM_BACKEND": "mpi"}, None)
    assert argv == [
        sys.executable,
        "-m",
        "fogsim.spmd",
        "-np",
        "8",
        "--local-size",
        "2",
        "--",
        "s.py",
        "-x",
        "--y",
    ]
    assert env["FOGSIM_SIZE"] == "8" and env["FOGSIM_LOCAL_SIZE"] == "2"


@pytest.mark.parametrize("command", [("python", "-c", "print(1)"), ("s.py",), ("python",)])
def test_spmd_wants_a_python_script(command):
    with pytest.raises(fr.LaunchError, match="--spmd runs a Python script once per agent"):
        fr.build_command(opts("--spmd", "-np", "2", *command), {}, None)


def test_sim_and_spmd_exclude_each_other(capsys):
    assert fr.main(["--sim", "--spmd", "-np", "2", "python", "s.py"]) == 2
    assert "--sim and --spmd exclude each other" in capsys.readouterr().err


def test_mpi_mode_without_mpi_is_refused():
    with pytest.raises(fr.LaunchError, match="no MPI found"):
        fr.build_command(opts("-np", "2", "python", "s.py"), {}, None)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python s.py a", "PY -m mpi4py -m fogsim.run._rank s.py a"),
        ("python3 -m pkg.mod --x", "PY -m mpi4py -m fogsim.run._rank -m pkg.mod --x"),
        ("python -c code -m y", "PY -m mpi4py -m fogsim.run._rank -c code -m y"),
        (
            "python -u -X dev -W error s.py",
            "PY -u -X dev -W error -m mpi4py -m fogsim.run._rank s.py",
        ),
        ("python -uc code", "PY -u -m mpi4py -m fogsim.run._rank -c code"),
        ("python -mpkg", "PY -m mpi4py -m fogsim.run._rank -m pkg"),
        ("python -Wignore -B s.py", "PY -Wignore -B -m mpi4py -m fogsim.run._rank s.py"),
        ("python -- s.py", "PY -m mpi4py -m fogsim.run._rank s.py"),
        ("python - a", "PY -m mpi4py -m fogsim.run._rank - a"),
        ("python -m mpi4py s.py", "PY -m mpi4py s.py"),
        ("python -m mpi4py.run -m m", "PY -m mpi4py.run -m m"),
        ("python3.11 s.py", "python3.11 -m mpi4py s.py"),
        ("/usr/bin/python3 s.py", "/usr/bin/python3 -m mpi4py s.py"),
        ("PY s.py", "PY -m mpi4py -m fogsim.run._rank s.py"),
        ("./a.out -m x", "./a.out -m x"),
        ("pythonista s.py", "pythonista s.py"),
        ("hostname", "hostname"),
    ],
)
def test_mpi4py_insertion(command, expected):
    words = [sys.executable if w == "PY" else w for w in command.split()]
    argv, _ = fr.build_command(fr.Options(np=2, command=tuple(words)), {}, MPICH)
    assert argv[:3] == [MPICH.mpiexec, "-n", "2"]
    assert argv[3:] == [sys.executable if w == "PY" else w for w in expected.split()]


def test_is_python():
    for word in ("python", "python3", "python3.11", "/x/bin/python3.12", sys.executable):
        assert fr.is_python(word), word
    for word in ("pythonista", "ipython", "py", "python3.", "mpiexec"):
        assert not fr.is_python(word), word


def test_argument_list_never_a_shell_string():
    tricky = ("python", "s.py", "$HOME", "a b", "'q'", ";", "rm -rf /", "*")
    for mpi, sim in ((MPICH, False), (OPENMPI, False), (None, True)):
        o = fr.Options(np=2, command=tricky, sim=sim, extra_mpi_flags="-a 'b c'")
        argv, env = fr.build_command(o, {}, mpi)
        assert isinstance(argv, list)
        assert all(isinstance(a, str) for a in argv)
        assert argv[-6:] == list(tricky[2:])  # passed through word for word
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


def test_run_passes_a_list_without_shell(monkeypatch):
    calls = []

    class FakePopen:
        def __init__(self, args, **kwargs):
            calls.append((args, kwargs))
            self.pid, self.returncode = 12345, 7
            self.stdout, self.stderr = io.BytesIO(b"out\n"), io.BytesIO(b"PID 12345 died\n")

        def wait(self, timeout=None):
            return 7

        def poll(self):
            return 7

    monkeypatch.setattr(_mpi, "find_mpi", lambda environ: MPICH)
    monkeypatch.setattr(_launch.subprocess, "Popen", FakePopen)
    assert fr.main(["-np", "2", "python", "s.py", "a b"]) == 7
    [(args, kwargs)] = calls
    assert args == [
        MPICH.mpiexec,
        "-n",
        "2",
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "fogsim.run._rank",
        "s.py",
        "a b",
    ]
    assert kwargs.get("shell", False) is False
    assert kwargs["start_new_session"] is True
    assert kwargs["env"]["OMP_NUM_THREADS"] == os.environ.get("OMP_NUM_THREADS", "1")
    assert os.path.basename(kwargs["env"]["FOGSIM_RANK_DIR"]).startswith("fogrun-ranks-")


def test_a_dead_process_is_named_by_its_rank(tmp_path, capsys):
    (tmp_path / "4242").write_text("3")
    dead: list[str] = []
    out = io.StringIO()
    _launch._relay(
        io.BytesIO(b"=   BAD TERMINATION\n=   PID 4242 RUNNING AT vm\n= EXIT"), out, dead
    )
    assert out.getvalue().startswith("=   BAD TERMINATION") and dead == ["4242"]
    _launch._name_dead_ranks(dead + ["999"], str(tmp_path))  # 999: not a rank, not named
    err = capsys.readouterr().err
    assert err == "fogrun: rank 3 (process 4242) died and ended the job\n"


def _rank_process(rank_dir, rank, then):
    code = (
        f"from fogsim.run import _liveness; import os, sys, time\n"
        f"_liveness.report_alive({str(rank_dir)!r}, {rank})\n{then}\n"
    )
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_UNIX"), reason="needs Unix sockets")
def test_the_watch_names_the_rank_that_vanished_first_without_a_goodbye(tmp_path):
    from fogsim.run import _liveness

    watch = _liveness.Watch(str(tmp_path))
    try:
        fine = _rank_process(tmp_path, 0, "sys.exit(3)")  # exits through atexit: a goodbye
        assert fine.wait(30) == 3
        first = _rank_process(tmp_path, 2, "time.sleep(0.5); os._exit(1)")  # no goodbye
        later = _rank_process(tmp_path, 1, "time.sleep(60)")
        assert first.wait(30) == 1
        time.sleep(0.3)
        later.kill()
        later.wait(30)
    finally:
        watch.close()
    assert watch.first_dead() == [(2, first.pid, "died")]


@pytest.mark.skipif(not hasattr(__import__("socket"), "AF_UNIX"), reason="needs Unix sockets")
def test_a_rank_that_raises_is_named_before_the_ranks_its_abort_takes_down(tmp_path):
    from fogsim.run import _liveness

    watch = _liveness.Watch(str(tmp_path))
    try:
        raising = _rank_process(tmp_path, 1, "time.sleep(0.3); raise RuntimeError('no')")
        waiting = _rank_process(tmp_path, 0, "time.sleep(60)")
        assert raising.wait(30) == 1
        time.sleep(0.3)
        waiting.kill()  # as the launcher's clean-up would, once the other rank aborted
        waiting.wait(30)
    finally:
        watch.close()
    assert watch.first_dead() == [(1, raising.pid, "failed")]


def test_ranks_gone_at_once_are_told_apart_by_the_launchers_report(tmp_path, capsys):
    _launch._name_dead_ranks(["20"], str(tmp_path), [(0, 10, "died"), (1, 20, "died")])
    assert capsys.readouterr().err == "fogrun: rank 1 (process 20) died and ended the job\n"
    _launch._name_dead_ranks([], str(tmp_path), [(0, 10, "died"), (1, 20, "failed")])
    assert capsys.readouterr().err == (
        "fogrun: ranks 0, 1 ended at the same moment, and with them the job\n"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HYDRA build details:\n    Version:   5.0.2\n", fr.MPICH),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", fr.MPICH),
        ("mpiexec (Open MPI) 5.0.5\n\nReport bugs to https://www.open-mpi.org/", fr.OPENMPI),
        ("mpiexec (OpenRTE) 4.1.2\n", fr.OPENMPI),
        ("prterun (PRRTE) 3.0.6", fr.OPENMPI),
        ("something else 1.0", fr.UNKNOWN),
    ],
)
def test_implementation_from_version_text(text, expected):
    assert fr.implementation(text) == expected


def _fake_mpiexec(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mpiexec"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.skipif(os.name != "posix", reason="fake mpiexec is a shell script")
def test_mpiexec_next_to_the_interpreter_comes_first(tmp_path, monkeypatch):
    venv = tmp_path / "venv" / "bin"
    on_path = _fake_mpiexec(tmp_path / "system", "HYDRA build details:")
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    assert fr.find_mpiexec({"PATH": str(on_path.parent)}) == str(on_path)
    mine = _fake_mpiexec(venv, "mpiexec (Open MPI) 5.0.5")
    assert fr.find_mpiexec({"PATH": str(on_path.parent)}) == str(mine)
    assert fr.find_mpi({"PATH": ""}) == fr.MPIInfo(str(mine), fr.OPENMPI, "5.0.5")
    assert fr.find_mpiexec({"PATH": str(tmp_path / "nowhere")}) == str(mine)
    mine.unlink()
    assert fr.find_mpi({"PATH": str(tmp_path / "nowhere")}) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # MPICH's own Hydra reports every process's exit status when asked
        ("HYDRA build details:\n    Version:   5.0.2\n", (fr.MPICH, "5.0.2", True)),
        ("Intel(R) MPI Library for Linux* OS, Version 2021.10", (fr.MPICH, "2021.10", False)),
        (
            "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/",
            (fr.OPENMPI, "5.0.11", False),
        ),
        ("mpiexec (OpenRTE) 4.1.2\n", (fr.OPENMPI, "4.1.2", False)),
        ("something else", (fr.UNKNOWN, "", False)),
    ],
)
@pytest.mark.skipif(os.name != "posix", reason="fake mpiexec is a shell script")
def test_version_from_version_text(tmp_path, text, expected):
    fake = _fake_mpiexec(tmp_path, text)
    assert _mpi._detect(str(fake)) == expected


def test_detection_is_cached(monkeypatch):
    calls = []

    def fake_run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 0, "mpiexec (Open MPI) 5.0.5\n", "")

    monkeypatch.setattr(_mpi.subprocess, "run", fake_run)
    _mpi._detect.cache_clear()
    try:
        assert (
            _mpi._detect("/fake/mpiexec")
            == _mpi._detect("/fake/mpiexec")
            == (fr.OPENMPI, "5.0.5", False)
        )
    finally:
        _mpi._detect.cache_clear()
    assert calls == [["/fake/mpiexec", "--version"]]


# ---------------------------------------------------------------- main(): errors, dry run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["python", "s.py"], "-np N"),
        (["-np", "0", "python", "s.py"], "0 is not >= 1"),
        (["-np", "two", "python", "s.py"], "not an integer"),
        (["-np", "2"], "no command"),
        (["-np", "2", "--timeout", "-1", "python"], "--timeout"),
    ],
)
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    assert fr.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fogrun")
    assert message in err


def test_missing_mpi(monkeypatch, capsys):
    monkeypatch.setattr(_mpi, "find_mpiexec", lambda environ: None)
    assert fr.main(["-np", "2", "python", "s.py"]) == 2
    assert capsys.readouterr().err == NO_MPI + "\n"
    # The simulator needs no MPI.
    assert fr.main(["--sim", "--dry-run", "-np", "2", "python", "s.py"]) == 0


def test_missing_mpi4py(monkeypatch, capsys):
    real = _launch.importlib.util.find_spec
    monkeypatch.setattr(_mpi, "find_mpi", lambda environ: MPICH)
    monkeypatch.setattr(
        _launch.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mpi4py" else real(name, *a),
    )
    assert fr.main(["-np", "2", "python", "s.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fogrun: mpi4py is not importable") and err.count("\n") == 1
    assert "pip install 'fogsim[mpi]'" in err
    # Next to an Open MPI, the mpich wheel (a second mpiexec) is not what to install.
    monkeypatch.setattr(_mpi, "find_mpi", lambda environ: OPENMPI)
    assert fr.main(["-np", "2", "python", "s.py"]) == 2
    assert capsys.readouterr().err.endswith("install it with: pip install mpi4py\n")
    # A program that is not this Python is not asked about mpi4py.
    assert fr.main(["--dry-run", "-np", "2", "./a.out"]) == 0


def test_dry_run_prints_environment_and_command(monkeypatch, capsys):
    monkeypatch.setattr(_mpi, "find_mpi", lambda environ: MPICH)
    monkeypatch.setattr(_launch.subprocess, "Popen", None)  # would fail if anything ran
    code = fr.main(
        ["--dry-run", "-np", "2", "--timeline-filename", "t x/", "python", "-c", "print('hi')"]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert "FOGSIM_TIMELINE='t x/'" in lines
    assert lines[-1] == (
        f"/opt/mpi/bin/mpiexec -n 2 {sys.executable} -m mpi4py -m fogsim.run._rank -c "
        "'print('\"'\"'hi'\"'\"')'"
    )
