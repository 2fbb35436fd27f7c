"""Bad input gets a clear ValueError/TypeError naming the argument and the agent."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import topology as T

N = 6


@pytest.fixture(autouse=True)
def world():
    fs.init(size=N, topology=T.ring_graph)
    yield
    fs.shutdown()


X = np.ones((N, 3))
RING_SRC = [{(r - 1) % N: 0.25, (r + 1) % N: 0.25} for r in range(N)]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        # weights that are not finite
        (
            {"self_weight": np.array([0.5, np.nan, 0.5, 0.5, 0.5, 0.5]), "src_weights": RING_SRC},
            ValueError,
            r"self_weight\[1\] is nan",
        ),
        (
            {
                "self_weight": 0.5,
                "src_weights": [*RING_SRC[:3], {2: np.inf, 4: 0.25}, *RING_SRC[4:]],
            },
            ValueError,
            r"src_weights\[3\].*finite",
        ),
        # ranks out of range
        (
            {"self_weight": 0.5, "src_weights": [*RING_SRC[:2], {9: 0.5}, *RING_SRC[3:]]},
            ValueError,
            r"src_weights\[2\].*rank 9.*out of range",
        ),
        (
            {
                "self_weight": 0.5,
                "src_weights": RING_SRC,
                "dst_weights": [[1, 5], [0, 2], [1, 3], [2, 4], [3, -1], [4, 0]],
            },
            ValueError,
            r"dst_weights\[4\].*rank -1.*out of range",
        ),
        # src/dst inconsistent: agent 0 also sends to 3, who does not listen
        (
            {
                "self_weight": 0.5,
                "src_weights": RING_SRC,
                "dst_weights": [[1, 5, 3], [0, 2], [1, 3], [2, 4], [3, 5], [4, 0]],
            },
            ValueError,
            "agent 0 sends to agent 3",
        ),
        # ... and agent 2 listens to 1, who does not send to it
        (
            {
                "self_weight": 0.5,
                "src_weights": RING_SRC,
                "dst_weights": [[1, 5], [0], [1, 3], [2, 4], [3, 5], [4, 0]],
            },
            ValueError,
            "agent 2 receives from agent 1",
        ),
        # static mode: keys must be in-neighbors of the topology
        (
            {"self_weight": 0.5, "src_weights": [{3: 0.5}] + RING_SRC[1:]},
            ValueError,
            r"src_weights\[0\] names rank 3, which is not an in-neighbor",
        ),
        (
            {"self_weight": 0.5, "src_weights": [{0: 0.5}] + RING_SRC[1:]},
            ValueError,
            r"src_weights\[0\].*own rank",
        ),
        # missing partners
        ({"self_weight": 0.5}, ValueError, "self_weight and src_weights must be given together"),
        ({"src_weights": RING_SRC}, ValueError, "src_weights was given without self_weight"),
        ({"dst_weights": [[1]] * N}, ValueError, "dst_weights was given without src_weights"),
        # wrong types and shapes
        (
            {"self_weight": "half", "src_weights": RING_SRC},
            TypeError,
            "self_weight must be a number or a sequence",
        ),
        (
            {"self_weight": np.ones(4), "src_weights": RING_SRC},
            ValueError,
            r"self_weight has shape \(4,\)",
        ),
        (
            {"self_weight": 0.5, "src_weights": RING_SRC[:4]},
            ValueError,
            "src_weights has 4 items, expected 6",
        ),
        (
            {"self_weight": 0.5, "src_weights": {1: 0.5}},
            TypeError,
            "src_weights must be a sequence of 6",
        ),
        (
            {"self_weight": 0.5, "src_weights": [{"a": 0.5}] * N},
            TypeError,
            r"src_weights\[0\]: rank 'a' is not an integer",
        ),
        (
            {"src_weights": np.full((4, 4), 0.25)},
            ValueError,
            "src_weights has 4 agents but the world has 6",
        ),
        ({"enable_topo_check": "yes"}, TypeError, "enable_topo_check must be a bool"),
        ({"name": 3}, TypeError, "name must be a string"),
    ],
)
def test_neighbor_allreduce_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fs.neighbor_allreduce(X, **kwargs)
    with pytest.raises(exc, match=match):  # the nonblocking twin checks the same way
        fs.neighbor_allreduce_nonblocking(X, **kwargs)


def test_wrong_number_of_agents_in_x():
    with pytest.raises(ValueError, match="4 entries on its leading .agent. axis.*6 agents"):
        fs.neighbor_allreduce(np.ones((4, 3)))
    with pytest.raises(
        ValueError,
        match=r"x: entries differ in shape \(one per agent in simulation\): entry 0 has shape "
        r"\(1,\), entry 1 has shape \(2,\)",
    ):
        fs.neighbor_allreduce(fs.local(lambda r: np.ones(1 + r % 2)))
    # a list of numbers written in the script is one value for every agent, as distributed
    with pytest.raises(
        ValueError,
        match=r"x is a list of numbers that makes no array \(np.asarray\(x\) fails\): entry 0 "
        r"has shape \(1,\), entry 1 has shape \(2,\)",
    ):
        fs.neighbor_allreduce([[1.0], [1.0, 2.0]] * 3)
    with pytest.raises(TypeError, match="must be a numpy array, a torch tensor or a number"):
        fs.allreduce("abc")


def test_topology_of_the_wrong_size():
    with pytest.raises(ValueError, match="topology has 5 agents but the world has 6"):
        fs.set_topology(T.ring_graph(5))
    with pytest.raises(ValueError, match="src_weights has 5 agents but the world has 6"):
        fs.neighbor_allreduce(X, src_weights=T.ring_graph(5))
    with pytest.raises(TypeError, match="is_weighted must be a bool"):
        fs.set_topology(T.ring_graph(6), is_weighted="yes")


def test_weight_matrix_not_finite():
    W = T.ring_graph(N).to_dense()
    W[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"W\[2, 1\] is nan"):
        fs.neighbor_allreduce(X, src_weights=W)


def test_broadcast_root_rank():
    with pytest.raises(ValueError, match="root_rank=6 is out of range for 6 agents"):
        fs.broadcast(X, 6)
    with pytest.raises(TypeError, match="root_rank must be an integer"):
        fs.broadcast(X, True)


def test_neighbor_allgather_ranks():
    with pytest.raises(ValueError, match="both src_ranks and dst_ranks"):
        fs.neighbor_allgather(X, src_ranks=[[1]] * N)
    src = [[(r + 1) % N] for r in range(N)]
    dst = [[(r + 2) % N] for r in range(N)]
    with pytest.raises(ValueError, match="topology check failed"):
        fs.neighbor_allgather(X, src_ranks=src, dst_ranks=dst)


def test_wait_and_poll_need_handles():
    with pytest.raises(TypeError, match="wait.. takes a handle"):
        fs.wait(3)
    with pytest.raises(TypeError, match="poll.. takes a handle"):
        fs.poll(None)


def test_allgather_ragged_trailing_shapes_differ():
    x = [np.ones((1, 2)), np.ones((1, 3))] + [np.ones((1, 2))] * (N - 2)
    with pytest.raises(ValueError, match="differ beyond the first dimension"):
        fs.allgather(x)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"size": 0}, ValueError, "size must be >= 1"),
        ({"size": 2.5}, TypeError, "size must be an integer"),
        ({"size": 4, "seed": -1}, ValueError, "seed must be >= 0"),
        ({"size": 4, "seed": "x"}, TypeError, "seed must be an integer"),
        ({"size": 4, "topology": "ring"}, TypeError, "topology must be a Topology"),
    ],
)
def test_init_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fs.init(**kwargs)
