"""The simulator's window ops refuse bad input clearly (the ops' arithmetic:
tests/test_sim_windows.py, whose world fixture these tests share)."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import _api_windows as W
from fogsim import _context
from fogsim import topology as T
from tests.test_sim_windows import world  # noqa: F401 - the same fixture (F811 below: its use)

N = 6
FAR = [{(r + 2) % N: 1.0} for r in range(N)]  # on a ring, r + 2 is no neighbor
NEAR = [{(r + 1) % N: 0.5} for r in range(N)]
FAR_M = np.eye(N, k=2)  # FAR_M[i, i + 2]: i + 2 writes into i


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        *[
            (lambda x, op=op: getattr(W, op)("nope"), ValueError, r"no window 'nope'.*\['w'\]")
            for op in (
                "win_free",
                "win_get",
                "win_update",
                "win_update_then_collect",
                "win_mutex",
                "get_win_version",
                "win_associated_p",
            )
        ],
        (lambda x: W.win_put(x, "nope"), ValueError, "no window 'nope'"),
        (lambda x: W.win_accumulate(x, "nope"), ValueError, "no window 'nope'"),
        (lambda x: W.win_update(3), TypeError, "name must be a str"),
        (lambda x: W.win_create(x, "w"), ValueError, "'w' exists already"),
        (lambda x: W.win_create(x.copy(), ""), TypeError, "name must be a non-empty str"),
        (lambda x: W.win_create(x.copy(), 7), TypeError, "name must be a non-empty str"),
        (lambda x: W.win_create(x.copy(), "z", zero_init=1), TypeError, "zero_init must be a bool"),
        # non-neighbors
        (
            lambda x: W.win_put(x, "w", dst_weights=FAR),
            ValueError,
            r"dst_weights\[0\] names rank 2, which is not an out-neighbor of agent 0",
        ),
        (
            lambda x: W.win_accumulate(x, "w", dst_weights=FAR_M.T),
            ValueError,
            r"dst_weights\[2, 0\] names rank 2, which is not an out-neighbor",
        ),
        (
            lambda x: W.win_get("w", src_weights=FAR),
            ValueError,
            r"src_weights\[0\] names rank 2, which is not an in-neighbor of agent 0.*\[1, 5\]",
        ),
        (
            lambda x: W.win_get("w", src_weights=FAR_M),
            ValueError,
            r"src_weights\[0, 2\] names rank 2, which is not an in-neighbor",
        ),
        (
            lambda x: W.win_update("w", self_weight=0.5, neighbor_weights=FAR),
            ValueError,
            r"neighbor_weights\[0\] names rank 2, which is not an in-neighbor",
        ),
        # bad weights
        (
            lambda x: W.win_update("w", self_weight=0.5),
            ValueError,
            "give self_weight and neighbor_weights together",
        ),
        (
            lambda x: W.win_update("w", neighbor_weights=NEAR),
            ValueError,
            "give self_weight and neighbor_weights together",
        ),
        (
            lambda x: W.win_put(x, "w", dst_weights=[{1: np.nan}] + NEAR[1:]),
            ValueError,
            r"dst_weights\[0\].*not finite",
        ),
        (
            lambda x: W.win_put(x, "w", dst_weights={1: 0.5}),
            TypeError,
            "dst_weights must be a sequence of 6",
        ),
        (
            lambda x: W.win_put(x, "w", dst_weights=NEAR[:3]),
            ValueError,
            "dst_weights has 3 items, expected 6",
        ),
        (
            lambda x: W.win_put(x, "w", dst_weights=[[9]] * N),
            ValueError,
            r"dst_weights\[0\]: rank 9 is out of range",
        ),
        (
            lambda x: W.win_put(x, "w", self_weight=np.ones(4)),
            ValueError,
            r"self_weight has shape \(4,\)",
        ),
        (
            lambda x: W.win_put(x, "w", self_weight="half"),
            TypeError,
            "self_weight must be a number or a sequence of 6 numbers",
        ),
        (lambda x: W.win_put(x, "w", self_weight=np.inf), ValueError, r"self_weight\[0\] is inf"),
        (
            lambda x: W.win_get("w", src_weights=np.ones((4, 4))),
            ValueError,
            "src_weights has 4 agents",
        ),
        # registered arrays and operands
        (
            lambda x: W.win_create(np.zeros((N, 2), dtype=np.int64), "z"),
            TypeError,
            "x must be float32 or float64, got int64",
        ),
        (
            lambda x: W.win_create([[0.0]] * N, "z"),
            TypeError,
            "x must be a numpy array or a CPU tensor",
        ),
        (lambda x: W.win_create(1.5, "z"), TypeError, "x must be a numpy array or a CPU tensor"),
        (
            lambda x: W.win_create(np.zeros((N + 1, 2)), "z"),
            ValueError,
            r"x has shape \(7, 2\); stack one value per agent along a leading axis of 6",
        ),
        (lambda x: W.win_create(np.zeros((2, N)).T, "z"), ValueError, "x must be C-contiguous"),
        (
            lambda x: W.win_put(np.zeros((N, 3)), "w"),
            ValueError,
            r"x is float64 \(6, 3\) but window 'w' holds float64 \(6, 2\)",
        ),
        (
            lambda x: W.win_put(x.astype(np.float32), "w"),
            ValueError,
            r"x is float32 \(6, 2\) but window 'w' holds float64",
        ),
        (
            lambda x: W.win_put(x.tolist(), "w"),
            TypeError,
            "x must be a numpy array or a CPU tensor",
        ),
        # flags and ranks
        (lambda x: W.win_put(x, "w", require_mutex=1), TypeError, "require_mutex must be a bool"),
        (lambda x: W.win_get("w", require_mutex=None), TypeError, "require_mutex must be a bool"),
        (lambda x: W.win_update("w", reset="yes"), TypeError, "reset must be a bool"),
        (lambda x: W.win_update("w", clone=1), TypeError, "clone must be a bool"),
        (
            lambda x: W.win_update_then_collect("w", require_mutex=0),
            TypeError,
            "require_mutex must be a bool",
        ),
        (lambda x: W.set_win_ops_with_associated_p(1), TypeError, "enabled must be a bool"),
        (lambda x: W.win_mutex("w", ranks=[0, 6]), ValueError, "ranks=6 is out of range"),
        (lambda x: W.win_mutex("w", ranks=[[0], [1.5]]), TypeError, "ranks must be an integer"),
        (lambda x: W.win_mutex("w", for_self="yes"), TypeError, "for_self must be a bool"),
        # windows pin the topology
        (
            lambda x: fs.set_topology(T.exponential_two_graph(N)),
            ValueError,
            r"windows \['w'\] exist.*win_free",
        ),
    ],
)
def test_bad_input_is_refused(world, call, exc, match):  # noqa: F811
    world(T.ring_graph(N))
    x = np.zeros((N, 2))
    W.win_create(x, "w")
    before = _context.current().backend.window("w")
    state = (x.copy(), before.buffers.copy(), before.versions.copy())
    with pytest.raises(exc, match=match):
        call(x)
    # a refused call changes nothing
    assert W.win_names() == ["w"]
    np.testing.assert_array_equal(x, state[0])
    np.testing.assert_array_equal(before.buffers, state[1])
    np.testing.assert_array_equal(before.versions, state[2])


def test_read_only_views(world):  # noqa: F811
    world(T.ring_graph(4))
    W.win_create(np.zeros((4, 2)), "w")
    win = _context.current().backend.window("w")
    for view in (win.buffers, win.versions, win.p_buffers):
        with pytest.raises(ValueError, match="read-only"):
            view[...] = 1
