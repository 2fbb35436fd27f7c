"""Compressed neighbor averaging with per-call weights: a dynamic topology's step matrix.

``fs.neighbor_allreduce(x, src_weights=W_t, compressor=C)`` must compute
``x_i <- w_ii C(x_i) + sum_j w_ij C(x_j)`` with this step's ``W_t``, send each payload only
to the agents that weigh it, and, with ``identity()``, be the uncompressed op bit for bit.
The same numbers under SPMD, MPI, torch.distributed and the sharded simulator are checked
by the job of ``tests/test_compress_gossip.py`` (its ``dynamic`` entries).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T
from fogsim.compress import Compressor, identity, qsgd, top_k

SEED = 11
N, D = 8, 24


@pytest.fixture(autouse=True)
def _clean():
    yield
    if fs.is_initialized():
        fs.shutdown()


def start(topology: Any = T.exponential_two_graph) -> np.ndarray:
    fs.init(size=N, topology=topology, seed=SEED)
    return fs.local(lambda r: np.sin(np.arange(D) * (r + 1.0) + r) * (r + 1))


def mix_by_definition(W: np.ndarray, cx: np.ndarray) -> np.ndarray:
    """``x_i <- w_ii C(x_i) + sum_{j != i, w_ij != 0} w_ij C(x_j)``, sources ascending."""
    out = np.empty_like(cx)
    for i in range(W.shape[0]):
        acc = W[i, i] * cx[i]
        for j in np.flatnonzero(W[i]):
            if j != i:
                acc = acc + W[i, j] * cx[j]
        out[i] = acc
    return out


def schedules() -> dict[str, Any]:
    return {
        "one_peer_exp2": lambda: T.one_peer_exponential_two(N),
        "one_peer_of_a_ring": lambda: T.one_peer_schedule(T.ring_graph(N)),
    }


@pytest.mark.parametrize("schedule", sorted(schedules()))
@pytest.mark.parametrize("compressor", [top_k(5), qsgd(7)], ids=["top_k", "qsgd"])
def test_each_step_mixes_the_compressed_values_with_that_steps_weights(schedule, compressor):
    steps = 5
    x0 = start()
    x = x0
    got, degrees = [], []
    for step in islice(schedules()[schedule](), steps):
        fs.bytes_sent(reset=True)
        x = fs.neighbor_allreduce(x, src_weights=step.weights, compressor=compressor)
        got.append(x)
        degrees.append(step.weights.out_degrees())
        per = compressor.payload_bytes((D,), x.dtype)
        # the payload only to the agents that weigh it in this step: out-degree 1 here
        assert np.array_equal(fs.bytes_sent(), per * step.weights.out_degrees())
    fs.shutdown()
    # a fresh world with the same seed draws the same randomness, step after step
    start()
    x = x0
    for k, step in enumerate(islice(schedules()[schedule](), steps)):
        C: Compressor = compressor
        cx = np.asarray(C.decompress_stacked(C.compress_stacked(x, fs.rng())), dtype=np.float64)
        x = mix_by_definition(step.weights.to_dense(), cx)
        np.testing.assert_allclose(got[k], x, rtol=1e-14, atol=1e-15)
        x = got[k]  # the next step starts from what the op computed
    assert all(np.array_equal(d, np.ones(N)) for d in degrees)


@pytest.mark.parametrize("as_topology", [False, True])
def test_identity_is_the_uncompressed_dynamic_step_bit_for_bit(as_topology):
    x = start()
    for step in islice(T.one_peer_exponential_two(N), 3):
        W = step.weights if as_topology else step.weights.to_dense()
        assert np.array_equal(
            fs.neighbor_allreduce(x, src_weights=W, compressor=identity()),
            fs.neighbor_allreduce(x, src_weights=W),
        )
        sw = np.linspace(0.3, 0.6, N)
        assert np.array_equal(
            fs.neighbor_allreduce(x, sw, W, compressor=identity(), check_weights=False),
            fs.neighbor_allreduce(x, sw, W, check_weights=False),
        )
        x = fs.neighbor_allreduce(x, src_weights=W)


def test_a_given_self_weight_replaces_the_matrix_diagonal():
    x = start()
    step = next(T.one_peer_exponential_two(N)).weights
    C = top_k(4)
    sw = np.linspace(0.2, 0.7, N)
    got = fs.neighbor_allreduce(x, sw, step, compressor=C, check_weights=False)
    W = step.to_dense()
    np.fill_diagonal(W, sw)
    cx = np.asarray(C.decompress_stacked(C.compress_stacked(x)), dtype=np.float64)
    np.testing.assert_allclose(got, mix_by_definition(W, cx), rtol=1e-14, atol=1e-15)


def test_an_irregular_step_sends_to_each_agents_out_degree():
    x = start()
    rng = np.random.default_rng(0)
    W = np.where(rng.random((N, N)) < 0.3, rng.random((N, N)), 0.0)
    W[0] = 0.0  # agent 0 hears no one; agent 1 weighs everyone
    W[1] = 1.0
    np.fill_diagonal(W, 1.0)
    W /= W.sum(axis=1, keepdims=True)
    C = qsgd(3)
    fs.bytes_sent(reset=True)
    got = fs.neighbor_allreduce(x, src_weights=W, compressor=C)
    off = W - np.diag(np.diag(W))
    per = C.payload_bytes((D,), x.dtype)
    assert np.array_equal(fs.bytes_sent(), per * np.count_nonzero(off, axis=0))
    fs.shutdown()
    start()
    cx = np.asarray(C.decompress_stacked(C.compress_stacked(x, fs.rng())), dtype=np.float64)
    np.testing.assert_allclose(got, mix_by_definition(W, cx), rtol=1e-14, atol=1e-15)


def test_per_agent_dicts_combine_their_keys_over_the_topologys_edges():
    x = start(T.ring_graph)  # in-neighbors i - 1 and i + 1
    C = top_k(6)
    sw = np.full(N, 0.6)
    src = [{(r - 1) % N: 0.4} for r in range(N)]  # each agent weighs one of its two
    fs.bytes_sent(reset=True)
    got = fs.neighbor_allreduce(x, sw, src, compressor=C)
    # the senders are the topology's: every out-neighbor gets the payload
    per = C.payload_bytes((D,), x.dtype)
    assert np.array_equal(fs.bytes_sent(), per * fs.load_topology().out_degrees())
    W = np.diag(sw)
    for r, weights in enumerate(src):
        for j, w in weights.items():
            W[r, j] = w
    cx = np.asarray(C.decompress_stacked(C.compress_stacked(x)), dtype=np.float64)
    np.testing.assert_allclose(got, mix_by_definition(W, cx), rtol=1e-14, atol=1e-15)
    assert np.array_equal(
        fs.neighbor_allreduce(x, sw, src, compressor=identity()), fs.neighbor_allreduce(x, sw, src)
    )


def test_per_call_weights_that_are_not_stochastic_warn_as_the_uncompressed_op():
    x = start()
    W = next(T.one_peer_exponential_two(N)).weights.to_dense() * 3.0
    with pytest.warns(fs.WeightWarning):
        fs.neighbor_allreduce(x, src_weights=W, compressor=top_k(2))


# -- bad input --------------------------------------------------------------------------------
def test_push_weights_are_refused_with_a_compressor():
    x = start()
    step = next(T.one_peer_exponential_two(N)).weights
    dst = [step.out_neighbors(r) for r in range(N)]
    with pytest.raises(ValueError, match="compressor takes no dst_weights"):
        fs.neighbor_allreduce(x, 0.5, step, dst, compressor=qsgd(7))


def test_a_matrix_of_the_wrong_size_is_refused_before_any_exchange():
    x = start()
    fs.bytes_sent(reset=True)
    with pytest.raises(ValueError, match=f"src_weights has {N + 1} agents but the world has {N}"):
        fs.neighbor_allreduce(x, src_weights=np.eye(N + 1), compressor=top_k(2))
    assert not fs.bytes_sent().any()


def test_bad_per_agent_weights_are_refused():
    x = start(T.ring_graph)
    src = [{(r + 2) % N: 0.5} for r in range(N)]
    with pytest.raises(ValueError, match="names rank 2, which is not an in-neighbor of agent 0"):
        fs.neighbor_allreduce(x, 0.5, src, compressor=top_k(2))
    ok = [{(r + 1) % N: 0.5} for r in range(N)]
    with pytest.raises(ValueError, match="src_weights was given without self_weight"):
        fs.neighbor_allreduce(x, src_weights=ok, compressor=top_k(2))
    with pytest.raises(ValueError, match="self_weight and src_weights must be given together"):
        fs.neighbor_allreduce(x, 0.5, compressor=top_k(2))
    with pytest.raises(ValueError, match="src_weights has 3 entries"):
        fs.neighbor_allreduce(x, 0.5, ok[:3], compressor=top_k(2))
