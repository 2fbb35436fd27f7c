"""One workload over every kernel and dispatch function, for tests/test_pure_python.py.

Run as ``python tests/pure_python_job.py OUT [BACKEND]`` (simulation: ``FOGSIM_SIZE``,
``FOGSIM_LOCAL_SIZE``) or under ``fogrun`` (every rank or agent thread runs it), with a
timeline (``FOGSIM_TIMELINE``) whose events, without their times, are one of the results.
It saves every result, raw, to ``OUT<tag>.npz`` (``sim``, or the rank), with ``compiled``
(whether ``fogsim._core`` runs the compiled extension), and prints which implementation
ran. The test runs it with and without ``FOGSIM_PURE_PYTHON=1`` and compares the files
byte for byte.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np

import fogsim as fs
import fogsim._core as core
from fogsim import topology as T

STEPS = 4  # repeated steps, so that rounding differences would accumulate and show


def _data(n, shape, dtype, seed):
    """Stacked random data of every agent, and this process's part of it."""
    full = np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)
    return fs.local(lambda r: full[r].copy())


def _weighted_graph(n):
    """A non-circulant weighted digraph: ring plus chords, rows with unequal weights."""
    rng = np.random.default_rng(7)
    W = np.zeros((n, n))
    for i in range(n):
        for j in {(i - 1) % n, (i + 3) % n, 0}:
            if j != i:
                W[i, j] = rng.uniform(0.05, 0.3)
        W[i, i] = 1.0 - W[i].sum()
    return W


def static_ops(out):
    n = fs.size()
    tops = {"exp2": T.exponential_two_graph(n), "ring": T.ring_graph(n), "star": T.star_graph(n)}
    tops["weighted"] = T.as_topology(_weighted_graph(n))
    for name, topo in tops.items():
        for weighted in (False, True):
            fs.set_topology(topo, is_weighted=weighted)
            for dtype in (np.float64, np.float32):
                x = _data(n, (5,), dtype, 1)
                for _ in range(STEPS):
                    x = fs.neighbor_allreduce(x)
                out[f"static-{name}-{weighted}-{np.dtype(dtype).name}"] = x
    fs.set_topology(T.exponential_two_graph(n))
    x = _data(n, (3, 2), np.float64, 2)
    W = _weighted_graph(n)  # a whole dense matrix for one step
    out["dense-matrix"] = fs.neighbor_allreduce(x, src_weights=W)
    out["self-and-src"] = fs.neighbor_allreduce(
        x, self_weight=fs.local(lambda r: 0.5 + 0.01 * r), src_weights=fs.local(_unequal)
    )
    # half precision averages in float32 and rounds once: the same bits on both
    out["float16"] = fs.neighbor_allreduce(_data(n, (2,), np.float16, 3))
    try:
        fs.neighbor_allreduce(_data(n, (2,), np.int64, 3))
    except TypeError as exc:  # integers are not averaged: the same refusal on both
        out["int-error"] = np.frombuffer(str(exc).encode(), np.uint8)


def _unequal(r):
    """Unequal weights on the exponential-2 graph's in-neighbors of agent ``r``."""
    ins = T.exponential_two_graph(fs.size()).in_neighbors(int(r))
    return {j: 0.4 / (k + 1) / 2**k for k, j in enumerate(ins)}


def dynamic_ops(out):
    n = fs.size()
    x = _data(n, (4,), np.float32, 4)
    y = _data(n, (4,), np.float64, 5)
    sched = T.one_peer_exponential_two(n)
    for k in range(STEPS):
        step = next(sched)
        x = fs.neighbor_allreduce(x, src_weights=step.weights)  # a matrix per step
        # dict form, through the assembly of per-agent dicts (assemble_csr)
        y = fs.neighbor_allreduce(
            y,
            self_weight=0.5,
            src_weights=fs.local(lambda r, s=step: {j: 0.5 for j in s.recv_ranks(int(r))}),
            dst_weights=fs.local(
                lambda r, s=step, w=1.0 - 0.25 * (k % 2): {j: w for j in s.send_ranks(int(r))}
            ),
        )
    out["dynamic-matrix"], out["dynamic-dicts"] = x, y


def machine_ops(out):
    n = fs.size()
    x = _data(n, (6,), np.float64, 6)
    z = _data(n, (6,), np.float32, 7)
    out["hierarchical"] = fs.hierarchical_neighbor_allreduce(x)
    out["hierarchical-f32"] = fs.hierarchical_neighbor_allreduce(z)
    m = fs.machine_size()
    if m > 1:
        fs.set_machine_topology(T.ring_graph(m))
        k = fs.local_size()
        out["hierarchical-weights"] = fs.hierarchical_neighbor_allreduce(
            x, self_weight=0.6, src_machine_weights=fs.local(lambda r: {(r // k - 1) % m: 0.4})
        )
    out["allreduce"] = fs.allreduce(x)
    out["allreduce-local"] = fs.allreduce(x, is_hierarchical_local=True)
    out["allreduce-decomposed"] = fs.allreduce(x, algorithm="decomposed")
    out["allreduce-decomposed-f32"] = fs.allreduce(z, algorithm="decomposed")


def fused_ops(out):
    n = fs.size()
    fs.set_topology(T.exponential_two_graph(n))
    xs = [
        _data(n, shape, dt, 10 + k)
        for k, (shape, dt) in enumerate(
            [
                ((3,), np.float64),
                ((2, 5), np.float32),
                ((7,), np.float64),
                ((), np.float32),
                ((1, 3), np.float64),
            ]
        )
    ]
    handles = [fs.neighbor_allreduce_nonblocking(x) for x in xs]
    for k, h in enumerate(handles):
        out[f"fused-{k}"] = fs.wait(h)
    weighted = fs.neighbor_allreduce_nonblocking(
        xs[0], self_weight=0.25, src_weights=fs.local(_quarters)
    )
    out["fused-weights"] = fs.wait(weighted)


def _quarters(r):
    n = fs.size()
    ins = T.exponential_two_graph(n).in_neighbors(int(r))
    return {j: 0.75 / len(ins) for j in ins}


def window_ops(out):
    n = fs.size()
    fs.set_topology(T.exponential_two_graph(n))
    fs.set_win_ops_with_associated_p(True)
    x = _data(n, (4,), np.float64, 20)
    fs.win_create(x, "w", zero_init=True)
    for _ in range(STEPS):
        fs.win_accumulate(x, "w", self_weight=0.5, dst_weights=fs.local(_halves))
        fs.barrier()
        fs.win_update_then_collect("w")
        fs.barrier()
    out["win-accumulate"] = x.copy()
    out["win-p"] = np.asarray(fs.win_associated_p("w"))
    fs.win_put(x, "w")
    fs.barrier()
    out["win-update"] = fs.win_update(
        "w", self_weight=0.5, neighbor_weights=fs.local(_in_halves), clone=True
    )
    fs.barrier()
    fs.win_get("w", src_weights=fs.local(_in_halves))
    fs.barrier()
    out["win-get"] = fs.win_update("w", clone=True)
    fs.barrier()
    fs.win_free("w")
    fs.set_win_ops_with_associated_p(False)


def _halves(r):
    outs = T.exponential_two_graph(fs.size()).out_neighbors(int(r))
    return {j: 0.5 / len(outs) for j in outs}


def _in_halves(r):
    ins = T.exponential_two_graph(fs.size()).in_neighbors(int(r))
    return {j: 0.5 / len(ins) for j in ins}


def direct_dispatch(out):
    """pack, combine_rows, the layout fingerprint and trace formatting on fixed inputs."""
    rng = np.random.default_rng(30)
    a, b = rng.standard_normal(5), rng.standard_normal((2, 3)).astype(np.float32)
    buf = np.full(96, 0xAB, np.uint8)
    core.pack(buf, [a, b], [0, 48])
    out["pack"] = buf
    recv = rng.standard_normal((3, 8))
    x = rng.standard_normal(4)
    w = np.array([0.1, 0.2, 0.3])
    out["combine-rows"] = core.combine_rows(np.empty(4), 0.4, x, w, recv, 16)
    out["combine-rows-select"] = core.combine_rows(
        np.empty(4), 0.4, x, w[:2], recv, 8, np.array([2, 0], np.int64)
    )
    events = [
        ("B", 1, 2_000_123, "NEIGHBOR_ALLREDUCE", None),
        ("X", 1, 2_000_500, "COMMUNICATE", 1_234),
        ("J", 0, 0, '{"ph":"i","name":"raw"}', None),
        ("E", 1, 2_009_999, None, None),
        ("X", 2, 999, 'odd "name"', 17),
    ]
    out["trace-format"] = np.frombuffer(
        core.format_trace_events(events, 10**6, [0, 3], {}), np.uint8
    )
    plans = [
        SimpleNamespace(fingerprint=12345, static=True),
        SimpleNamespace(fingerprint=2**40 + 3, static=False),
    ]
    fp = core.layout_fingerprint([(a, plans[0]), (None, None), (b, plans[1])])
    out["layout-fingerprint"] = np.array([fp], np.int64)


def timeline_structure(path, backend):
    """The recorded trace without its times (names, phases, tracks, order)."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    if backend == "spmd":  # whichever agent thread arrives last computes for all, and records it
        events = [e for e in events if e.get("name") != "COMPUTE_AVERAGE"]
    return [(e.get("ph"), e.get("name"), e.get("pid"), e.get("tid")) for e in events]


def main():
    prefix = sys.argv[1]
    ctx = fs.init(backend=sys.argv[2] if len(sys.argv) > 2 else None)
    distributed = np.ndim(fs.rank()) == 0
    tag = str(fs.rank()) if distributed else "sim"
    trace_file = f"{ctx.settings.timeline}{tag if distributed else ''}.json"  # FOGSIM_TIMELINE
    out = {}
    static_ops(out)
    dynamic_ops(out)
    machine_ops(out)
    fused_ops(out)
    if ctx.backend.name != "torch":  # no window ops there
        window_ops(out)
    if not distributed:
        direct_dispatch(out)
    fs.shutdown()  # closes the timeline
    trace = timeline_structure(trace_file, ctx.backend.name)
    out["trace"] = np.frombuffer(json.dumps(trace).encode(), np.uint8)
    raw = {k: np.ascontiguousarray(np.asarray(v)) for k, v in out.items()}
    np.savez(f"{prefix}{tag}.npz", compiled=np.array(core.compiled), **raw)
    print(
        f"compiled={core.compiled} kernels={core.kernels.__name__} "
        f"handles={core.handles.__name__} rank={tag} results={len(raw)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
