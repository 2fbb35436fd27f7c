"""BlueFog behaviours that fogsim's own API does differently, kept in fogsim.compat.bluefog.

From BlueFog's documentation and tests: a dynamic ``neighbor_allgather`` returns the blocks
in the order of ``src_ranks``; the ``topology_util`` builders give BlueFog's plain weights
(``1/(K+1)`` rounded once, which ``IsTopologyEquivalent`` compares exactly), and so does the
default topology of ``init``; ``set_topology`` while windows exist returns False and keeps the
topology. fogsim's own functions keep their documented behaviour (by-rank blocks, exact-sum
weights, a ValueError).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import fogsim as fs
import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util as tu
from tests._jobs import fogrun_script


@pytest.fixture(autouse=True)
def _clean():
    yield
    fs.shutdown()


@pytest.fixture
def world(monkeypatch):
    """bf.init() with 5 simulated agents."""
    monkeypatch.setenv("FOGSIM_SIZE", "5")
    monkeypatch.delenv("FOGSIM_BACKEND", raising=False)
    bf.init()
    return 5


def _shuffled_pairs(n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """Return per-agent (src_ranks, dst_ranks): every agent receives from all others, with the
    sources in a random order and the destinations matching."""
    rng = np.random.default_rng(seed)
    src = [[int(r) for r in rng.permutation([j for j in range(n) if j != i])] for i in range(n)]
    dst = [[i for i in range(n) if j in src[i]] for j in range(n)]
    return src, dst


# -- neighbor_allgather: the order of src_ranks ------------------------------------------------
def test_dynamic_neighbor_allgather_follows_src_ranks(world):
    n = world
    src, dst = _shuffled_pairs(n, 1)
    x = np.arange(n, dtype=float)[:, None] * np.ones((1, 2)) + np.array([0.0, 0.5])
    got = bf.neighbor_allgather(x, src_ranks=src, dst_ranks=dst)
    want = np.stack([np.concatenate([x[j] for j in src[i]]) for i in range(n)])
    np.testing.assert_array_equal(got, want)
    # fogsim's own op keeps its documented order, by rank
    by_rank = fs.neighbor_allgather(x, src, dst)
    np.testing.assert_array_equal(
        by_rank, np.stack([np.concatenate([x[j] for j in sorted(src[i])]) for i in range(n)])
    )
    assert not np.array_equal(got, by_rank)  # the permutations above are not all sorted


def test_dynamic_neighbor_allgather_uneven_degrees_and_torch(world):
    torch = pytest.importorskip("torch")
    n = world
    src = [[3, 1], [0], [4, 3, 0], [], [2]]
    dst = [[i for i in range(n) if j in src[i]] for j in range(n)]
    x = torch.arange(n * 2, dtype=torch.float64).reshape(n, 2)
    got = bf.neighbor_allgather(x, src_ranks=src, dst_ranks=dst)
    assert isinstance(got, list) and len(got) == n
    for i in range(n):
        want = torch.cat([x[j] for j in src[i]]) if src[i] else x[:0].reshape(-1)
        assert torch.equal(got[i].reshape(-1), want)
    handle = bf.neighbor_allgather_nonblocking(x, src_ranks=src, dst_ranks=dst)
    assert all(torch.equal(a, b) for a, b in zip(bf.synchronize(handle), got, strict=True))


def test_static_neighbor_allgather_stays_by_rank(world):
    x = np.arange(world, dtype=float)
    np.testing.assert_array_equal(bf.neighbor_allgather(x), fs.neighbor_allgather(x))


SCRIPT = """
import sys
import numpy as np
import fogsim.compat.bluefog as bf

bf.init()
r, n = bf.rank(), bf.size()
src = [(r + k) % n for k in (2, 3, 1)]
dst = [(r - k) % n for k in (2, 3, 1)]
x = np.full((r + 1, 2), float(r))            # blocks of different lengths
got = bf.neighbor_allgather(x, src_ranks=src, dst_ranks=dst)
want = np.concatenate([np.full((s + 1, 2), float(s)) for s in src])
h = bf.neighbor_allgather_nonblocking(x, src_ranks=src, dst_ranks=dst)
ok = np.array_equal(got, want) and np.array_equal(bf.synchronize(h), want)
sys.stdout.write(f"rank {r} ok {ok}\\n")  # one write: the ranks' lines do not mix
"""


@pytest.mark.mpi
def test_dynamic_neighbor_allgather_order_under_mpi(tmp_path):
    run = fogrun_script(tmp_path, SCRIPT, 4, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("ok True") == 4, run.stdout


# -- builders: BlueFog's weights ------------------------------------------------------------------
def _bluefog_circulant(size: int, send_offsets: list[int]) -> np.ndarray:
    """BlueFog's construction: row i has weight 1/(K+1) at i and at i + offset (i sends to)."""
    w = 1.0 / (len(set(send_offsets)) + 1)
    a = np.zeros((size, size))
    for i in range(size):
        a[i, i] = w
        for o in send_offsets:
            a[i, (i + o) % size] = w
    return a


@pytest.mark.parametrize("size", [1, 2, 3, 4, 6, 12])
def test_builders_give_bluefog_weights_exactly(size):
    exp2 = [2**k for k in range(size.bit_length()) if 2**k < size]
    exp3 = [3**k for k in range(size) if 3**k < size]
    cases = [
        (tu.ExponentialTwoGraph(size), _bluefog_circulant(size, exp2)),
        (tu.ExponentialGraph(size), _bluefog_circulant(size, exp2)),
        (tu.ExponentialGraph(size, 3), _bluefog_circulant(size, exp3)),
        (tu.FullyConnectedGraph(size), np.full((size, size), 1.0 / size)),
    ]
    if size > 2:
        cases += [
            (tu.RingGraph(size), _bluefog_circulant(size, [1, size - 1])),
            (tu.RingGraph(size, 1), _bluefog_circulant(size, [size - 1])),
            (tu.RingGraph(size, 2), _bluefog_circulant(size, [1])),
        ]
    elif size == 2:
        cases += [(tu.RingGraph(2, s), np.full((2, 2), 0.5)) for s in (0, 1, 2)]
    for graph, want in cases:
        np.testing.assert_array_equal(nx.to_numpy_array(graph, nodelist=range(size)), want)
        assert tu.IsTopologyEquivalent(graph, nx.from_numpy_array(want, create_using=nx.DiGraph))


def test_fogsim_builders_keep_exact_sums():
    w = fs.topology.exponential_two_graph(4).to_dense()
    assert (w.sum(axis=1) == 1.0).all()
    assert not np.array_equal(nx.to_numpy_array(tu.ExponentialTwoGraph(4)).T, w)


def test_default_topology_has_bluefog_weights(world):
    assert tu.IsTopologyEquivalent(bf.load_topology(), tu.ExponentialGraph(world))
    np.testing.assert_array_equal(
        nx.to_numpy_array(bf.load_topology()), nx.to_numpy_array(tu.ExponentialTwoGraph(world))
    )


# -- set_topology while windows exist -----------------------------------------------------------
def test_set_topology_with_windows_returns_false_and_keeps_topology(world):
    before = bf.load_topology()
    assert bf.win_create(np.zeros((world, 2)), "w")
    with pytest.warns(RuntimeWarning, match="windows exist"):
        assert bf.set_topology(tu.RingGraph(world)) is False
    assert tu.IsTopologyEquivalent(bf.load_topology(), before)
    with pytest.raises(ValueError):  # fogsim's own function still refuses loudly
        fs.set_topology(tu.RingGraph(world))
    assert bf.win_free()
    assert bf.set_topology(tu.RingGraph(world)) is True
    assert tu.IsTopologyEquivalent(bf.load_topology(), tu.RingGraph(world))


# BlueFog's win_associated_p: "The p value. (Initialized as 1.)"; with associated p on, an
# accumulate with self_weight scales the sender's p and adds shares to its out-neighbours'
# buffers; win_update_then_collect adds what arrived. Neighbour buffers hold no p until
# something arrives, with or without zero_init.
ASSOCIATED_P = """
import sys
import torch
import bluefog.torch as bf
from bluefog.common import topology_util

bf.init()
n, rank = bf.size(), bf.rank()
bf.set_topology(topology_util.RingGraph(n))
bf.turn_on_win_ops_with_associated_p()
sender = 1
x = torch.full((3,), float(rank))
bf.win_create(x, "w")  # no zero_init
if rank == sender:
    bf.win_accumulate(x, name="w", self_weight=0.5,
                      dst_weights={(sender - 1) % n: 0.5, (sender + 1) % n: 0.5})
bf.barrier()
bf.win_update_then_collect(name="w")
sys.stdout.write(f"{rank} {bf.win_associated_p('w')}\\n")
bf.win_free()
"""


@pytest.mark.mpi
def test_associated_p_of_an_accumulate_and_a_collect(tmp_path):
    # MPI only: one agent's one-sided op while the others wait is not an SPMD rendezvous
    job = fogrun_script(tmp_path, ASSOCIATED_P, 4, options=("--bluefog",), timeout=120)
    job.check()
    p = dict(line.split() for line in job.stdout.splitlines() if line.strip())
    assert {int(r): float(v) for r, v in p.items()} == {0: 1.5, 1: 0.5, 2: 1.5, 3: 1.0}, (
        job.describe()
    )
