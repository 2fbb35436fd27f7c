"""fs.bytes_sent(): the simulator's counts follow the weight matrices, and the runtimes
(MPI, torch.distributed) and SPMD agents count the same bytes for the same script.

This file is also the job: from the repository root, ``fogrun [--sim|--spmd] -np 4 python
tests/test_bytes_sent.py OUT.npz`` runs neighbor ops on a ring, the exponential-2 graph and
a random weighted digraph (static and per-call weights, several dtypes, neighbor_allgather
of a uint8 buffer, a hierarchical step) and the main process saves every agent's count
after each op.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

N = 4


def random_digraph(n: int) -> np.ndarray:
    """A random weighted digraph, row-stochastic, the same on every rank."""
    rng = np.random.default_rng(7)
    A = (rng.random((n, n)) < 0.5).astype(float) * rng.uniform(0.5, 1.5, (n, n))
    A[np.arange(n), (np.arange(n) + 1) % n] = 1.0  # connected: a directed ring at least
    np.fill_diagonal(A, 1.0)
    return A / A.sum(axis=1, keepdims=True)


def topologies(n: int) -> dict:
    from fogsim import topology as T

    return {
        "ring": (T.ring_graph(n), False),
        "exp2": (T.exponential_two_graph(n), False),
        "random": (random_digraph(n), True),
    }


def steps(fs, n: int):
    """Yield (name, expected out-degree per agent or None, callable) for one topology in use.

    The out-degrees are the formula's (column counts of the off-diagonal pattern); the
    in-process test checks the simulator against them, the jobs compare modes.
    """
    W = fs.load_topology().to_sparse().toarray()
    static = ((W != 0) & ~np.eye(n, dtype=bool)).sum(axis=0)
    later = [(i, [j for j in range(n) if j > i]) for i in range(n)]  # agent j sends to i > j
    below = fs.local(lambda r: {j: 1.0 / (r + 1) for j in range(r)})
    above = fs.local(lambda r: {j: 1.0 for j in range(r + 1, n)})
    one_peer = np.roll(np.eye(n), 1, axis=1) * 0.5 + np.eye(n) * 0.5  # agent i hears i + 1
    x64 = fs.local(lambda r: np.arange(5.0) + r)
    x32 = fs.local(lambda r: np.full((2, 3), r, dtype=np.float32))
    x16 = fs.local(lambda r: np.full(3, r, dtype=np.float16))
    buf = fs.local(lambda r: np.full(7, r, dtype=np.uint8))

    def nonblocking():
        handles = [fs.neighbor_allreduce_nonblocking(x64) for _ in range(3)]
        for h in handles:
            fs.wait(h)

    def first_in_neighbor():
        src = fs.local(lambda r: {fs.load_topology().in_neighbors(r)[0]: 0.5})
        fs.neighbor_allreduce(x64, self_weight=fs.local(lambda r: 0.5), src_weights=src)

    yield "static_f64", (40, static), lambda: fs.neighbor_allreduce(x64)
    yield "static_f32", (24, static), lambda: fs.neighbor_allreduce(x32)
    yield "static_f16", (12, static), lambda: fs.neighbor_allreduce(x16)  # as float32
    yield "fused", (120, static), nonblocking
    yield "static_src", (40, static), first_in_neighbor
    yield (
        "dynamic_dicts",
        (40, n - 1 - np.arange(n)),  # agent j sends to the n - 1 - j agents above it
        lambda: fs.neighbor_allreduce(
            x64,
            self_weight=fs.local(lambda r: 1.0 / (r + 1)),
            src_weights=below,
            dst_weights=above,
        ),
    )
    yield (
        "dynamic_matrix",
        (24, np.ones(n, dtype=np.int64)),
        lambda: fs.neighbor_allreduce(x32, src_weights=one_peer),
    )
    yield "gather_u8", (7, static), lambda: fs.neighbor_allgather(buf)
    yield "gather_f16", (6, static), lambda: fs.neighbor_allgather(x16)
    yield (
        "gather_dynamic",
        (7, n - 1 - np.arange(n)),
        lambda: fs.neighbor_allgather(
            buf,
            src_ranks=fs.local(lambda r: list(range(r))),
            dst_ranks=fs.local(lambda r: dict(later)[r]),
        ),
    )


def job(out: str) -> None:
    import fogsim as fs

    fs.init(local_size=2)
    n = fs.size()
    saved = {}
    for tname, (topo, weighted) in topologies(n).items():
        fs.set_topology(topo, is_weighted=weighted)
        fs.bytes_sent(reset=True)
        for name, _, run in steps(fs, n):
            run()
            saved[f"{tname}.{name}"] = fs.global_view(np.asarray(fs.bytes_sent(reset=True)))
    x = fs.local(lambda r: np.arange(3.0) * r)
    fs.hierarchical_neighbor_allreduce(x)
    saved["hierarchical"] = fs.global_view(np.asarray(fs.bytes_sent()))
    fs.neighbor_allreduce(x)
    fs.allreduce(x)  # collectives are not counted
    saved["cumulative"] = fs.global_view(np.asarray(fs.bytes_sent()))
    saved["after_reset"] = fs.global_view(np.asarray(fs.bytes_sent(reset=True)))
    saved["zero"] = fs.global_view(np.asarray(fs.bytes_sent()))
    if fs.is_main_process():
        np.savez(out, **saved)
    fs.shutdown()


# -- in process: the simulator against the formula -------------------------------------------
@pytest.fixture
def sim():
    import fogsim as fs

    fs.init(backend="sim", size=N, local_size=2)
    yield fs
    fs.shutdown()


@pytest.mark.parametrize("tname", ["ring", "exp2", "random"])
def test_the_simulator_counts_value_bytes_times_out_degree(sim, tname):
    fs = sim
    topo, weighted = topologies(N)[tname]
    fs.set_topology(topo, is_weighted=weighted)
    fs.bytes_sent(reset=True)
    for name, (per_agent, degrees), run in steps(fs, N):
        run()
        got = fs.bytes_sent(reset=True)
        assert got.dtype == np.int64 and got.shape == (N,), name
        np.testing.assert_array_equal(got, per_agent * np.asarray(degrees), err_msg=name)


def test_counts_accumulate_and_reset(sim):
    fs = sim
    fs.set_topology(fs.topology.ring_graph(N))
    x = fs.local(lambda r: np.zeros(4))
    fs.neighbor_allreduce(x)
    once = fs.bytes_sent()
    fs.neighbor_allreduce(x)
    np.testing.assert_array_equal(fs.bytes_sent(), 2 * once)
    np.testing.assert_array_equal(fs.bytes_sent(reset=True), 2 * once)
    np.testing.assert_array_equal(fs.bytes_sent(), 0)
    fs.allreduce(x)
    fs.broadcast(x, 0)
    np.testing.assert_array_equal(fs.bytes_sent(), 0)  # collectives are not counted
    with pytest.raises(TypeError, match="reset"):
        fs.bytes_sent(reset=1)


def test_a_hierarchical_step_counts_the_machine_roots_exchange(sim):
    fs = sim
    fs.set_machine_topology(fs.topology.ring_graph(2))
    fs.hierarchical_neighbor_allreduce(fs.local(lambda r: np.ones(3, dtype=np.float32)))
    np.testing.assert_array_equal(fs.bytes_sent(), [12, 0, 12, 0])


def test_init_starts_from_zero(sim):
    fs = sim
    fs.neighbor_allreduce(fs.local(lambda r: np.ones(2)))
    assert fs.bytes_sent().sum() > 0
    fs.init(backend="sim", size=N)
    np.testing.assert_array_equal(fs.bytes_sent(), 0)


def test_torch_tensors_count_as_the_runtimes_send_them(sim):
    torch = pytest.importorskip("torch")
    fs = sim
    fs.set_topology(fs.topology.ring_graph(N))
    fs.neighbor_allgather(torch.zeros(N, 3, dtype=torch.bfloat16))  # bfloat16 travels as float32
    np.testing.assert_array_equal(fs.bytes_sent(reset=True), 12 * 2)
    fs.neighbor_allreduce(torch.zeros(N, 3, dtype=torch.float16))  # averaged in float32
    np.testing.assert_array_equal(fs.bytes_sent(reset=True), 12 * 2)
    fs.neighbor_allgather(torch.zeros(N, 3, dtype=torch.float16))
    np.testing.assert_array_equal(fs.bytes_sent(reset=True), 6 * 2)


# -- every mode counts what the simulator counts -----------------------------------------------
MODES = {
    "sim": (["--sim"], {}),
    "spmd": (["--spmd"], {}),
    "sharded": (["--sim", "--shards", "2"], {}),
    "mpi": ([], {}),
    "torch": ([], {"FOGSIM_BACKEND": "torch"}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from tests import _jobs  # here: the job runs this file as a script, without the package

    tmp = tmp_path_factory.mktemp("bytes")
    cache: dict[str, dict[str, np.ndarray]] = {}

    def get(mode: str) -> dict[str, np.ndarray]:
        if mode not in cache:
            options, env = MODES[mode]
            out = tmp / f"bytes-{mode}.npz"
            _jobs.fogrun_path(
                Path(__file__), N, str(out), options=tuple(options), timeout=240, env=env
            ).check()
            with np.load(out) as saved:
                cache[mode] = dict(saved)
        return cache[mode]

    return get


def test_the_simulator_job_counts_the_formula(results):
    got = results("sim")
    assert got["exp2.static_f64"].shape == (N,)
    np.testing.assert_array_equal(got["after_reset"], got["cumulative"])
    np.testing.assert_array_equal(got["zero"], 0)
    assert (got["cumulative"] > got["hierarchical"]).all()


@pytest.mark.parametrize(
    "mode",
    [
        "spmd",
        pytest.param("sharded", marks=pytest.mark.mpi),
        pytest.param("mpi", marks=pytest.mark.mpi),
        pytest.param("torch", marks=pytest.mark.mpi),
    ],
)
def test_every_mode_counts_the_simulators_bytes(results, mode):
    simulated, other = results("sim"), results(mode)
    assert set(simulated) == set(other)
    for key in simulated:
        np.testing.assert_array_equal(other[key], simulated[key], err_msg=key)


if __name__ == "__main__":
    job(sys.argv[1])
