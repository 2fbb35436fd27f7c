"""Compressed gossip (``neighbor_allreduce(x, compressor=C)``) and CHOCO-gossip / CHOCO-SGD.

Checked against Koloskova, Stich and Jaggi (2019): linear convergence for a gamma within
Theorem 2's bound, the average preserved, identity reproducing exact gossip, and the same
numbers simulated, as SPMD threads, under MPI and under torch.distributed (gloo).

This file is also the job: from the repository root, ``fogrun -np 4 python
tests/test_compress_gossip.py OUT.npz`` runs :func:`work` and the main process saves every
agent's values.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim.compress import (
    CompressedGossip,
    Compressor,
    identity,
    power_sgd,
    qsgd,
    random_k,
    scaled_sign,
    top_k,
)

SEED = 3


class RandomMask(Compressor):
    """Keep ``k`` entries chosen at random (CHOCO's contractive rand-k): draws per agent."""

    randomized = True

    def __init__(self, k: int) -> None:
        self.k = k

    def layout(self, shape: tuple[int, ...], dtype: Any) -> tuple[tuple[np.dtype, int], ...]:
        return ((np.dtype(dtype), self.k), (np.dtype(np.int32), self.k))

    def _compress(self, x: np.ndarray, rng: Any) -> tuple[np.ndarray, ...]:
        idx = np.sort(np.argsort(rng.random(x.shape[1]), axis=1)[:, : self.k], axis=1)
        return np.take_along_axis(x, idx, axis=1), idx.astype(np.int32)

    def _decompress(self, parts: Sequence[np.ndarray], d: int, dtype: np.dtype) -> np.ndarray:
        values, idx = parts
        out = np.zeros((values.shape[0], d), dtype=dtype)
        np.put_along_axis(out, idx.astype(np.intp), values, axis=1)
        return out


def irregular_weights() -> np.ndarray:
    """A weighted digraph on 4 agents whose in-degrees differ (1, 2, 3, 1)."""
    W = np.zeros((4, 4))
    for i, row in {
        0: {0: 0.5, 1: 0.5},
        1: {1: 0.4, 0: 0.3, 2: 0.3},
        2: {2: 0.1, 0: 0.2, 1: 0.3, 3: 0.4},
        3: {3: 0.75, 2: 0.25},
    }.items():
        for j, w in row.items():
            W[i, j] = w
    return W


def work() -> dict[str, Any]:
    """Compressed exchanges and CHOCO steps on 4 agents; every agent's values, agent-local."""
    import torch

    out: dict[str, Any] = {}
    x = fs.local(lambda r: np.cos(np.arange(10.0) * (r + 1) + r))
    out["top_k"] = fs.neighbor_allreduce(x, compressor=top_k(3))
    out["random_k32"] = fs.neighbor_allreduce(x.astype(np.float32), compressor=RandomMask(3))
    out["qsgd"] = fs.neighbor_allreduce(x, compressor=qsgd(7))
    out["scaled_sign"] = fs.neighbor_allreduce(x, compressor=scaled_sign())
    out["random_k"] = fs.neighbor_allreduce(x, compressor=random_k(0.3))
    m = fs.local(lambda r: np.outer(np.arange(4.0) + r, np.cos(np.arange(3.0) * (r + 1))))
    gossip = CompressedGossip(power_sgd(rank=1), 0.5)
    for _ in range(3):
        m = gossip.step(m)
    out["choco_power_sgd"] = m
    gossip = CompressedGossip(RandomMask(4), 0.3)
    y = x
    fs.bytes_sent(reset=True)
    for _ in range(20):
        y = gossip.step(y)
    out["choco_random_k"], out["bytes_random_k"] = y, np.asarray(gossip.bytes_sent)
    out["counted_random_k"] = np.asarray(fs.bytes_sent())  # what the runtime counted
    tensor_gossip = CompressedGossip(top_k(2), 0.5)
    t = torch.as_tensor(x)
    for _ in range(10):
        t = tensor_gossip.step(t)
    out["choco_tensor"] = t.numpy()
    out["choco_tensor_is_tensor"] = np.asarray(float(isinstance(t, torch.Tensor))) + 0 * x[..., 0]
    fs.set_topology(irregular_weights(), is_weighted=True)
    out["irregular"] = fs.neighbor_allreduce(x, compressor=RandomMask(2))
    gossip = CompressedGossip(top_k(3), 0.4)
    y = x
    for _ in range(15):
        y = gossip.step(y)
    out["choco_irregular"], out["bytes_irregular"] = y, np.asarray(gossip.bytes_sent)
    gossip = CompressedGossip(identity(), 0.5)
    fs.bytes_sent(reset=True)
    for _ in range(3):
        y = gossip.step(y)
    out["bytes_identity"], out["counted_identity"] = gossip.bytes_sent, fs.bytes_sent()
    # a dynamic topology: this step's matrix, payloads only along its edges
    fs.bytes_sent(reset=True)
    z = x
    for C, step in zip(DYNAMIC, T.one_peer_exponential_two(4), strict=False):
        z = fs.neighbor_allreduce(z, src_weights=step.weights, compressor=C)
    out["dynamic"], out["counted_dynamic"] = z, np.asarray(fs.bytes_sent())
    out["dynamic_dicts"] = fs.neighbor_allreduce(
        x, fs.local(lambda r: 0.5), fs.local(half_from_first_in_neighbor), compressor=qsgd(3)
    )
    return out


#: the compressors of the dynamic steps in :func:`work`
DYNAMIC = (top_k(3), qsgd(7), top_k(2), qsgd(3))


def half_from_first_in_neighbor(r: int) -> dict[int, float]:
    """Agent r's per-call weights over :func:`irregular_weights`: a subset of its in-neighbors."""
    return {0: {1: 0.5}, 1: {2: 0.5}, 2: {3: 0.5}, 3: {2: 0.5}}[r]


def job(path: str) -> None:
    fs.init(topology=T.exponential_two_graph, seed=SEED)
    saved = {key: fs.global_view(np.asarray(value)) for key, value in work().items()}
    if fs.is_main_process():
        np.savez(path, **saved)
    fs.shutdown()


@pytest.fixture(autouse=True)
def _clean():
    yield
    if fs.is_initialized():
        fs.shutdown()


def simulated() -> dict[str, np.ndarray]:
    fs.init(size=4, topology=T.exponential_two_graph, seed=SEED)
    got = {key: np.asarray(value) for key, value in work().items()}
    fs.shutdown()
    return got


# -- one exchange ----------------------------------------------------------------------------
@pytest.mark.parametrize("topology", [T.ring_graph, T.exponential_two_graph, T.star_graph])
@pytest.mark.parametrize("weighted", [False, True])
def test_identity_is_neighbor_allreduce_bit_for_bit(topology, weighted):
    fs.init(size=9, topology=topology)
    if weighted:
        W = T.as_topology(topology(9)).uniform().to_dense() * 0.5 + np.eye(9) * 0.5
        fs.set_topology(W, is_weighted=True)
    x = fs.local(lambda r: np.sin(np.arange(7.0) * (r + 2)))
    exact = fs.neighbor_allreduce(x)
    got = fs.neighbor_allreduce(x, compressor=identity())
    assert np.array_equal(got, exact)
    assert np.array_equal(
        fs.wait(fs.neighbor_allreduce_nonblocking(x, compressor=identity())), exact
    )


@pytest.mark.parametrize("topology", [T.ring_graph, T.star_graph])
def test_a_lossless_compressor_gives_the_exact_average(topology):
    # top_k(1.0) keeps every entry: the compressed path (pack, allgather, unpack, mix) must
    # give neighbor_allreduce's numbers to round-off, on regular and irregular graphs
    fs.init(size=7, topology=topology)
    x = fs.local(lambda r: np.cos(np.arange(12.0) * (r + 1)))
    got = fs.neighbor_allreduce(x, compressor=top_k(1.0))
    np.testing.assert_allclose(got, fs.neighbor_allreduce(x), rtol=1e-15, atol=1e-15)


def test_a_compressed_exchange_is_the_mix_of_the_compressed_values():
    fs.init(size=8, topology=T.exponential_two_graph)
    x = fs.local(lambda r: np.sin(np.arange(20.0) * (r + 1) + r))
    C = top_k(4)
    cx = C.decompress_stacked(C.compress_stacked(x))
    W = fs.load_topology().uniform().to_dense()
    got = fs.neighbor_allreduce(x, compressor=C)
    np.testing.assert_allclose(got, W @ cx, rtol=1e-14, atol=1e-15)
    assert got.dtype == x.dtype
    got32 = fs.neighbor_allreduce(x.astype(np.float32), compressor=C)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, W @ cx, rtol=1e-6, atol=1e-6)


def test_tensors_come_back_as_tensors():
    torch = pytest.importorskip("torch")
    fs.init(size=4, topology=T.ring_graph)
    x = fs.local(lambda r: np.arange(6.0) + r)
    got = fs.neighbor_allreduce(torch.as_tensor(x), compressor=top_k(2))
    assert isinstance(got, torch.Tensor)
    assert np.array_equal(got.numpy(), fs.neighbor_allreduce(x, compressor=top_k(2)))


def test_cuda_tensors_come_back_on_their_device():
    from tests import environment  # not at the top: this file is also an MPI job's script

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(environment.needs_hardware("a CUDA GPU"))

    def gossip(x: Any, C: Compressor) -> Any:
        fs.init(size=4, topology=T.ring_graph, seed=SEED)  # the same draws for both
        once = fs.neighbor_allreduce(x, compressor=C)
        choco = CompressedGossip(C, 0.5)
        for _ in range(3):
            x = choco.step(x)
        fs.shutdown()
        return once, x

    x = np.stack([np.arange(6.0) + r for r in range(4)])
    for C in (top_k(2), qsgd(7), identity()):
        want = gossip(x, C)
        got = gossip(torch.as_tensor(x, device="cuda"), C)
        for g, w in zip(got, want, strict=True):
            assert g.device.type == "cuda" and g.dtype == torch.float64
            # identity takes the simulator's device path (torch ops): equal to round-off
            np.testing.assert_allclose(g.cpu().numpy(), w, rtol=1e-12, atol=1e-13)


# -- CHOCO-gossip: theory ---------------------------------------------------------------------
def paper_gamma_and_rate(omega: float) -> tuple[float, float]:
    """Theorem 2 of Koloskova et al. (2019): the consensus step size and the rate it ensures."""
    W = fs.load_topology().uniform().to_dense()
    n = W.shape[0]
    moduli = np.sort(np.abs(np.linalg.eigvals(W)))[::-1]
    gap = 1.0 - moduli[1]
    beta = np.linalg.norm(np.eye(n) - W, 2)
    gamma = gap**2 * omega / (16 * gap + gap**2 + 4 * beta**2 + 2 * gap * beta**2 - 8 * gap * omega)
    return float(gamma), float(gap**2 * omega / 82)


#: d = 8 entries an agent: (compressor, omega with E||C(x) - x||^2 <= (1 - omega) ||x||^2)
COMPRESSORS = {
    "top_k": (top_k(4), 4 / 8),
    "random_k": (random_k(4, scale=False), 4 / 8),  # in expectation
    "qsgd": (qsgd(16), 1 - 8 / 16**2),  # unbiased, variance <= min(d/s^2, sqrt(d)/s) ||x||^2
}


@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
@pytest.mark.parametrize(
    "n, topology, iters", [(16, T.ring_graph, 12000), (64, T.exponential_two_graph, 4000)]
)
def test_choco_gossip_converges_linearly_within_the_papers_bound(n, topology, iters, compressor):
    from fogsim import algorithms as A

    fs.init(size=n, topology=topology)
    C, omega = COMPRESSORS[compressor]
    gamma, rate = paper_gamma_and_rate(omega)
    assert 0 < gamma <= 1
    x0 = fs.local(lambda r: np.sin(np.arange(8) * (r + 1.0)) + r % 3)
    result = A.choco_gossip(x0, C, gamma, iters)
    err2 = result.history["consensus_error"] ** 2 * n  # ||X - Xbar||_F^2
    # Theorem 2: ||X_t - Xbar||^2 <= e_t <= (1 - rate)^t e_0, e_0 = ||X_0 - Xbar||^2 + ||X_0||^2
    e0 = err2[0] + float(np.sum(np.asarray(x0) ** 2))
    t = np.arange(iters + 1)
    assert np.all(err2 <= (1 - rate) ** t * e0 * (1 + 1e-9))
    # linear: in every quarter of the run log-error falls at least at the theorem's rate
    # (several times faster in fact; the bound is a worst case)
    quarters = np.linspace(iters // 4, iters, 4).astype(int)
    slopes = np.diff(np.log(err2[quarters])) / np.diff(quarters)
    assert np.all(slopes < np.log1p(-rate)), (slopes, np.log1p(-rate))
    # to the exact average: it is preserved, so the distance to it is the disagreement
    np.testing.assert_allclose(np.asarray(result.x).mean(0), np.asarray(x0).mean(0), atol=1e-12)
    np.testing.assert_allclose(
        result.history["distance"], result.history["consensus_error"], rtol=1e-9
    )


def test_choco_gossip_reaches_the_exact_average_with_a_practical_gamma():
    from fogsim import algorithms as A

    fs.init(size=16, topology=T.ring_graph)
    x0 = fs.local(lambda r: np.cos(np.arange(50.0) * (r + 1)))
    result = A.choco_gossip(x0, top_k(0.1), 0.2, 3000)
    assert result.history["distance"][-1] < 1e-9 * result.history["distance"][0]
    mean = np.asarray(x0).mean(0)
    np.testing.assert_allclose(np.asarray(result.x), np.broadcast_to(mean, (16, 50)), atol=1e-9)


def test_choco_gossip_needs_qsgd_scaled_at_large_d():
    # d = 2000, s = 7: tau = sqrt(d)/s ~ 6.4 > 1, so plain QSGD is no contraction and the
    # error-feedback copies run away whatever gamma; Q(x)/(1 + tau) (Koloskova et al. 2019,
    # as CHOCO uses QSGD) converges linearly with a practical gamma (the paper's bound,
    # gamma ~ 4e-5 on this ring, would need far more steps than a test can take).
    from fogsim import algorithms as A

    n, d, iters = 16, 2000, 600
    fs.init(size=n, topology=T.ring_graph)
    x0 = fs.local(lambda r: np.random.default_rng(r).standard_normal(d))
    result = A.choco_gossip(x0, qsgd(7, scaled=True), 0.3, iters)
    dist = result.history["distance"]
    assert dist[-1] < 1e-4 * dist[0]
    # linear: log-error falls in every third of the run at least half as fast as in the first
    drops = np.diff(np.log(dist[[0, iters // 3, 2 * iters // 3, iters]]))
    assert np.all(drops[1:] < 0.5 * drops[0]), drops
    np.testing.assert_allclose(np.asarray(result.x).mean(0), np.asarray(x0).mean(0), atol=1e-12)
    for gamma in (0.3, 0.03):
        plain = A.choco_gossip(x0, qsgd(7), gamma, 60).history["distance"]
        assert plain[-1] > 10 * plain[0], gamma


@pytest.mark.parametrize("topology", [T.ring_graph, T.exponential_two_graph])
@pytest.mark.parametrize("compressor", [top_k(0.2), RandomMask(3)], ids=["top_k", "random_k"])
def test_choco_gossip_preserves_the_average(topology, compressor):
    fs.init(size=12, topology=topology)
    x = fs.local(lambda r: np.sin(np.arange(15.0) * (r + 1)) * (r + 1))
    mean = x.mean(0)
    gossip = CompressedGossip(compressor, 0.3)
    for _ in range(200):
        x = gossip.step(x)
        np.testing.assert_allclose(x.mean(0), mean, rtol=0, atol=1e-12)


def test_choco_with_identity_and_gamma_one_is_exact_gossip_to_round_off():
    # Not bit for bit: x + (s - x_hat) and x_hat + (x - x_hat) round where W x does not.
    from fogsim import algorithms as A

    fs.init(size=16, topology=T.ring_graph)
    x0 = fs.local(lambda r: np.cos(np.arange(9.0) * (r + 1)))
    choco = A.choco_gossip(x0, identity(), 1.0, 60)
    exact = A.consensus(x0, 60)
    scale = np.abs(np.asarray(x0)).max()
    np.testing.assert_allclose(choco.x, exact.x, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(
        choco.history["consensus_error"], exact.history["consensus_error"], rtol=1e-9, atol=1e-14
    )


def test_bytes_are_payload_bytes_times_out_degree():
    from fogsim import algorithms as A

    fs.init(size=6, topology=T.star_graph)
    x0 = fs.local(lambda r: np.arange(40.0) * r)
    C = top_k(5)
    result = A.choco_gossip(x0, C, 0.5, 7)
    per = C.payload_bytes((40,), np.float64)
    assert per == 5 * 8 + 5 * 1  # 40 entries: one-byte indices
    out_degree = fs.load_topology().out_degrees()
    assert np.array_equal(result.state["bytes_sent"], 7 * per * out_degree)
    np.testing.assert_allclose(result.history["bytes"], np.arange(8) * per * out_degree.mean())
    full = A.choco_gossip(x0, identity(), 0.5, 7)
    assert full.history["bytes"][-1] == 7 * 40 * 8 * out_degree.mean()


def test_choco_sgd_solves_least_squares():
    from fogsim import algorithms as A

    fs.init(size=8, topology=T.exponential_two_graph)
    problem = A.LeastSquares.random(m=20, d=10, seed=1)
    lr = 0.5 / problem.lipschitz()
    choco = A.choco_sgd(problem, top_k(0.3), 0.3, lr, 600)
    assert choco.history["distance"][-1] < 0.05 * choco.history["distance"][0]
    # a constant lr stops in an O(lr) neighbourhood of x*, as for DGD: half lr, about half
    half = A.choco_sgd(problem, top_k(0.3), 0.3, lr / 2, 1200)
    ratio = half.history["distance"][-1] / choco.history["distance"][-1]
    assert 0.35 < ratio < 0.65, ratio
    assert choco.history["bytes"][-1] == 600 * top_k(0.3).payload_bytes(10) * 3
    assert set(choco.history) == {"consensus_error", "distance", "grad_norm", "bytes"}


# -- the same numbers in every mode -------------------------------------------------------------
def test_spmd_agents_give_the_simulators_numbers_bit_for_bit():
    from fogsim import spmd

    expected = simulated()
    agents = spmd.run(work, size=4, topology=T.exponential_two_graph, seed=SEED)
    for key, value in expected.items():
        got = np.stack([np.asarray(agent[key]) for agent in agents])
        assert np.array_equal(got, value), key


#: mode: (processes, environment); "sharded" is the simulator's 4 agents in blocks of 2
MODES = {
    "mpi": (4, {}),
    "torch": (4, {"FOGSIM_BACKEND": "torch"}),
    "sharded": (2, {"FOGSIM_BACKEND": "sim", "FOGSIM_SIZE": "4"}),
}


@pytest.mark.mpi
@pytest.mark.parametrize("mode", sorted(MODES))
def test_distributed_ranks_give_the_simulators_numbers_bit_for_bit(tmp_path, mode):
    from tests import _jobs

    out = tmp_path / f"{mode}.npz"
    processes, env = MODES[mode]
    _jobs.fogrun_path(Path(__file__), processes, str(out), timeout=240, env=env).check()
    expected = simulated()
    with np.load(out) as saved:
        assert set(saved) == set(expected)
        for key, value in expected.items():
            assert np.array_equal(saved[key], value), key
    assert expected["choco_tensor_is_tensor"].all()


def test_the_bytes_counted_are_the_payload_bytes():
    got = simulated()
    for name in ("random_k", "identity"):
        assert np.array_equal(got[f"counted_{name}"], got[f"bytes_{name}"]), name
    assert got["bytes_random_k"].min() > 0
    # one-peer steps: each agent sends each step's payload to exactly one agent
    per_step = [C.payload_bytes((10,), np.float64) for C in DYNAMIC]
    assert np.array_equal(got["counted_dynamic"], np.full(4, sum(per_step)))


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [0, -0.1, 1.5, float("nan"), float("inf")])
def test_gamma_out_of_range_is_refused(gamma):
    from fogsim import algorithms as A

    fs.init(size=4, topology=T.ring_graph)
    with pytest.raises(ValueError, match="gamma"):
        CompressedGossip(top_k(1), gamma)
    with pytest.raises(ValueError, match="gamma"):
        A.choco_gossip(fs.local(lambda r: np.ones(3)), top_k(1), gamma, 3)
    with pytest.raises(TypeError, match="gamma"):
        CompressedGossip(top_k(1), "0.5")


def test_an_integer_array_is_refused():
    fs.init(size=4, topology=T.ring_graph)
    x = fs.local(lambda r: np.arange(5) + r)
    with pytest.raises(TypeError, match="x must hold float32 or float64"):
        fs.neighbor_allreduce(x, compressor=top_k(2))
    with pytest.raises(TypeError, match="x must hold float32 or float64"):
        fs.neighbor_allreduce(x, compressor=identity())
    with pytest.raises(TypeError, match="x must hold float32 or float64"):
        CompressedGossip(top_k(2), 0.5).step(x)


def test_a_meta_tensor_is_refused_before_any_exchange():
    torch = pytest.importorskip("torch")
    fs.init(size=4, topology=T.ring_graph)
    meta = torch.ones(4, 3, dtype=torch.float64, device="meta")
    for C in (top_k(1), identity()):
        with pytest.raises(TypeError, match=r"\bx\b.*meta"):
            fs.neighbor_allreduce(meta, compressor=C)
    with pytest.raises(TypeError, match=r"\bx\b.*meta"):
        CompressedGossip(top_k(1), 0.5).step(meta)


def test_push_weights_with_a_compressor_and_a_non_compressor_are_refused():
    fs.init(size=4, topology=T.ring_graph)
    x = fs.local(lambda r: np.ones(3))
    with pytest.raises(ValueError, match="compressor takes no dst_weights"):
        fs.neighbor_allreduce(
            x,
            0.5,
            fs.local(lambda r: {(r + 1) % 4: 0.5}),
            fs.local(lambda r: {(r - 1) % 4: 1.0}),
            compressor=top_k(1),
        )
    with pytest.raises(TypeError, match="compressor must be a fogsim.compress.Compressor"):
        fs.neighbor_allreduce(x, compressor="top_k")
    with pytest.raises(ValueError, match="k=4 is more than"):
        fs.neighbor_allreduce(x, compressor=top_k(4))


if __name__ == "__main__":
    job(sys.argv[1])
