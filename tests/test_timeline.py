"""The Chrome-trace timeline: schema, nesting, tracks, files left valid, summaries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fogsim as fs
from fogsim import timeline as TL
from fogsim._timeline_bluefog import BlueFogTimeline
from tests import _jobs
from tests._jobs import fogrun_script

ROOT = Path(__file__).parent.parent
N = 4


def check_trace(path) -> list[dict]:
    """Parse a trace file, check the schema and nesting; return its events."""
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    stacks: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for e in events:
        assert {"ph", "pid", "tid"} <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name") and "name" in e["args"]
            continue
        assert isinstance(e["ts"], float | int) and e["ts"] >= 0, e
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            assert isinstance(e["name"], str) and e["name"], e
            stacks.setdefault(key, []).append((e["name"], e["ts"]))
        elif e["ph"] == "E":
            assert stacks.get(key), f"E without an open B on {key}: {e}"
            _, start = stacks[key].pop()
            assert e["ts"] >= start, e
        else:
            assert e["ph"] == "X" and e["dur"] >= 0 and e["name"], e
            open_spans = stacks.get(key)
            assert open_spans, f"phase {e['name']} outside any op on {key}"
            assert e["ts"] >= open_spans[-1][1], e  # starts inside its op
    assert not any(stacks.values()), f"spans left open: {stacks}"
    return events


def names_by_pid(events) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for e in events:
        if e["ph"] in ("B", "X"):
            out.setdefault(e["pid"], set()).add(e["name"])
    return out


def _tid_of(events, track: str) -> int:
    """The tid of the thread track named ``track``."""
    return next(
        e["tid"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == track
    )


@pytest.fixture
def world():
    fs.init(backend="sim", size=N)
    yield
    TL.stop()
    fs.shutdown()


def test_simulated_ops_write_one_track_per_agent(world, tmp_path):
    prefix = str(tmp_path / "trace")
    tl = TL.start(prefix)
    assert TL.is_active() and tl.path == prefix + ".json"
    x = fs.local(lambda r: np.full(3, float(r)))
    x = fs.neighbor_allreduce(x, name="x")
    fs.wait(fs.neighbor_allreduce_nonblocking(x))
    fs.allreduce(x, name="sum")
    with fs.timeline_context("x", "COMPUTE"):
        fs.broadcast(x, 0)  # an op nested in a user activity
    assert fs.timeline_start_activity("loss", "EVALUATE")
    assert fs.timeline_end_activity("loss")
    TL.stop()
    assert not TL.is_active()
    events = check_trace(prefix + ".json")
    by_pid = names_by_pid(events)
    assert sorted(by_pid) == list(range(N))
    want = {
        "NEIGHBOR_ALLREDUCE",
        "COMPUTE_AVERAGE",
        "ENQUEUE_NEIGHBOR_ALLREDUCE",
        "WAIT",
        "ALLREDUCE",
        "BROADCAST",
        "COMPUTE",
        "EVALUATE",
    }
    for pid in range(N):
        assert by_pid[pid] == want, by_pid[pid]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"x", "sum", "loss", "neighbor_allreduce", "broadcast"} <= tracks


def test_max_agents_limits_the_tracks(world, tmp_path):
    TL.start(str(tmp_path / "t"), max_agents=2)
    fs.neighbor_allreduce(np.ones((N, 2)))
    TL.stop()
    assert set(names_by_pid(check_trace(tmp_path / "t.json"))) == {0, 1}


def test_the_file_is_valid_json_at_every_flush_and_spans_close_at_stop(world, tmp_path):
    tl = TL.start(str(tmp_path / "t"))
    fs.timeline_start_activity("outer", "LOOP")
    fs.neighbor_allreduce(np.ones((N, 2)))
    tl.flush()
    with open(tmp_path / "t.json") as f:  # readable while running: the LOOP is still open
        assert any(e.get("name") == "LOOP" for e in json.load(f)["traceEvents"])
    TL.stop()  # closes LOOP
    check_trace(tmp_path / "t.json")


def test_activity_errors_and_inactive_calls(world, tmp_path):
    assert fs.timeline_start_activity("x", "A") is False  # no timeline: nothing recorded
    assert fs.timeline_end_activity("x") is False
    with fs.timeline_context("x", "A"):
        pass
    TL.start(str(tmp_path / "t"))
    with pytest.raises(ValueError, match="no open activity on 'x'"):
        fs.timeline_end_activity("x")
    with pytest.raises(TypeError, match="timeline tensor_name must be a non-empty string"):
        fs.timeline_start_activity("", "A")
    with pytest.raises(TypeError, match="prefix must be a non-empty path"):
        TL.start("")
    with pytest.raises(ValueError, match="max_agents must be a positive integer"):
        TL.start(str(tmp_path / "u"), max_agents=0)


def test_init_starts_it_from_the_environment_and_shutdown_closes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FOGSIM_TIMELINE", str(tmp_path / "env"))
    fs.init(backend="sim", size=2)
    assert TL.is_active()
    fs.allreduce(np.ones((2, 1)))
    fs.shutdown()
    assert not TL.is_active()
    assert "ALLREDUCE" in names_by_pid(check_trace(tmp_path / "env.json"))[1]


def test_summarize_prints_phases_per_agent_and_draws_a_gantt_chart(world, tmp_path, capsys):
    prefix = str(tmp_path / "t")
    TL.start(prefix)
    for _ in range(3):
        fs.neighbor_allreduce(np.ones((N, 8)), name="w")
    TL.stop()
    table = TL.summarize(prefix, gantt=str(tmp_path / "gantt.png"))
    assert sorted(table) == list(range(N))
    assert table[0]["NEIGHBOR_ALLREDUCE"] >= table[0]["COMPUTE_AVERAGE"] > 0
    out = capsys.readouterr().out
    assert "NEIGHBOR_ALLREDUCE" in out and "COMPUTE_AVERAGE" in out
    assert (tmp_path / "gantt.png").stat().st_size > 1000
    ax = TL.plot_gantt(prefix)  # every phase drawn on top of its op, not hidden under it
    zorders = {}
    for bars in ax.collections:
        zorders.setdefault(bars.get_label(), set()).add(bars.get_zorder())
    assert min(zorders["COMPUTE_AVERAGE"]) > max(zorders["NEIGHBOR_ALLREDUCE"])
    legend = ax.get_legend().get_window_extent(ax.figure.canvas.get_renderer())
    assert legend.x0 >= ax.get_window_extent().x1  # beside the bars
    import matplotlib.pyplot as plt

    plt.close(ax.figure)
    run = subprocess.run(
        [sys.executable, "-m", "fogsim", "timeline", "summarize", prefix],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and "NEIGHBOR_ALLREDUCE" in run.stdout, run.stderr
    with pytest.raises(FileNotFoundError, match="no timeline files"):
        TL.summarize(str(tmp_path / "missing"))


def test_optimizer_records_forward_backward_and_step(world, tmp_path):
    torch = pytest.importorskip("torch")
    from torch import nn

    from fogsim import optim as fo

    model = fo.replicate(nn.Sequential(nn.Linear(3, 2)))
    opt = fo.DistributedAdaptThenCombineOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model
    )
    TL.start(str(tmp_path / "t"))
    for _ in range(2):
        loss = model(torch.ones(N, 5, 3)).square().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    TL.stop()
    events = check_trace(tmp_path / "t.json")
    order = [e["name"] for e in events if e["ph"] == "B" and e["pid"] == 0]
    assert order[:3] == ["FORWARD", "BACKWARD", "STEP"], order
    assert "ENQUEUE_NEIGHBOR_ALLREDUCE" in order and "WAIT" in order  # the step's mixing


SCRIPT = """
import numpy as np
import fogsim as fs
fs.init()
x = fs.local(lambda r: np.full(4, float(r)))
for _ in range(3):
    x = fs.neighbor_allreduce(x, name="x")
fs.allreduce(x)
fs.wait(fs.neighbor_allreduce_nonblocking(x, name="y"))
fs.timeline_start_activity("x", "UNFINISHED")
{ending}
"""


def test_an_exception_still_leaves_a_closed_valid_file(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(ending="raise RuntimeError('boom')"))
    env = _jobs.job_env(FOGSIM_TIMELINE=str(tmp_path / "t"), FOGSIM_BACKEND="sim", FOGSIM_SIZE="3")
    run = _jobs.python(str(script), timeout=120, env=env)
    assert not run.timed_out and run.returncode == 1, run.describe()
    assert "RuntimeError: boom" in run.stderr
    events = check_trace(tmp_path / "t.json")
    assert "UNFINISHED" in names_by_pid(events)[2]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_every_rank_writes_its_file_with_every_op(tmp_path, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    prefix = tmp_path / "trace" / "t"
    script = SCRIPT.format(ending="").replace("fs.init()", f"fs.init(backend={backend!r})")
    run = fogrun_script(
        tmp_path, script, 3, options=("--timeline-filename", str(prefix)), timeout=100
    )
    assert run.returncode == 0, run.stderr[-2000:]
    for rank in range(3):
        events = check_trace(f"{prefix}{rank}.json")
        names = names_by_pid(events)
        assert list(names) == [rank]
        # both distributed runtimes record the same phases, fused calls included
        assert {
            "NEIGHBOR_ALLREDUCE",
            "NEGOTIATE",
            "COMMUNICATE",
            "COMPUTE_AVERAGE",
            "ALLREDUCE",
            "ENQUEUE_NEIGHBOR_ALLREDUCE",
            "ALLOCATE",
            "FUSION_COPY_IN",
            "FUSION_COPY_OUT",
            "WAIT",
            "UNFINISHED",
        } <= names[rank], names
        # the fused call: queued, then sent, received and averaged out by its wait (the
        # batch's agreement is a phase of its own where it does not travel with the data)
        fused = [e["name"] for e in events if e["tid"] == _tid_of(events, "y") and e["ph"] in "BX"]
        negotiated = ["NEGOTIATE"] if "NEGOTIATE" in fused else []
        assert fused == [
            "ENQUEUE_NEIGHBOR_ALLREDUCE",
            "WAIT",
            *negotiated,
            "ALLOCATE",
            "FUSION_COPY_IN",
            "COMMUNICATE",
            "FUSION_COPY_OUT",
        ], fused
    table = TL.summarize(str(prefix))
    assert sorted(table) == [0, 1, 2]


def test_compiled_and_python_recorders_write_the_same_bytes(tmp_path, monkeypatch):
    from fogsim import _core

    rng = np.random.default_rng(0)
    events = [("J", 0, 0, '{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{}}', None)]
    for k in range(200):
        t = int(rng.integers(10**6, 10**9))
        kind = ("B", "X", "E")[k % 3]
        extra = {"k": k} if kind == "B" and k % 2 else int(rng.integers(0, 10**6))
        events.append((kind, int(k % 5 + 1), t, f'op{k % 7}"', extra if kind != "E" else None))
    compiled = _core.dispatch.format_trace_events(events, 10**6, [0, 7], {})
    python = _core.fallback_dispatch.format_trace_events(events, 10**6, [0, 7], {})
    assert compiled == python
    assert len(json.loads(b"[" + compiled + b"]")) == 1 + 2 * 200
    for module in (_core.dispatch, _core.fallback_dispatch):  # the recorders write the same
        rec = module.TraceRecorder()
        for event in events:
            rec.append(*event)
        assert len(rec) == len(events)
        assert rec.format(10**6, [0, 7], {}) == compiled and len(rec) == 0
        assert rec.format(10**6, [0, 7], {}) == b""
        with pytest.raises(ValueError, match="unknown event phase 'Q'"):
            rec.append("Q", 1, 0, "x", None)
        rec.move(3, 2)
        rec.move(3, -1)
        assert rec.depth(3) == 1 and rec.depth(9) == 0 and rec.open_tracks() == {3: 1}
    # a timeline recording with the Python twins gives a valid trace too
    monkeypatch.setattr(_core, "TraceOp", _core.fallback_dispatch.TraceOp)
    monkeypatch.setattr(_core, "TracePhase", _core.fallback_dispatch.TracePhase)
    monkeypatch.setattr(_core, "TraceRecorder", _core.fallback_dispatch.TraceRecorder)
    tl = TL.Timeline(str(tmp_path / "py.json"), [0, 1], "agent")
    with tl.op("OP", "x"), tl.phase("PHASE"):
        pass
    tl.close()
    assert names_by_pid(check_trace(tmp_path / "py.json")) == {
        0: {"OP", "PHASE"},
        1: {"OP", "PHASE"},
    }


@pytest.mark.parametrize("python", [False, True])
def test_since_records_a_phase_of_the_running_op_and_returns_now(tmp_path, monkeypatch, python):
    from fogsim import _core

    if python:
        monkeypatch.setattr(_core, "TraceOp", _core.fallback_dispatch.TraceOp)
        monkeypatch.setattr(_core, "TracePhase", _core.fallback_dispatch.TracePhase)
        monkeypatch.setattr(_core, "TraceRecorder", _core.fallback_dispatch.TraceRecorder)
    tl = TL.Timeline(str(tmp_path / "s.json"), [3], "rank")
    with tl.op("OP", "x"):
        t0 = tl.clock_ns()
        t1 = tl.since("FIRST", t0)
        t2 = tl.since("SECOND", t1)
    tl.since("OUTSIDE", tl.clock_ns())  # no op running: the "fogsim" track
    tl.close()
    assert t0 <= t1 <= t2
    with open(tmp_path / "s.json") as f:  # (check_trace wants phases inside ops)
        events = json.load(f)["traceEvents"]
    phases = {e["name"]: e for e in events if e["ph"] == "X"}
    op = next(e for e in events if e["ph"] == "B" and e["name"] == "OP")
    assert phases["FIRST"]["tid"] == phases["SECOND"]["tid"] == op["tid"]
    assert phases["FIRST"]["ts"] + phases["FIRST"]["dur"] == pytest.approx(phases["SECOND"]["ts"])
    assert phases["OUTSIDE"]["tid"] != op["tid"]


@pytest.mark.parametrize("python", [False, True])
def test_op_begin_and_op_end_record_the_same_span_as_op(tmp_path, monkeypatch, python):
    from fogsim import _core

    if python:
        monkeypatch.setattr(_core, "TraceRecorder", _core.fallback_dispatch.TraceRecorder)
    tl = TL.Timeline(str(tmp_path / "b.json"), [0], "rank")
    with tl.op("WITH", "x"):
        pass
    tid = tl.op_begin("PLAIN", "x")
    assert tl._rec.current_tid() == tid and tl._rec.depth(tid) == 1
    tl.since("INSIDE", tl.clock_ns())  # phases nest in the span, as in a ``with``
    outer = tl.op_begin("OUTER", "y")
    with pytest.raises(ZeroDivisionError, match="the op failed"):
        try:
            raise ZeroDivisionError("the op failed")
        finally:
            tl.op_end(outer)  # what the API's ``finally`` does when the op raises
    tl.op_end(tid)
    assert tl._rec.current_tid() is None and tl._rec.open_tracks() == {}
    tl.close()
    events = check_trace(tmp_path / "b.json")
    spans = [(e["ph"], e["name"], e["tid"]) for e in events if e["ph"] == "B"]
    assert [name for _, name, _ in spans] == ["WITH", "PLAIN", "OUTER"]
    assert spans[0][2] == spans[1][2] != spans[2][2]  # tracks "x" (both) and "y"
    inside = next(e for e in events if e.get("name") == "INSIDE")
    assert inside["tid"] == spans[1][2]


def test_periodic_flushes_go_through_the_writer_thread_and_keep_the_file_valid(tmp_path):
    tl = TL.Timeline(str(tmp_path / "w.json"), [0], "rank")
    for k in range(3):
        with tl.op(f"OP{k}", "x"), tl.phase("PHASE"):
            pass
        tl.flush_soon()  # what the instrumented calls do every 100,000 events or 2 s
    assert tl._writer is not None and tl._writer.is_alive()
    tl.flush()  # waits for the writer: the file holds every op now
    with open(tmp_path / "w.json") as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert {"OP0", "OP1", "OP2", "PHASE"} <= names
    with tl.op("LAST", "x"):
        tl.flush_soon()  # an op still open: closed by close(), after the queued batch
    tl.close()
    assert tl._writer is None
    events = check_trace(tmp_path / "w.json")
    assert [e["name"] for e in events if e["ph"] == "B"] == ["OP0", "OP1", "OP2", "LAST"]


def test_a_failed_write_is_raised_by_the_next_flush(tmp_path):
    tl = TL.Timeline(str(tmp_path / "e.json"), [0], "rank")

    class Full:
        def __getattr__(self, name):
            raise OSError(28, "No space left on device")

    real, tl._file = tl._file, Full()
    with tl.op("OP", "x"):
        pass
    tl.flush_soon()
    with pytest.raises(OSError, match="writing .*e.json failed: .*No space left"):
        tl.flush()
    tl._file = real
    tl.close()
    check_trace(tmp_path / "e.json")


def test_a_writer_thread_that_is_gone_is_started_again(tmp_path):
    # A forked child keeps the Timeline but not its threads: batches queued for a writer
    # that no longer runs must still be written, and flush() must not wait forever.
    import threading

    tl = TL.Timeline(str(tmp_path / "f.json"), [0], "rank")
    with tl.op("BEFORE", "x"):
        pass
    tl.flush_soon()
    tl.flush()
    tl._batches.put(None)  # the writer thread ends, as if lost in a fork
    tl._writer.join()
    with tl.op("QUEUED", "x"):
        pass
    tl._batches.put(tl._format())  # a batch queued for the writer that is gone
    flusher = threading.Thread(target=tl.flush)
    flusher.start()
    flusher.join(timeout=20)
    assert not flusher.is_alive(), "flush() waited for a writer thread that is gone"
    with tl.op("AFTER", "x"):
        pass
    tl.close()
    events = check_trace(tmp_path / "f.json")
    assert [e["name"] for e in events if e["ph"] == "B"] == ["BEFORE", "QUEUED", "AFTER"]


# -- BlueFog's layout (start(prefix, bluefog=True), BLUEFOG_TIMELINE) ------------------------
def _bluefog_events(path) -> list[dict]:
    """Parse a BlueFog-layout file; check its nesting per (pid, tid); return its events."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    stacks: dict[tuple[int, int], list[str]] = {}
    for e in events:
        key = (e["pid"], e["tid"])
        if e["ph"] == "B":
            stacks.setdefault(key, []).append(e["name"])
        elif e["ph"] == "E":
            assert stacks.get(key), f"E without an open B on {key}: {e}"
            stacks[key].pop()
        elif e["ph"] == "X":
            assert stacks.get(key), f"phase {e['name']} outside any op on {key}"
    return events


def test_bluefog_layout_names_ops_tracks_tensors_and_threads(tmp_path):
    import threading

    path = tmp_path / "bf0.json"
    tl = BlueFogTimeline(str(path), [0], "rank")
    try:
        tid = tl.op_begin("NEIGHBOR_ALLREDUCE", "x")
        with tl.phase("COMMUNICATE"):
            pass
        tl.op_end(tid)
        with tl.op("WIN_ACCUMULATE", "w"):
            pass
        with tl.op("ENQUEUE_NEIGHBOR_ALLGATHER", "g"):
            pass
        tl.op_end(tl.op_begin("WAIT", "g"))
        with tl.op("WIN_CREATE", "w"):
            pass

        both_alive = threading.Barrier(2)  # a finished thread's ident may be reused
        one_at_a_time = threading.Lock()

        def activity():
            both_alive.wait()
            with one_at_a_time:
                tl.begin("THREAD", "t")
                tl.end("t")

        threads = [threading.Thread(target=activity) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # two threads alive at once: two thread tracks
        text = path.read_text()  # written at each op's end, not after 2 s or at close
        events = _bluefog_events(path)
    finally:
        tl.close()
    spans = [(e["name"], e["pid"], e["tid"]) for e in events if e["ph"] == "B"]
    tensors = {e["args"]["name"]: e["pid"] for e in events if e.get("name") == "process_name"}
    assert set(tensors) == {"x", "w", "g", "t"} and sorted(tensors.values()) == [1, 2, 3, 4]
    main = spans[0][2]
    assert spans[:7] == [
        ("ENQUEUE_NEIGHBOR_ALLREDUCE", tensors["x"], main),
        ("MPI_NEIGHBOR_ALLREDUCE", tensors["x"], main),
        ("ENQUEUE_WIN_ACCUMULATE", tensors["w"], main),
        ("MPI_WIN_ACCUMULATE", tensors["w"], main),
        ("ENQUEUE_NEIGHBOR_ALLGATHER", tensors["g"], main),
        ("MPI_NEIGHBOR_ALLGATHER", tensors["g"], main),  # the WAIT that completes it
        ("WIN_CREATE", tensors["w"], main),  # not one of BlueFog's MPI ops: fogsim's name
    ]
    thread_tids = [tid for name, pid, tid in spans[7:] if name == "THREAD"]
    assert len(set(thread_tids + [main])) == 3, spans
    phase = next(e for e in events if e["ph"] == "X")
    assert (phase["name"], phase["pid"], phase["tid"]) == ("COMMUNICATE", tensors["x"], main)
    assert f'"tid": {thread_tids[0]}' in text and '"tid":' + str(main) not in text  # spacing
    assert not any(e["name"] == "thread_name" for e in events if e["ph"] == "M")
    assert tl.closed and json.loads(path.read_text())  # closed: still valid JSON


def test_bluefog_layout_is_an_option_of_start(world, tmp_path):
    with pytest.raises(TypeError, match="bluefog must be a bool"):
        TL.start(str(tmp_path / "t"), bluefog="yes")
    tl = TL.start(str(tmp_path / "t"), bluefog=True)
    assert isinstance(tl, BlueFogTimeline)
    fs.neighbor_allreduce(np.ones((N, 2)), name="v")
    TL.stop()
    events = _bluefog_events(tmp_path / "t.json")  # simulation: pid stays the agent
    for agent in range(N):
        names = {e["name"] for e in events if e["ph"] == "B" and e["pid"] == agent}
        assert names == {"ENQUEUE_NEIGHBOR_ALLREDUCE", "MPI_NEIGHBOR_ALLREDUCE"}, names
    assert isinstance(TL.start(str(tmp_path / "u")), TL.Timeline)
    assert not isinstance(TL.active, BlueFogTimeline)
