"""DGD with local steps (local SGD) and periodic global averaging (Gossip-PGA), against
the update written out from its definition with fogsim's own ops."""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim import topology as T

N, D, ALPHA = 8, 3, 0.05


@pytest.fixture(autouse=True)
def ring():
    fs.init(backend="sim", size=N, topology=T.ring_graph)
    yield
    fs.shutdown()


def by_hand(problem, iters, form, every, pga):
    x = np.zeros((N, D))
    for k in range(1, iters + 1):
        if k % every:
            x = x - ALPHA * problem.grad(x)
            continue
        mix = fs.allreduce if pga and (k // every) % pga == 0 else fs.neighbor_allreduce
        x = mix(x - ALPHA * problem.grad(x)) if form == "atc" else mix(x) - ALPHA * problem.grad(x)
    return x


@pytest.mark.parametrize("form", ["atc", "awc"])
@pytest.mark.parametrize(("every", "pga"), [(1, None), (3, None), (1, 2), (2, 3)])
def test_dgd_local_steps_and_global_averages_are_the_written_update(form, every, pga):
    problem = A.LeastSquares.random(m=6, d=D, seed=0)
    result = A.dgd(problem, ALPHA, 12, form=form, communicate_every=every, global_average_every=pga)
    np.testing.assert_allclose(result.x, by_hand(problem, 12, form, every, pga), rtol=0, atol=1e-13)


def test_a_global_average_reaches_consensus_and_local_steps_leave_it():
    problem = A.LeastSquares.random(m=6, d=D, seed=1)
    history = A.dgd(problem, ALPHA, 8, global_average_every=4).history["consensus_error"]
    assert history[4] < 1e-14 and history[8] < 1e-14  # steps 4 and 8 average globally
    assert min(history[1:4]) > 1e-6
    local = A.dgd(problem, ALPHA, 3, communicate_every=4).history["consensus_error"]
    assert np.all(np.diff(local) > 0)  # with no communication the agents drift apart


def test_bad_periods_are_refused():
    problem = A.LeastSquares.random(m=6, d=D, seed=0)
    for name in ("communicate_every", "global_average_every"):
        for bad, error in ((0, ValueError), (2.0, TypeError), (True, TypeError)):
            with pytest.raises(error, match=name):
                A.dgd(problem, ALPHA, 2, **{name: bad})
