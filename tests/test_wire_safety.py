"""What other processes can do to a rank: nothing fogsim receives is unpickled, and a
single-host torch job listens on loopback only (issue 33, point 7).

* no pickle, ``*_object`` collective or pickling (lowercase) mpi4py call is left in
  fogsim's runtime paths (a grep over the sources);
* a crafted pickle sent where fogsim expects its own message (the MPI stall side channel,
  the torch agreement's error exchange) runs no code: the marker file its ``__reduce__``
  would write stays absent, and the rank drops it or fails with a clear error;
* every socket a 2-rank torch job opens to listen (rank 0's store, gloo's pairs) is on
  a loopback address, launched under fogrun (MPI tells the ranks where to meet) and with
  torchrun's variables.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import socket
from pathlib import Path

import pytest

from fogsim import _settings
from tests import _jobs
from tests.wire_listening import is_loopback, listening

FOGSIM = _jobs.ROOT / "fogsim"

# -- no pickled exchange in the runtime paths ---------------------------------------------

#: Files that may name pickle, each with why. The mode checker's children (the user's own
#: script, run by the checker) write their records to a private temporary directory the
#: checker made (mode 0700) and the checker reads them back: nothing crosses a network,
#: and whoever can write there runs code as the user already.
_ALLOWED = {
    "_checkmodes/__init__.py": "reads the records its own children wrote to a private dir",
    "_checkmodes/_record.py": "writes this child's records for the checker (see above)",
}

#: What may not appear: pickle itself, torch's and mpi4py's object collectives, and the
#: mpi4py calls that pickle (lowercase, on a communicator: ``comm``, ``self.local_comm``,
#: ``MPI.COMM_WORLD``, ...). The buffer calls (``Allgather``, ``Isend``, ...) are fine.
_FORBIDDEN = [
    re.compile(r"\bimport\s+(pickle|cPickle|dill|cloudpickle|shelve|marshal)\b"),
    re.compile(r"\bfrom\s+(pickle|dill|cloudpickle|shelve|marshal)\s+import\b"),
    re.compile(r"\bpickle\.(loads?|dumps?|Unpickler)\b"),
    re.compile(r"\b\w+_object(_list)?\("),  # all_gather_object, broadcast_object_list, ...
    re.compile(
        r"\b\w*(?i:comm)\w*\.(allgather|allreduce|alltoall|bcast|gather|scatter|reduce|scan|"
        r"exscan|send|ssend|isend|issend|bsend|ibsend|recv|irecv|sendrecv|mprobe|improbe|"
        r"neighbor_allgather|neighbor_alltoall)\("
    ),
    re.compile(r"allow_pickle\s*=\s*True"),
]


def _sources() -> list[Path]:
    return sorted(p for ext in ("py", "pyx", "pxi") for p in FOGSIM.rglob(f"*.{ext}"))


def test_no_pickled_exchange_in_fogsim():
    found = []
    for path in _sources():
        rel = path.relative_to(FOGSIM).as_posix()
        if rel in _ALLOWED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(p.search(code) for p in _FORBIDDEN):
                found.append(f"fogsim/{rel}:{number}: {line.strip()}")
            # torch.load unpickles: only torch's restricted loader (tensors, plain data)
            if "torch.load(" in code and "weights_only=True" not in code:
                found.append(f"fogsim/{rel}:{number}: {line.strip()}")
    assert not found, "pickled exchanges left:\n" + "\n".join(found)


def test_the_grep_sees_what_it_must():
    bad = [
        "import pickle",
        "x = pickle.loads(data)",
        "dist.all_gather_object(out, obj)",
        "dist.broadcast_object_list(objs, src=0)",
        "self.comm.allgather(x)",
        "self.local_comm.bcast(report, root=0)",
        "comm.isend(obj, dest=1, tag=2)",
        "MPI.COMM_WORLD.recv(source=0)",
        "np.load(path, allow_pickle=True)",
    ]
    good = ["self.comm.Allgather(a, b)", "comm.Isend([buf, MPI.BYTE], dest=1)", "fs.allreduce(x)"]
    assert all(any(p.search(s) for p in _FORBIDDEN) for s in bad)
    assert not any(p.search(s) for p in _FORBIDDEN for s in good)


# -- the fixed formats, in process ----------------------------------------------------------


class _Payload:
    """What an attacker sends: unpickling it runs code (writes a marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def test_a_pickle_is_no_fogsim_message(tmp_path):
    from fogsim.backends import _wire

    marker = tmp_path / "ran"
    data = pickle.dumps(_Payload(marker))
    with pytest.raises(_wire.BadMessage, match="rank 3 sent .* not a fogsim message"):
        _wire.loads(data, "rank 3")
    assert not marker.exists()
    assert _wire.loads(_wire.dumps(["ValueError", "bad \u00e9"])) == ["ValueError", "bad \u00e9"]
    with pytest.raises(TypeError):
        _wire.dumps(_Payload(marker))  # not plain JSON data: refused before it travels


def test_inprocess_allgather_json_reads_back_what_json_reads():
    import threading

    from fogsim.backends._runtime.inprocess import InProcessWorld

    world = InProcessWorld(2, timeout=10)
    got: dict[int, list] = {}

    def rank(r: int) -> None:
        got[r] = world.transport(r).allgather_json(("r", r, {"k": [None, 1.5]}))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    want = [["r", 0, {"k": [None, 1.5]}], ["r", 1, {"k": [None, 1.5]}]]
    assert got == {0: want, 1: want}


def test_sharded_arguments_come_back_alike():
    import numpy as np

    from fogsim.backends import _wire
    from fogsim.backends.sim import _shardwire

    values = [
        None,
        [0.1, 1 / 3, float("inf")],
        (1, 2),
        [{0: 0.5, np.int64(2): np.float32(0.25)}, {}],
        np.arange(6, dtype=np.float16).reshape(2, 3),
        [np.array([1, 2], np.int32), np.array([True])],
        np.float64(0.1),
        3 + 4j,
    ]
    for value in values:
        back = _shardwire.decode(json.loads(json.dumps(_shardwire.encode(value))), "w", "p")
        assert repr(back) == repr(value)
    nan = _shardwire.decode(_shardwire.encode(float("nan")), "w", "p")
    assert nan != nan
    with pytest.raises(TypeError, match="src_weights on process 1 holds a set"):
        _shardwire.decode(_shardwire.encode([{1, 2}]), "src_weights", "process 1")
    crafted = {"array": ["|O", [1], "AAAAAAAAAAA="]}  # an object array: never built
    with pytest.raises(_wire.BadMessage, match="process 1 sent w"):
        _shardwire.decode(crafted, "w", "process 1")


def test_rank_0_store_listens_on_the_address_named_only():
    pytest.importorskip("torch")
    from fogsim.backends.torchdist import _world

    store = _world._serve_store("127.0.0.1", 0, 1)
    store.set("k", "v")
    assert store.get("k") == b"v"
    mine = [(a, p) for a, p, _ in listening() if p == store.port]
    assert mine == [("127.0.0.1", store.port)]


def test_gloo_is_kept_on_loopback_on_one_host_unless_named(monkeypatch):
    pytest.importorskip("torch")
    from fogsim.backends.torchdist import _world

    exported = {}
    monkeypatch.setattr(_settings, "export", lambda k, v: exported.update({k: v}))
    _world._gloo_interface(_settings.load({}), one_host=True)
    assert exported == {"GLOO_SOCKET_IFNAME": _world._loopback_interface()}
    if "lo" in [name for _, name in socket.if_nameindex()]:  # Linux
        assert _world._loopback_interface() == "lo"
    exported.clear()
    _world._gloo_interface(_settings.load({"GLOO_SOCKET_IFNAME": "eth1"}), one_host=True)
    _world._gloo_interface(_settings.load({}), one_host=False)
    assert exported == {}


# -- jobs ---------------------------------------------------------------------------------

_STALL_CHANNEL = """
import json, os, pickle, sys, time
import numpy as np
from mpi4py import MPI
from fogsim.backends.mpi._peers import MPIPeers

MARKERS = sys.argv[1]

class Payload:  # unpickling it runs code: writes a marker named by the process id
    def __reduce__(self):
        code = f"import os; open(os.path.join({MARKERS!r}, str(os.getpid())), 'w').close()"
        return (exec, (code,))

comm = MPI.COMM_WORLD
peers = MPIPeers(comm.Dup(), MPI)
rank = comm.Get_rank()
if rank == 1:
    crafted = np.frombuffer(pickle.dumps(Payload()), np.uint8)
    peers.comm.Send([crafted, MPI.BYTE], dest=0, tag=71)  # where a question goes
    peers.comm.Send([crafted, MPI.BYTE], dest=0, tag=72)  # where an answer goes
    done = comm.Ibarrier()
    while not done.Test():  # answer rank 0's real question
        peers.serve(lambda: ("allreduce", "step", 1.5))
        time.sleep(0.005)
else:
    for tag in (71, 72):
        peers.comm.Probe(source=1, tag=tag)  # both crafted messages are here
    answers, error = {}, None
    try:
        peers.serve(lambda: ("barrier", None, 0.0))  # reads the crafted question
        answers = peers.ask(lambda: ("barrier", None, 0.0), 20.0)  # and the crafted answer
    except Exception as exc:
        error = repr(exc)
    comm.Ibarrier().Wait()  # (a blocking Barrier would not match rank 1's Ibarrier)
    ran = os.path.exists(os.path.join(MARKERS, str(os.getpid())))
    answers = {str(k): list(v) for k, v in answers.items()}
    print(json.dumps({"case": "stall", "ran": ran, "error": error, "answers": answers}))
peers.close()
"""


@pytest.mark.mpi
def test_a_crafted_pickle_in_the_mpi_stall_channel_runs_no_code(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    job = _jobs.fogrun_script(tmp_path, _STALL_CHANNEL, 2, str(markers), timeout=90).check()
    (line,) = [json.loads(s) for s in job.stdout.splitlines() if s.startswith('{"case"')]
    assert line["ran"] is False, job.describe()
    # the crafted messages were dropped; rank 1's real answer was read
    assert line["error"] is None, job.describe()
    assert line["answers"] == {"1": ["allreduce", "step", 1.5]}, job.describe()


_AGREEMENT = """
import json, os, sys
import numpy as np
import torch.distributed as dist
from fogsim import _settings
from fogsim.backends._runtime.agree import LocalError, settle
from fogsim.backends.torchdist import _world
from fogsim.backends.torchdist._transport import TorchTransport

MARKERS = sys.argv[1]

class Payload:  # unpickling it runs code: writes a marker named by the process id
    def __reduce__(self):
        code = f"import os; open(os.path.join({MARKERS!r}, str(os.getpid())), 'w').close()"
        return (exec, (code,))

rank, size = _world.start(_settings.load())
group, _ = _world.new_groups(rank, size)
transport = TorchTransport(group, size, rank)
if rank == 1:
    # a peer that answers the agreement's report exchange with a pickle, in the wire
    # shape of torch's all_gather_object (int64 lengths, then padded uint8 rows)
    try:
        dist.all_gather_object([None] * size, Payload(), group=group)
    except Exception:
        pass  # rank 0's JSON is no pickle: the peer's own problem
else:
    flags = np.array([0, 0, 1, 0, 1], dtype=np.int64)  # agreed: some rank has an error
    try:
        settle(transport, flags, LocalError(ValueError("bad weights")), "x")
        error = None
    except Exception as exc:
        error = [type(exc).__name__, str(exc)]
    ran = os.path.exists(os.path.join(MARKERS, str(os.getpid())))
    print(json.dumps({"case": "agreement", "ran": ran, "error": error}), flush=True)
dist.barrier(group=group)
"""


@pytest.mark.mpi
def test_a_crafted_pickle_in_the_torch_agreement_runs_no_code(tmp_path):
    pytest.importorskip("torch")
    markers = tmp_path / "markers"
    markers.mkdir()
    job = _jobs.fogrun_script(
        tmp_path, _AGREEMENT, 2, str(markers), timeout=90, env={"FOGSIM_BACKEND": "torch"}
    ).check()
    (line,) = [json.loads(s) for s in job.stdout.splitlines() if s.startswith('{"case"')]
    assert line["ran"] is False, job.describe()
    kind, message = line["error"]
    assert kind == "BadMessage" and "rank 1 sent" in message, job.describe()
    assert "not a fogsim message (JSON)" in message, job.describe()


def _listening_lines(job: _jobs.Job, where: Path) -> dict[int, dict]:
    job.check()
    lines = [json.loads(p.read_text()) for p in sorted(where.glob("rank-*.json"))]
    return {line["rank"]: line for line in lines}


def _check_loopback_only(lines: dict[int, dict], job: _jobs.Job) -> None:
    assert sorted(lines) == [0, 1], job.describe()
    assert lines[0]["opened"], f"rank 0 opened no listening socket (its store?)\n{job.describe()}"
    for rank, line in lines.items():
        outside = [(a, p) for a, p in line["opened"] if not is_loopback(a)]
        assert not outside, f"rank {rank} listens on {outside}: {line}\n{job.describe()}"


@pytest.mark.mpi
def test_a_single_host_torch_job_under_fogrun_listens_on_loopback_only(tmp_path):
    pytest.importorskip("torch")
    job = _jobs.fogrun(
        2,
        "-m",
        "tests.wire_listening",
        str(tmp_path),
        timeout=120,
        env={"FOGSIM_BACKEND": "torch"},
    )
    _check_loopback_only(_listening_lines(job, tmp_path), job)


def test_a_single_host_torch_job_with_torchruns_variables_listens_on_loopback_only(tmp_path):
    pytest.importorskip("torch")
    from tests.torchdist_jobs import _run_torchrun_style

    job = _run_torchrun_style(2, [str(tmp_path)], driver=("-m", "tests.wire_listening"))
    lines = _listening_lines(job, tmp_path)
    _check_loopback_only(lines, job)
    for rank, line in lines.items():  # no MPI here: nothing listened before init
        assert line["before"] == [], (rank, line)


def test_listening_reads_this_process_sockets():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ("127.0.0.1", port) in [(a, p) for a, p, _ in listening(os.getpid())]
    assert is_loopback("::1") and is_loopback("::ffff:127.0.0.1") and not is_loopback("0.0.0.0")
    assert not is_loopback("::")
