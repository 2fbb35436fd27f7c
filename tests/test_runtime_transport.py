"""The Transport interface: one conformance body (tests/transport_conformance.py) over the
in-process transport, MpiTransport and TorchTransport; torchdist imports nothing from mpi."""

from __future__ import annotations

import ast
import socket
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from fogsim.backends._runtime.inprocess import InProcessWorld
from tests import environment
from tests._jobs import run
from tests.transport_conformance import exercise

ROOT = Path(__file__).resolve().parent.parent


def _run_threads(n: int, body) -> list:
    world = InProcessWorld(n, timeout=20)
    out: list = [None] * n

    def one(r: int) -> None:
        try:
            out[r] = body(world.transport(r))
        except BaseException as exc:  # noqa: BLE001 - reported below
            out[r] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_inprocess_transport_conforms(n):
    assert _run_threads(n, exercise) == [[] for _ in range(n)]


def test_inprocess_receive_checks_size_and_peers():
    world = InProcessWorld(2)
    t0, t1 = world.transport(0), world.transport(1)
    t0.isend(np.zeros(4), 1)
    with pytest.raises(ValueError, match="does not fit"):
        t1.irecv(np.zeros(3), 0).wait()
    with pytest.raises(ValueError, match="out of range"):
        t0.isend(np.zeros(1), 2)
    with pytest.raises(ValueError, match="positive integer"):
        InProcessWorld(0)


def test_inprocess_receive_without_sender_times_out():
    world = InProcessWorld(2, timeout=0.2)
    req = world.transport(1).irecv(np.zeros(2), 0)
    assert not req.test()
    with pytest.raises(TimeoutError):
        req.wait()


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["mpi", "torch"])
def test_distributed_transports_conform(kind):
    if kind == "torch":
        pytest.importorskip("torch")
    environment.require_mpiexec()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = run(
        [
            environment.MPIEXEC,
            "-n",
            "3",
            sys.executable,
            "-m",
            "mpi4py",
            "-m",
            "tests.transport_conformance",
            kind,
            str(port),
        ],
        timeout=120,
    )
    job.check()
    assert sorted(job.stdout.split("\n")[:-1]) == [f"rank {r} {kind} ok" for r in range(3)], (
        job.describe()
    )


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_torchdist_imports_nothing_from_mpi():
    for path in sorted((ROOT / "fogsim/backends/torchdist").glob("*.py")):
        for name in _imports(path):
            assert not (name.startswith("..mpi") or "backends.mpi" in name), (path.name, name)
