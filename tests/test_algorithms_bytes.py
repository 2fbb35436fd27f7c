"""``Result.history["bytes"]``: each agent's cumulative bytes sent, averaged, in every algorithm.

The expected counts are built from the topology alone (out-degrees times the bytes of the
values each step sends), never read back from ``fs.bytes_sent()``. This file is also the MPI
job: ``fogrun -np P python -m tests.test_algorithms_bytes OUT.npz`` runs a few algorithms on
P agents (one per rank) and then on ``SHARDED`` agents sharded over the P processes, and
saves their ``"bytes"`` histories.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim import compress as C
from fogsim import topology as T
from tests import _jobs

N, D, ITERS = 6, 3, 12
#: Ring: every agent sends each value to 2 agents, 8 bytes per float64 entry.
RING_STEP = 2 * D * 8
#: The world the MPI job shards over its processes.
SHARDED = 10


@pytest.fixture
def ring():
    fs.init(backend="sim", size=N, topology=T.ring_graph, seed=0)
    yield
    fs.shutdown()


def x0() -> np.ndarray:
    return fs.local(lambda r: np.random.default_rng(r).standard_normal(D))


def problem() -> A.LeastSquares:
    return A.LeastSquares.random(m=8, d=D, seed=1)


def runs() -> dict[str, tuple[Callable[[], A.Result], int]]:
    """Every algorithm on the current ring world, with the bytes one step sends per agent."""
    n = fs.size()
    push = A.push_weights(T.ring_graph(n))
    return {
        "consensus": (lambda: A.consensus(x0(), ITERS), RING_STEP),
        "consensus_matrix": (lambda: A.consensus(x0(), ITERS, T.ring_graph(n)), RING_STEP),
        "push_sum": (lambda: A.push_sum(x0(), ITERS, push), 2 * (D + 1) * 8),
        "dgd_atc": (lambda: A.dgd(problem(), 0.02, ITERS), RING_STEP),
        "dgd_awc": (lambda: A.dgd(problem(), 0.02, ITERS, form="awc"), RING_STEP),
        "exact_diffusion": (lambda: A.exact_diffusion(problem(), 0.02, ITERS), RING_STEP),
        "gradient_tracking": (lambda: A.gradient_tracking(problem(), 0.02, ITERS), 2 * RING_STEP),
        "push_diging": (lambda: A.push_diging(problem(), 0.02, ITERS, push), 2 * (2 * D + 1) * 8),
        "diffusion_lms": (
            lambda: A.diffusion_lms(A.MovingTarget(D, batch=2, seed=1), 0.05, ITERS),
            RING_STEP,
        ),
        "choco_gossip": (
            lambda: A.choco_gossip(x0(), C.top_k(1), 0.5, ITERS),
            2 * C.top_k(1).payload_bytes((D,), np.dtype(np.float64)),
        ),
        "choco_sgd": (
            lambda: A.choco_sgd(problem(), C.qsgd(4), 0.5, 0.02, ITERS),
            2 * C.qsgd(4).payload_bytes((D,), np.dtype(np.float64)),
        ),
    }


NAMES = [
    "consensus",
    "consensus_matrix",
    "push_sum",
    "dgd_atc",
    "dgd_awc",
    "exact_diffusion",
    "gradient_tracking",
    "push_diging",
    "diffusion_lms",
    "choco_gossip",
    "choco_sgd",
]


@pytest.mark.parametrize("name", NAMES)
def test_every_algorithm_records_the_bytes_its_steps_send(ring, name):
    run, per_step = runs()[name]
    before = fs.bytes_sent()
    result = run()
    got = result.history["bytes"]
    assert got.shape == (ITERS + 1,) and got[0] == 0
    assert np.all(np.diff(got) >= 0)
    np.testing.assert_array_equal(got, per_step * np.arange(ITERS + 1))
    # the run's bytes, counted from where the user's count stood, which goes on unreset
    np.testing.assert_array_equal(fs.bytes_sent() - before, per_step * ITERS)


def test_choco_bytes_equal_the_payload_formula_on_an_irregular_graph():
    n = 7
    fs.init(backend="sim", size=n, topology=T.star_graph, seed=0)
    try:
        fs.neighbor_allreduce(x0())  # bytes sent before the run are not the run's
        compressor = C.top_k(2)
        result = A.choco_gossip(x0(), compressor, 0.3, ITERS)
        degrees = fs.load_topology().out_degrees()
        per_step = compressor.payload_bytes((D,), np.dtype(np.float64)) * degrees.mean()
        np.testing.assert_allclose(
            result.history["bytes"], per_step * np.arange(ITERS + 1), rtol=1e-15
        )
        assert result.history["bytes"][-1] == np.mean(result.state["bytes_sent"])
    finally:
        fs.shutdown()


def local_steps_bytes(iters: int, every: int, pga: int | None) -> np.ndarray:
    """The ring bytes of DGD with H = every local steps and a global average every pga-th."""
    sends = [
        k % every == 0 and (pga is None or (k // every) % pga != 0) for k in range(1, iters + 1)
    ]
    return RING_STEP * np.concatenate([[0], np.cumsum(sends)])


@pytest.mark.parametrize("form", ["atc", "awc"])
@pytest.mark.parametrize(("every", "pga"), [(3, None), (1, 2), (2, 3)])
def test_local_steps_and_global_averages_send_no_neighbor_bytes(ring, form, every, pga):
    result = A.dgd(
        problem(), 0.02, ITERS, form=form, communicate_every=every, global_average_every=pga
    )
    np.testing.assert_array_equal(result.history["bytes"], local_steps_bytes(ITERS, every, pga))


def test_bytes_leave_the_other_metrics_and_iterates_alone(ring):
    result = A.consensus(x0(), ITERS)
    x = x0()
    for _ in range(ITERS):
        x = fs.neighbor_allreduce(x)
    np.testing.assert_array_equal(result.x, x)
    error = np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1)))
    np.testing.assert_allclose(result.history["consensus_error"][-1], error, rtol=1e-12)


def test_plot_against_bytes(ring):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = A.choco_gossip(x0(), C.top_k(1), 0.5, ITERS)
    ax = result.plot(against="bytes")
    lines = ax.get_lines()
    assert len(lines) == 2  # the metrics, "bytes" being the x axis
    np.testing.assert_array_equal(lines[0].get_xdata(), result.history["bytes"])
    assert ax.get_xlabel() == "bytes sent per agent"
    with pytest.raises(ValueError, match="against must be"):
        result.plot(against="seconds")
    with pytest.raises(ValueError, match="no metric 'time' in history.*fogsim.clock"):
        result.plot(against="time")  # no clock ran
    plt.close("all")


def distributed_bytes() -> dict[str, np.ndarray]:
    """The bytes histories the MPI job compares, on the current ring world."""
    got = {name: runs()[name][0]().history["bytes"] for name in DISTRIBUTED}
    got["dgd_local"] = A.dgd(
        problem(), 0.02, ITERS, communicate_every=2, global_average_every=2
    ).history["bytes"]
    return got


DISTRIBUTED = ("consensus", "gradient_tracking", "choco_gossip")


def job(out: str) -> None:
    """Run a few algorithms one agent per rank, then sharded; save their bytes (main)."""
    saved: dict[str, Any] = {}
    main = False
    for label, size in (("mpi", None), ("sharded", SHARDED)):
        if size is None:
            fs.init(topology=T.ring_graph, seed=0)
        else:
            fs.init(backend="sim", size=size, topology=T.ring_graph, seed=0)
        saved.update({f"{label}.{k}": v for k, v in distributed_bytes().items()})
        main = fs.is_main_process()
        fs.shutdown()
    if main:
        np.savez(out, **saved)


@pytest.mark.mpi
def test_mpi_and_sharded_runs_record_the_simulators_bytes(tmp_path):
    out = tmp_path / "bytes.npz"
    _jobs.fogrun(4, "-m", "tests.test_algorithms_bytes", str(out), timeout=120).check()
    with np.load(out) as saved:
        got = dict(saved)
    for label, size in (("mpi", 4), ("sharded", SHARDED)):
        with fs.Context(backend="sim", size=size, topology=T.ring_graph, seed=0) as world:
            want = distributed_bytes()
        world.close()
        for name, values in want.items():
            np.testing.assert_array_equal(got[f"{label}.{name}"], values, err_msg=f"{label} {name}")
    np.testing.assert_array_equal(got["mpi.dgd_local"], local_steps_bytes(ITERS, 2, 2))


if __name__ == "__main__":
    job(sys.argv[1])
