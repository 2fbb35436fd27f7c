"""The sharded simulator's clock keeps each block's clocks only, and they are one process's.

Each scenario runs the same ops on one process (``Clock``) and over 2 and 3 blocks
(``BlockClock``, each block in a thread of an in-process transport): every block's clocks
must equal its agents' clocks in one process, bit for bit, and hold no one else's.
"""

from __future__ import annotations

import numpy as np
import pytest

from fogsim import clock as C
from fogsim import topology as T
from fogsim.backends.sim._backend import SimBackend
from fogsim.clock import _clock
from fogsim.hierarchy import Level, Network
from tests._threads import sharded

N = 12  # agents: 3 machines of 4 (blocks of 6 and of 4 do not all align with them)


def platform(**options) -> C.Platform:
    net = Network([Level(4, alpha=1e-6, bandwidth=5e10), Level(3, alpha=3e-5, bandwidth=1e9)])
    return C.Platform(net, seed=5, **options)


def slow_speeds() -> np.ndarray:
    speed = np.ones(N)
    speed[7] = 0.25
    return speed


def random_in_neighbors() -> T.Topology:
    rng = np.random.default_rng(1)
    w = np.zeros((N, N))
    for i in range(N):
        w[i, rng.choice(np.delete(np.arange(N), i), size=2, replace=False)] = 1 / 3
        w[i, i] = 1 / 3
    return T.Topology(w)


def script(backend, clock, lo: int, hi: int, *, per_agent: bool) -> list[np.ndarray]:
    """The ops, on the block ``[lo, hi)`` of the agents' values; the clocks after each."""
    x = np.arange(N * 3, dtype=np.float64).reshape(N, 3)[lo:hi]
    seen = []
    backend.set_machine_topology(T.ring_graph(3))
    steps = [T.ring_graph(N), T.exponential_two_graph(N), random_in_neighbors(), T.star_graph(N)]
    work = np.linspace(1e-3, 3e-3, N)
    for k, topo in enumerate(steps * 2):
        clock.compute(work[lo:hi] if per_agent else 1e-3)
        backend.set_topology(topo)
        x = backend.neighbors.neighbor_allreduce(x)
        seen.append(clock.time.copy())
        if k == 2:
            x = backend.machines.hierarchical_neighbor_allreduce(x)
            seen.append(clock.time.copy())
        if k == 4:
            x = backend.collectives.allreduce(x)
            seen.append(clock.time.copy())
    return seen


def one_process(per_agent: bool, **options) -> list[np.ndarray]:
    backend = SimBackend(size=N, local_size=4)
    clock = C.Clock(platform(**options))
    backend.attach_cost_model(clock)
    try:
        return script(backend, clock, 0, N, per_agent=per_agent)
    finally:
        backend.close()


def blocks(parts: int, per_agent: bool, **options) -> list[tuple[tuple[int, int], list]]:
    def work(backend):
        clock = C.BlockClock(platform(**options), backend)
        backend.attach_cost_model(clock)
        lo, hi = backend.block
        try:
            return (lo, hi), script(backend, clock, lo, hi, per_agent=per_agent)
        finally:
            backend.close()

    return sharded(N, parts, work, local_size=4)


CASES = {
    "alike": (False, {}),
    "one slow agent": (False, {"speed": slow_speeds()}),
    "stragglers": (False, {"stragglers": C.Stragglers(probability=0.3, factor=4.0)}),
    "per-agent compute": (True, {}),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_each_block_keeps_its_agents_clocks_as_one_process_does(case, parts, compiled, monkeypatch):
    """Compiled: every exchange in numba from the first message (in both runs)."""
    if compiled:
        monkeypatch.setattr(_clock, "_COMPILE_AFTER", -1)
    per_agent, options = CASES[case]
    whole = one_process(per_agent, **options)
    assert whole[-1].max() > whole[-1].min() or case == "alike"
    for (lo, hi), seen in blocks(parts, per_agent, **options):
        assert len(seen) == len(whole)
        for mine, all_of_them in zip(seen, whole, strict=True):
            assert mine.shape == (hi - lo,)  # the block's clocks, no one else's
            np.testing.assert_array_equal(mine, all_of_them[lo:hi])


def test_a_block_takes_its_own_or_the_worlds_per_agent_seconds():
    """``compute`` takes one number per agent of the block (as fogsim.local builds them) or
    of the world; either way each agent is charged its own."""
    for world_sized in (False, True):

        def work(backend, world_sized=world_sized):
            clock = C.BlockClock(C.Platform.uniform(N), backend)
            lo, hi = backend.block
            seconds = np.arange(N) * 1e-3 if world_sized else np.arange(lo, hi) * 1e-3
            return (lo, hi), clock.compute(seconds), clock.time.copy()

        for (lo, hi), mine, time in sharded(N, 2, work):
            np.testing.assert_array_equal(mine, np.arange(lo, hi) * 1e-3)
            np.testing.assert_array_equal(time, np.arange(lo, hi) * 1e-3)
