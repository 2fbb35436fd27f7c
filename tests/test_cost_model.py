"""The cost model: each formula against numbers worked out by hand."""

from __future__ import annotations

import itertools
import math

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
# 8 processes as 2 machines of 4: 1 us and 10 GB/s inside, 10 us and 1 GB/s between.
TWO_BY_FOUR = H.Network([H.Level(4, 1e-6, 10e9), H.Level(2, 10e-6, 1e9)])


def test_primitives_by_hand():
    # Eq. 1: (p-1) alpha + (p-1)/p n/w with p=4, n=8 MB, w=1 GB/s: 3 us + 6 ms
    assert H.ring_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx(3e-6 + 6e-3)
    # Eq. 2: lg(4) = 2 latencies
    assert H.halving_doubling_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx(2e-6 + 6e-3)
    # Eq. 3: a power of two takes halving/doubling; 6 and 3 take the ring
    assert H.best_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx(2e-6 + 6e-3)
    assert H.best_time(6, 6 * MB, 1e-6, 1e9) == pytest.approx(5e-6 + 5e-3)
    assert H.best_time(3, 3 * MB, 1e-6, 1e9) == pytest.approx(2e-6 + 2e-3)
    # Eq. 4: T_c + T_r, lg p as written for p = 3
    assert H.broadcast_time(4, 8 * MB, 1e-6, 1e9) == pytest.approx((2e-6 + 6e-3) + (3e-6 + 6e-3))
    assert H.reduce_time(3, 3 * MB, 1e-6, 1e9) == pytest.approx(
        (math.log2(3) * 1e-6 + 2e-3) + (2e-6 + 2e-3)
    )
    for f in (H.ring_time, H.halving_doubling_time, H.best_time, H.reduce_time):
        assert f(1, 8 * MB, 1e-6, 1e9) == 0.0
    with pytest.raises(TypeError, match="p must be an integer"):
        H.ring_time(2.0, MB, 0, 1e9)
    with pytest.raises(ValueError, match="n \\(bytes\\) must be a number >= 0"):
        H.ring_time(2, -1, 0, 1e9)
    with pytest.raises(ValueError, match="w \\(bytes/s\\) must be > 0"):
        H.best_time(2, MB, 0, 0)


def test_one_and_two_level_allreduce_on_the_papers_twelve_learners():
    n = 120 * MB
    # Eq. 6: 2 (11 alpha + 11/12 n / 12.5 GB/s), the narrowest link
    assert H.one_level_allreduce_time(FIG1, n) == pytest.approx(2 * (11e-6 + 11 / 12 * n / 12.5e9))
    # Eq. 7: reduce + broadcast among 3 at NVLink (T_c + T_r each), then the
    # 4 masters all-reduce by halving/doubling at 12.5 GB/s
    tc3 = math.log2(3) * 1e-6 + 2 / 3 * n / 32e9
    tr3 = 2e-6 + 2 / 3 * n / 32e9
    masters = 2 * (2e-6 + 3 / 4 * n / 12.5e9)
    assert H.two_level_allreduce_time(FIG1, n) == pytest.approx(2 * (tc3 + tr3) + masters)
    assert H.allreduce_time(FIG1, n, "flat") == H.allreduce_time(FIG1, n, "ring")


def test_decomposed_allreduce_on_the_papers_twelve_learners():
    n = 120 * MB
    # Eq. 9, stage by stage: (3, n, w0), (2, n/3, min(w0, w1/3)), (2, n/6, min(.., w2/6))
    s0 = 2 * (2e-6 + 2 / 3 * n / 32e9)
    s1 = 2 * (1e-6 + 1 / 2 * (n / 3) / (12.5e9 / 3))
    s2 = 2 * (1e-6 + 1 / 2 * (n / 6) / (25e9 / 6))
    assert H.decomposed_allreduce_time(FIG1, n) == pytest.approx(s0 + s1 + s2)
    assert H.decomposed_allreduce_time(FIG1, n, factors=[3, 2, 2]) == pytest.approx(s0 + s1 + s2)


def test_fat_tree_and_torus_differ_where_the_outer_links_are_shared():
    # Fig. 1 with a 100 Gb/s top switch: on a fat tree its uplink serves the 6 learners
    # under it (Eq. 9), on a torus each node's 3 (Eq. 10)
    levels = [H.Level(3, ALPHA, 32e9), H.Level(2, ALPHA, 12.5e9), H.Level(2, ALPHA, 12.5e9)]
    n = 120 * MB
    s0 = 2 * (2e-6 + 2 / 3 * n / 32e9)
    s1 = 2 * (1e-6 + 1 / 2 * (n / 3) / (12.5e9 / 3))
    fat = s0 + s1 + 2 * (1e-6 + 1 / 2 * (n / 6) / (12.5e9 / 6))
    torus = s0 + s1 + 2 * (1e-6 + 1 / 2 * (n / 6) / (12.5e9 / 3))
    assert H.decomposed_allreduce_time(H.Network(levels), n) == pytest.approx(fat)
    assert H.decomposed_allreduce_time(H.Network(levels, "torus"), n) == pytest.approx(torus)
    # Eq. 6 and 7 run one stream per link: the same on both
    for f in (H.one_level_allreduce_time, H.two_level_allreduce_time):
        assert f(H.Network(levels), n) == f(H.Network(levels, "torus"), n)


def test_decomposed_stages_pay_their_own_links():
    # 8 learners as 2 x 2 x 2, one bandwidth: stages of n, n/2, n/4 at w, w/2, w/4, so
    # every stage takes 2 (alpha + n / (2 w))
    cube = H.Network([H.Level(2, 1e-6, 1e9)] * 3)
    assert H.decomposed_allreduce_time(cube, 8 * MB) == pytest.approx(3 * 2 * (1e-6 + 4e-3))
    # per-level latencies: the stage among machines pays 10 us, at 1 GB/s / 4 streams
    n = 1 * MB
    inner = 2 * (2e-6 + 3 / 4 * n / 10e9)
    outer = 2 * (10e-6 + 1 / 2 * (n / 4) / 0.25e9)
    assert H.decomposed_allreduce_time(TWO_BY_FOUR, n) == pytest.approx(inner + outer)


def test_decomposed_with_other_factors_counts_each_stages_hops():
    n = 120 * MB
    # (6, 2): six learners under one switch in a ring (one hop per node boundary, 12.5
    # GB/s), then pairs across the top switch (3 streams per node, 6 per switch)
    first = 2 * (5e-6 + 5 / 6 * n / 12.5e9)
    second = 2 * (1e-6 + 1 / 2 * (n / 6) / (25e9 / 6))
    assert H.decomposed_allreduce_time(FIG1, n, factors=(6, 2)) == pytest.approx(first + second)
    # (2, 6): pairs (0,1), (2,3), ... with one pair per node boundary at 12.5 GB/s; then the
    # rings 0-2-4-6-8-10 and 1-3-5-7-9-11 put 2 streams on each node's and switch's uplink:
    # min(32, 12.5 / 2, 25 / 2) GB/s
    first = 2 * (1e-6 + 1 / 2 * n / 12.5e9)
    second = 2 * (5e-6 + 5 / 6 * (n / 2) / 6.25e9)
    assert H.decomposed_allreduce_time(FIG1, n, factors=(2, 6)) == pytest.approx(first + second)
    # one factor: halving/doubling over all 8 (3 latencies of 10 us) at 1 GB/s
    assert H.decomposed_allreduce_time(TWO_BY_FOUR, MB, factors=(8,)) == pytest.approx(
        2 * (30e-6 + 7 / 8 * MB / 1e9)
    )


def test_decomposed_factors_must_multiply_to_the_processes():
    with pytest.raises(ValueError, match="multiply to 6, but there are 12 processes"):
        H.decomposed_allreduce_time(FIG1, MB, factors=(3, 2, 1))
    with pytest.raises(ValueError, match="every factor must be >= 1"):
        H.decomposed_allreduce_time(FIG1, MB, factors=(0, 12))
    with pytest.raises(TypeError, match="factors must be a sequence"):
        H.decomposed_allreduce_time(FIG1, MB, factors=12)


def test_levels_and_networks_are_checked():
    with pytest.raises(ValueError, match="Level.size must be >= 1"):
        H.Level(0, 1e-6, 1e9)
    with pytest.raises(TypeError, match="Level.size must be an integer"):
        H.Level(2.0, 1e-6, 1e9)
    with pytest.raises(ValueError, match="Level.bandwidth must be finite and > 0"):
        H.Level(2, 1e-6, 0)
    with pytest.raises(ValueError, match="Level.alpha must be finite and >= 0"):
        H.Level(2, float("nan"), 1e9)
    with pytest.raises(TypeError, match="Level.alpha must be a number"):
        H.Level(2, "1us", 1e9)
    with pytest.raises(ValueError, match="kind must be 'fat_tree' or 'torus'"):
        H.Network([H.Level(2, 0, 1)], kind="mesh")
    with pytest.raises(TypeError, match="Network levels must be a non-empty sequence of Level"):
        H.Network([])
    with pytest.raises(ValueError, match="algorithm must be one of"):
        H.allreduce_time(FIG1, MB, "tree")
    net = H.Network.cluster(8, 4)
    assert (net.size, net.sizes, net.levels[1].bandwidth) == (32, (8, 4), 12.5e9)


def test_neighbor_allreduce_counts_the_messages_on_each_link():
    n = 1 * MB
    # bidirectional ring: machine 0 sends 3->4 and 0->7 through its uplink (and receives
    # two): 10 us + 2 MB / 1 GB/s; inside, 2 messages per process at 10 GB/s are faster
    assert H.neighbor_allreduce_time(TWO_BY_FOUR, n, T.ring_graph(8)) == pytest.approx(10e-6 + 2e-3)
    assert H.neighbor_allreduce_time(TWO_BY_FOUR, n, T.ring_graph(8, "right")) == pytest.approx(
        10e-6 + 1e-3
    )
    # exponential-2: i sends to i+1, i+2, i+4; out of machine 0: all four +4, ranks 2 and 3
    # with +2, rank 3 with +1: 7 messages on its uplink
    assert H.neighbor_allreduce_time(TWO_BY_FOUR, n, T.exponential_two_graph(8)) == (
        pytest.approx(10e-6 + 7e-3)
    )
    # one machine: only the 3 messages per process at 10 GB/s
    one = H.Network([H.Level(8, 1e-6, 10e9)])
    assert H.neighbor_allreduce_time(one, n, T.exponential_two_graph(8)) == pytest.approx(
        1e-6 + 3e-4
    )
    with pytest.raises(ValueError, match="topology has 4 agents, but the network has 8 processes"):
        H.neighbor_allreduce_time(TWO_BY_FOUR, n, T.ring_graph(4))


def test_a_schedule_costs_its_average_step():
    # one-peer exponential-2 on 8: shifts 1, 2, 4 put 1, 2, 4 messages on each uplink
    steps = list(itertools.islice(T.one_peer_exponential_two(8), 3))
    assert H.schedule_time(TWO_BY_FOUR, MB, steps) == pytest.approx(10e-6 + 7 / 3 * 1e-3)
    assert H.schedule_time(TWO_BY_FOUR, MB, steps[2:]) == pytest.approx(10e-6 + 4e-3)
    with pytest.raises(ValueError, match="schedule_time: steps is empty"):
        H.schedule_time(TWO_BY_FOUR, MB, [])


def test_hierarchical_neighbor_allreduce_sends_once_per_machine():
    n = 1 * MB
    intra = 2 * (2e-6 + 3 / 4 * n / 10e9)  # halving/doubling among 4
    bcast = (2e-6 + 3 / 4 * n / 10e9) + (3e-6 + 3 / 4 * n / 10e9)
    between = 10e-6 + n / 1e9  # the two local ranks 0 exchange one message each
    got = H.hierarchical_neighbor_allreduce_time(TWO_BY_FOUR, n, T.exponential_two_graph(2))
    assert got == pytest.approx(intra + between + bcast)
    # 4 machines of 4: flat exponential-2 on 16 puts 1 + 2 + 4 + 4 = 11 messages on each
    # uplink; over the exponential-2 graph of machines each local rank 0 sends 2
    net = H.Network([H.Level(4, 1e-6, 10e9), H.Level(4, 10e-6, 1e9)])
    assert H.neighbor_allreduce_time(net, n, T.exponential_two_graph(16)) == pytest.approx(
        10e-6 + 11e-3
    )
    got = H.hierarchical_neighbor_allreduce_time(net, n, T.exponential_two_graph(4))
    assert got == pytest.approx(intra + (10e-6 + 2e-3) + bcast)
    with pytest.raises(
        ValueError, match="machine_topology has 8 agents, but the network has 4 machines"
    ):
        H.hierarchical_neighbor_allreduce_time(net, n, T.ring_graph(8))


def test_cost_model_prices_every_op():
    model = H.CostModel(TWO_BY_FOUR)
    n = 1 * MB
    ring = 2 * (7 * 10e-6 + 7 / 8 * n / 1e9)  # the flat ring crosses the 1 GB/s link
    assert model.op_time("allreduce", n, size=8) == pytest.approx(ring)
    decomposed = 2 * (2e-6 + 3 / 4 * n / 10e9) + 2 * (10e-6 + 1 / 2 * (n / 4) / 0.25e9)
    assert model.op_time("allreduce", n, size=8, algorithm="decomposed", factors=(4, 2)) == (
        pytest.approx(decomposed)
    )
    assert model.op_time("allgather", n, size=8) == pytest.approx(7 * 10e-6 + 7e-3)
    assert model.op_time("broadcast", n, size=8) == pytest.approx(
        (3 * 10e-6 + 7 / 8 * 1e-3) + (7 * 10e-6 + 7 / 8 * 1e-3)
    )
    assert model.op_time("barrier", 0, size=8) == pytest.approx(3 * 10e-6)
    ring8 = T.ring_graph(8)
    assert model.op_time("neighbor_allreduce", n, size=8, topology=ring8) == pytest.approx(
        10e-6 + 2e-3
    )
    assert model.op_time("neighbor_allgather", n, size=8, topology=ring8) == pytest.approx(
        10e-6 + 2e-3
    )
    alone = H.CostModel(H.Network([H.Level(1, 1e-6, 1e9)]))
    for op in ("allreduce", "allgather", "broadcast", "barrier"):
        assert alone.op_time(op, n, size=1) == 0.0


def test_cost_model_refuses_bad_calls():
    model = H.CostModel(TWO_BY_FOUR)
    with pytest.raises(ValueError, match="size=12 processes but the network 8"):
        model.op_time("allreduce", MB, size=12)
    with pytest.raises(ValueError, match="unknown op 'gossip'"):
        model.op_time("gossip", MB, size=8)
    with pytest.raises(ValueError, match="neighbor_allreduce needs topology="):
        model.op_time("neighbor_allreduce", MB, size=8)
    with pytest.raises(ValueError, match="needs machine_topology="):
        model.op_time("hierarchical_neighbor_allreduce", MB, size=8)
    with pytest.raises(ValueError, match="allreduce must be one of"):
        H.CostModel(TWO_BY_FOUR, allreduce="tree")
    with pytest.raises(TypeError, match="CostModel needs a Network"):
        H.CostModel([H.Level(2, 0, 1)])


def test_cost_meter_adds_up_per_op_and_per_iteration():
    meter = H.CostMeter(TWO_BY_FOUR)
    ring = 2 * (7 * 10e-6 + 7 / 8 * MB / 1e9)
    assert meter.record("allreduce", MB, size=8) == pytest.approx(ring)
    assert meter.record("barrier", 0, size=8) == pytest.approx(30e-6)
    assert meter.mark() == pytest.approx(ring + 30e-6)
    meter.record("allreduce", MB, size=8)
    assert meter.mark() == pytest.approx(ring)
    assert meter.mark() == 0.0  # an iteration without communication
    assert meter.iterations == pytest.approx([ring + 30e-6, ring, 0.0])
    assert meter.total == pytest.approx(2 * ring + 30e-6)
    assert meter.per_op == pytest.approx({"allreduce": 2 * ring, "barrier": 30e-6})
    assert meter.calls == {"allreduce": 2, "barrier": 1}
    meter.reset()
    assert (meter.total, meter.iterations, meter.per_op) == (0.0, [], {})


def test_cost_meter_tells_fresh_topologies_apart():
    # new topology objects every call (as a dynamic schedule makes): a cache keyed on a
    # reused id() would charge one pattern's time to another
    meter = H.CostMeter(TWO_BY_FOUR)
    for _ in range(20):
        meter.record("neighbor_allreduce", MB, size=8, topology=T.ring_graph(8, "right"))
        meter.record("neighbor_allreduce", MB, size=8, topology=T.exponential_two_graph(8))
    assert meter.total == pytest.approx(20 * ((10e-6 + 1e-3) + (10e-6 + 7e-3)))


def test_a_simulated_run_reports_modelled_time_per_iteration():
    fs.init(backend="sim", size=8, local_size=4)
    try:
        meter = H.attach_cost_model(TWO_BY_FOUR)
        x = fs.local(lambda r: np.full(1000, float(r)))  # 8 kB per agent
        for _ in range(3):
            x = fs.neighbor_allreduce(x)  # the default exponential-2 graph
            fs.allreduce(x)
            meter.mark()
        # 7 messages of 8 kB on each uplink, then the flat ring: 2 (7 * 10 us + 7/8 * 8 us)
        per_iter = (10e-6 + 7 * 8e-6) + 2 * (70e-6 + 7e-6)
        assert meter.iterations == pytest.approx([per_iter] * 3)
        fs.allreduce(x, algorithm="decomposed")  # factors (4, 2)
        assert meter.current == pytest.approx(
            2 * (2e-6 + 3 / 4 * 0.8e-6) + 2 * (10e-6 + 1 / 2 * 2000 / 0.25e9)
        )
        fs.hierarchical_neighbor_allreduce(x)
        assert meter.calls["hierarchical_neighbor_allreduce"] == 1
        H.detach_cost_model()
        fs.allreduce(x)
        assert meter.calls["allreduce"] == 4
        with pytest.raises(ValueError, match="12 processes but the world 8"):
            H.attach_cost_model(FIG1)
    finally:
        fs.shutdown()


def test_the_scaling_table_orders_the_algorithms():
    rows = H.scaling_table(8, [1, 4], 64 * 2**20)
    assert [row["gpus"] for row in rows] == [8, 32]
    one, four = rows
    # one machine: decomposed is halving/doubling among the 8, 3 latencies (2 us) instead
    # of the ring's 7, twice
    assert one["ring"] - one["decomposed"] == pytest.approx(2 * 4 * 2e-6)
    # 4 machines of 8 GPUs sharing a 12.5 GB/s uplink: sending once per machine wins
    assert four["hierarchical"] < four["neighbor_exp2"]
    assert four["decomposed"] < four["two_level"]


def test_the_example_prints_the_table_and_saves_the_figure(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    out = tmp_path / "scaling.png"
    run = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "cost_model.py"),
            "--out",
            str(out),
            "--gpus-per-machine",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.stat().st_size > 10_000
    lines = run.stdout.splitlines()
    assert lines[0].startswith("modelled ms per op") and "decomposed" in lines[1]
    assert "hierarchical_neighbor_allreduce: modelled communication per iteration" in run.stdout
