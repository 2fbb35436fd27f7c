"""The clock's fast paths give the numbers of its plain ones, bit for bit.

Two shortcuts keep a clocked step cheap (see ``fogsim/clock/_clock.py``): while every agent's
clock reads the same and each op treats them alike, one number stands for all of them; and
after enough messages, exchanges run in compiled code. Each scenario here runs three ways:
as is, with the clocks forced apart (a straggler model that never slows anyone still makes
the clock move agent by agent), and with the compiled exchange from the first message.
Clocks must agree exactly; the time computing/communicating/waiting to rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import clock as C
from fogsim import topology as T
from fogsim.clock import _clock
from fogsim.hierarchy import Level, Network


@pytest.fixture(autouse=True)
def _shutdown():
    yield
    fs.shutdown()


def _network(n: int, machines: bool) -> Network:
    if not machines:
        return Network([Level(n, alpha=2e-5, bandwidth=1e9)])
    return Network([Level(4, alpha=1e-6, bandwidth=5e10), Level(n // 4, alpha=3e-5, bandwidth=1e9)])


def _run(n, steps, *, machines=False, speed=1.0, stragglers=None, apart=False, values=16):
    """Clocks and breakdown after ``steps(x)`` on a platform; ``apart``: a straggler model
    that never slows anyone (the clocks are kept agent by agent)."""
    if apart:
        stragglers = C.Stragglers(probability=0.0, factor=1.0)
    fs.init(size=n)
    platform = C.Platform(_network(n, machines), speed=speed, stragglers=stragglers, seed=3)
    clock = C.start(platform)
    x = fs.local(lambda r: np.full(values, float(r)))
    steps(x)
    out = clock.breakdown()
    fs.shutdown()
    return out


def _dgd(topologies, computes):
    def steps(x):
        for k in range(12):
            C.compute(computes[k % len(computes)])
            step = topologies[k % len(topologies)]
            x = fs.neighbor_allreduce(x, src_weights=getattr(step, "weights", step))
            if k % 5 == 4:
                x = fs.allreduce(x)

    return steps


def _scenarios(n):
    one_peer = T.one_peer_exponential_two(n)
    rng = np.random.default_rng(0)
    star = T.star_graph(n)  # in-degrees apart: no columns
    # every agent two in-neighbors, not circulant: gathered columns
    regular = T.Topology(_random_regular(n, rng))
    slow = np.ones(n)
    slow[3] = 0.25
    return {
        "ring, alike": dict(steps=_dgd([T.ring_graph(n)], [1e-3])),
        "exp-2 on machines, one slow": dict(
            steps=_dgd([T.exponential_two_graph(n)], [1e-3]), machines=True, speed=slow
        ),
        "one-peer, stragglers": dict(
            steps=_dgd([next(one_peer) for _ in range(4)], [1e-3, 2e-3]),
            stragglers=C.Stragglers(probability=0.3, factor=3.0),
        ),
        "random in-neighbors and a star, per-agent compute": dict(
            steps=_dgd([regular, star], [rng.uniform(0, 1e-3, n)]), machines=True
        ),
    }


def _random_regular(n, rng):
    """A weight matrix where agent i hears from two agents other than itself, at random."""
    w = np.zeros((n, n))
    for i in range(n):
        others = rng.choice(np.delete(np.arange(n), i), size=2, replace=False)
        w[i, others] = 1 / 3
        w[i, i] = 1 / 3
    return w


@pytest.mark.parametrize("name", list(_scenarios(16)))
def test_fast_paths_give_the_same_clocks(name, monkeypatch):
    n = 16
    kwargs = _scenarios(n)[name]
    plain = _run(n, **kwargs)
    apart = _run(n, **{**kwargs, "apart": kwargs.get("stragglers") is None})
    monkeypatch.setattr(_clock, "_COMPILE_AFTER", -1)
    compiled = _run(n, **kwargs)
    for other in (apart, compiled):
        np.testing.assert_array_equal(other["time"], plain["time"])
        for part in ("computing", "communicating", "waiting"):
            np.testing.assert_allclose(other[part], plain[part], rtol=1e-12, atol=1e-15)
    assert plain["time"].min() > 0


def test_alike_clocks_move_as_one_number_by_the_model():
    """Every agent alike on a ring: each step takes the compute plus one message's time
    (two messages share each agent's link), and nobody waits."""
    n, c, nbytes = 32, 1e-3, 16 * 8
    fs.init(size=n, topology=T.ring_graph)
    clock = C.start(C.Platform.uniform(n, latency=2e-5, bandwidth=1e9))
    x = fs.local(lambda r: np.full(16, float(r)))
    for _ in range(10):
        C.compute(c)
        x = fs.neighbor_allreduce(x)
    step = c + 2e-5 + 2 * nbytes / 1e9
    np.testing.assert_allclose(clock.time, 10 * step, rtol=1e-12)
    parts = clock.breakdown()
    np.testing.assert_allclose(parts["communicating"], 10 * (step - c), rtol=1e-12)
    np.testing.assert_allclose(parts["waiting"], 0.0, atol=1e-15)


def test_the_clocks_are_read_only():
    fs.init(size=4)
    clock = C.start(C.Platform.uniform(4))
    with pytest.raises(ValueError, match="read-only"):
        clock.time[0] = 1.0
