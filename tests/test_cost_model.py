"""The cost model: each formula against numbers worked out by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fogsim as fs
from fogsim import hierarchy as H
from fogsim import topology as T

MB = 1e6
# The BlueConnect paper's Fig. 1: 12 learners, 3 per node (NVLink), node pairs under a
# 100 Gb/s switch, the two switches under a 200 Gb/s one; one latency everywhere.
ALPHA = 1e-6
FIG1 = H.Network([H.Level(3, ALPHA, 32e9), H.Level(2, ALPHA, 12.5e9), H.Level(2, ALPHA, 25e9)])


def test_primitives_by_hand():
    # Eq. 1: (p-1) alpha + (p-1)/p n/w with p=4, n=8 MB, w=1 GB/s: 3 us + 6 ms
    assert H.ring_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx(3e-6 + 0.75 * 8e-3)
    # Eq. 2: lg(4) = 2 latencies
    assert H.halving_doubling_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx(2e-6 + 6e-3)
    # Eq. 3: power of two -> halving/doubling; 6 -> ring (5 latencies)
    assert H.best_time(4, 8 * MB, 1e-6, 1e9) == H.halving_doubling_time(4, 8 * MB, 1e-6, 1e9)
    assert H.best_time(6, 6 * MB, 1e-6, 1e9) == pytest.approx(5e-6 + 5 / 6 * 6e-3)
    # Eq. 4: T_c + T_r
    assert H.broadcast_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx((2e-6 + 6e-3) + (3e-6 + 6e-3))
    assert H.ring_time(1, 8 * MB, 1e-6, 1e9) == 0 and H.halving_doubling_time(1, 1, 1, 1) == 0


def test_one_and_two_level_allreduce_on_the_papers_twelve_learners():
    n = 120 * MB
    # Eq. 6: 2 (11 alpha + 11/12 n / 12.5 GB/s)
    assert H.one_level_allreduce_time(FIG1, n) == pytest.approx(2 * (11e-6 + 11 / 12 * n / 12.5e9))
    # Eq. 7: reduce + broadcast among 3 at NVLink (T_c + T_r each, ring for 3), then the
    # 4 masters all-reduce by halving/doubling at 12.5 GB/s
    tc3 = np.log2(3) * 1e-6 + 2 / 3 * n / 32e9
    tr3 = 2e-6 + 2 / 3 * n / 32e9
    masters = 2 * (2e-6 + 3 / 4 * n / 12.5e9)
    assert H.two_level_allreduce_time(FIG1, n) == pytest.approx(2 * (tc3 + tr3) + masters)


def test_decomposed_allreduce_fat_tree_and_torus_by_hand():
    n = 120 * MB
    # Eq. 9, stage by stage: (3, n, w0), (2, n/3, min(w0, w1/3)), (2, n/6, min(.., w2/6))
    s0 = 2 * (2e-6 + 2 / 3 * n / 32e9)
    s1 = 2 * (1e-6 + 1 / 2 * (n / 3) / (12.5e9 / 3))
    s2 = 2 * (1e-6 + 1 / 2 * (n / 6) / min(12.5e9 / 3, 25e9 / 6))
    assert H.decomposed_allreduce_time(FIG1, n) == pytest.approx(s0 + s1 + s2)
    # Eq. 10 (torus): the uplinks are divided by p0 only
    torus = H.Network(FIG1.levels, kind="torus")
    t1 = 2 * (1e-6 + 1 / 2 * (n / 3) / (12.5e9 / 3))
    t2 = 2 * (1e-6 + 1 / 2 * (n / 6) / min(12.5e9 / 3, 25e9 / 3))
    assert H.decomposed_allreduce_time(torus, n) == pytest.approx(s0 + t1 + t2)
    # 8 learners as 2 x 2 x 2, one bandwidth: three halving/doubling stages of n, n/2, n/4
    # at w, w/2, w/4 -> each stage moves the same time, 2 * (alpha + n/(2w))
    cube = H.Network([H.Level(2, 1e-6, 1e9)] * 3)
    assert H.decomposed_allreduce_time(cube, 8 * MB) == pytest.approx(3 * 2 * (1e-6 + 4e-3))


def test_decomposed_factors_must_fit_the_network():
    with pytest.raises(ValueError, match="multiply to 6, but the network has 12"):
        H.decomposed_allreduce_time(FIG1, MB, factors=(3, 2, 1))
    with pytest.raises(ValueError, match="one size per network level"):
        H.decomposed_allreduce_time(FIG1, MB, factors=(6, 2))
    assert H.decomposed_allreduce_time(FIG1, MB, factors=(3, 2, 2)) == (
        H.decomposed_allreduce_time(FIG1, MB)
    )


def test_levels_and_networks_are_checked():
    with pytest.raises(ValueError, match="Level.size must be >= 1"):
        H.Level(0, 1e-6, 1e9)
    with pytest.raises(TypeError, match="Level.size must be an integer"):
        H.Level(2.0, 1e-6, 1e9)
    with pytest.raises(ValueError, match="Level.bandwidth must be finite and > 0"):
        H.Level(2, 1e-6, 0)
    with pytest.raises(ValueError, match="Level.alpha must be finite and >= 0"):
        H.Level(2, float("nan"), 1e9)
    with pytest.raises(ValueError, match="kind must be 'fat_tree' or 'torus'"):
        H.Network([H.Level(2, 0, 1)], kind="mesh")
    with pytest.raises(TypeError, match="Level objects"):
        H.Network([])
    with pytest.raises(ValueError, match="algorithm must be"):
        H.allreduce_time(FIG1, MB, "tree")


def test_neighbor_allreduce_counts_messages_per_level():
    # 8 ranks, 2 machines of 4: alpha 1 us / 10 us, 10 GB/s / 1 GB/s
    net = H.Network([H.Level(4, 1e-6, 10e9), H.Level(2, 10e-6, 1e9)])
    n = 1 * MB
    # ring: each rank receives from r-1 and sends to r+1; ranks 0, 3, 4, 7 have one message
    # crossing machines each way -> 10 us + 1 ms; the inner messages are faster
    assert H.neighbor_allreduce_time(net, n, T.ring_graph(8)) == pytest.approx(10e-6 + n / 1e9)
    # exponential-2 on 8: in-neighbors r-1, r-2, r-4; r-4 always crosses machines, and for
    # rank 0 also r-1 and r-2 (ranks 7 and 6): 3 messages in at level 1 -> 10 us + 3 ms
    assert H.neighbor_allreduce_time(net, n, T.exponential_two_graph(8)) == pytest.approx(
        10e-6 + 3 * n / 1e9
    )
    # a schedule costs its average step: one-peer exp-2 steps send to r+1, r+2, r+4
    steps = list(itertools.islice(T.one_peer_exponential_two(8), 3))
    want = np.mean([H.neighbor_allreduce_time(net, n, s.weights) for s in steps])
    assert H.schedule_time(net, n, steps) == pytest.approx(want)
    assert H.schedule_time(net, n, steps[2:]) == pytest.approx(10e-6 + n / 1e9)  # all cross


def test_hierarchical_neighbor_allreduce_is_three_stages():
    net = H.Network([H.Level(4, 1e-6, 10e9), H.Level(2, 10e-6, 1e9)])
    n = 1 * MB
    intra = 2 * (2e-6 + 3 / 4 * n / 10e9)  # halving/doubling among 4
    bcast = (2e-6 + 3 / 4 * n / 10e9) + (3e-6 + 3 / 4 * n / 10e9)
    between = 10e-6 + n / 1e9  # two machines exchange one message each
    got = H.hierarchical_neighbor_allreduce_time(net, n, T.exponential_two_graph(2))
    assert got == pytest.approx(intra + between + bcast)


def test_cost_model_and_meter():
    model = H.CostModel(FIG1, allreduce="decomposed")
    assert model.op_time("allreduce", MB, size=12) == H.decomposed_allreduce_time(FIG1, MB)
    assert model.op_time("allreduce", MB, size=12, algorithm="ring") == (
        H.one_level_allreduce_time(FIG1, MB)
    )
    with pytest.raises(ValueError, match="12 processes"):
        model.op_time("allreduce", MB, size=8)
    with pytest.raises(ValueError, match="unknown op 'gossip'"):
        model.op_time("gossip", MB, size=12)
    with pytest.raises(ValueError, match="needs topology="):
        model.op_time("neighbor_allreduce", MB, size=12)
    meter = H.CostMeter(model)
    a = meter.record("allreduce", MB, size=12)
    b = meter.record("barrier", 0, size=12)
    assert b == pytest.approx(4 * ALPHA)  # ceil(lg 12) latencies
    assert meter.mark() == pytest.approx(a + b)
    meter.record("allreduce", MB, size=12)
    assert meter.mark() == pytest.approx(a) and meter.iterations == pytest.approx([a + b, a])
    assert meter.total == pytest.approx(2 * a + b) and meter.calls == {"allreduce": 2,
                                                                        "barrier": 1}


def test_a_simulated_run_reports_modelled_time_per_iteration():
    fs.init(backend="sim", size=8, local_size=4)
    try:
        net = H.Network([H.Level(4, 1e-6, 10e9), H.Level(2, 10e-6, 1e9)])
        meter = H.attach_cost_model(net)
        x = fs.local(lambda r: np.full(1000, float(r)))  # 8 kB per agent
        for _ in range(3):
            x = fs.neighbor_allreduce(x)
            fs.allreduce(x)
            meter.mark()
        per_iter = (H.neighbor_allreduce_time(net, 8000, T.exponential_two_graph(8))
                    + H.one_level_allreduce_time(net, 8000))  # fmt: skip
        assert meter.iterations == pytest.approx([per_iter] * 3)
        fs.hierarchical_neighbor_allreduce(x)
        assert meter.calls["hierarchical_neighbor_allreduce"] == 1
        H.detach_cost_model()
        fs.allreduce(x)
        assert meter.calls["allreduce"] == 3
        with pytest.raises(ValueError, match="12 processes but the world 8"):
            H.attach_cost_model(FIG1)
    finally:
        fs.shutdown()


def test_the_example_prints_the_table_and_saves_the_figure(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    out = tmp_path / "scaling.png"
    run = subprocess.run([sys.executable, str(root / "examples" / "cost_model.py"), "--out",
                          str(out), "--gpus-per-machine", "4"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.stat().st_size > 10_000
    lines = run.stdout.splitlines()
    assert lines[0].startswith("modelled ms per op") and "decomposed" in lines[1]
    assert "hierarchical_neighbor_allreduce: modelled communication per iteration" in run.stdout
