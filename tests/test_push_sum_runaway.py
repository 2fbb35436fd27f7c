"""Asynchronous push-sum with one agent far ahead: its p underflows, its estimate stays finite.

An agent that runs alone keeps giving shares of ``x`` and ``p`` away and receives none,
so both reach 0 within a few hundred steps and the plain ``x / p`` is ``0 / 0 = nan``.
:func:`fogsim.algorithms.push_sum_estimate` holds the agent's last estimate meanwhile.
The runaway is forced, not left to load: in the simulator and in SPMD mode only agent 0
is active for the first ``AHEAD`` rounds (``set_asynchrony("speeds", ...)``); under
``fogrun -np 4`` ranks 1-3 wait in a barrier while rank 0 runs them. Then every agent runs.

This file is also the job of the launched modes: ``fogrun [--spmd] -np N python -m
tests.test_push_sum_runaway MODE OUT.npz`` (``MODE``: ``modelled`` or ``mpi``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np
import pytest

from tests import _jobs

AHEAD = 800  # p underflows after 679 steps at share 1/3 (4 agents), 537 at 1/4 (8 agents)
AFTER = 150  # rounds every agent runs afterwards
DIM = 3


def runaway(
    size: int | None,
    really_asynchronous: bool,
    check: Callable[[np.ndarray], None] | None = None,
    out: str | None = None,
) -> dict[str, np.ndarray]:
    """Run the job on a new world; return every agent's record (global views).

    ``check`` (simulated only) is called with ``x`` after every round; ``out``: a file the
    main process saves the record to.
    """
    import fogsim as fs
    from fogsim import algorithms as A
    from fogsim import topology as T

    fs.init(size=size, topology=T.exponential_two_graph, seed=0)
    n = fs.size()
    topo = T.exponential_two_graph(n)
    data = np.random.default_rng(5).standard_normal((n, DIM))
    x = fs.local(lambda r: data[r].copy())

    def share_of(r: int) -> float:
        return 1.0 / (len(topo.out_neighbors(r)) + 1)

    share = fs.local(share_of)
    dst = fs.local(lambda r: dict.fromkeys(topo.out_neighbors(r), share_of(r)))
    fs.set_win_ops_with_associated_p(True)
    fs.win_create(x, "x", zero_init=True)
    z = x.copy()  # the estimate (p starts at 1)
    smallest = np.asarray(fs.win_associated_p("x"), dtype=np.float64)
    nonfinite = fs.local(lambda r: 0)

    def step() -> None:
        nonlocal z, smallest, nonfinite
        fs.win_accumulate(x, "x", self_weight=share, dst_weights=dst, require_mutex=True)
        fs.win_update_then_collect("x")
        p = np.asarray(fs.win_associated_p("x"))
        z = A.push_sum_estimate(x, p, z)
        smallest = np.minimum(smallest, p)
        nonfinite = nonfinite + (~np.isfinite(z)).any(axis=-1)
        if check is not None:
            check(x)

    if really_asynchronous:  # the others wait while rank 0 runs ahead
        if fs.rank() == 0:
            for _ in range(AHEAD):
                step()
        fs.barrier()
    else:  # modelled: the others, 1e-300 times as fast as agent 0, never act
        fs.set_asynchrony("speeds", speeds=np.r_[1.0, np.full(n - 1, 1e-300)], seed=0)
        for _ in range(AHEAD):
            step()
        fs.set_asynchrony("all")
    p_ahead = np.asarray(fs.win_associated_p("x"), dtype=np.float64)
    z_ahead = z.copy()
    for _ in range(AFTER):
        step()
    fs.barrier()  # every agent has stopped sending: the last collect takes what is left
    fs.win_update_then_collect("x")
    p = np.asarray(fs.win_associated_p("x"), dtype=np.float64)
    z = A.push_sum_estimate(x, p, z)
    mass_p = fs.allreduce(np.reshape(p, (*np.shape(p), 1)), average=False)
    mass_x = fs.allreduce(x, average=False)
    fs.win_free()
    record = {
        "data": fs.global_view(fs.local(lambda r: data[r])),
        "smallest_p": fs.global_view(smallest),
        "p_ahead": fs.global_view(p_ahead),
        "z_ahead": fs.global_view(z_ahead),
        "z": fs.global_view(z),
        "nonfinite": fs.global_view(nonfinite),
        "mass_p": np.ravel(fs.global_view(mass_p))[:1],
        "mass_x": fs.global_view(mass_x)[0],
    }
    if out is not None and fs.is_main_process():
        np.savez(out, **record)
    fs.shutdown()
    return record


def check_record(record: dict[str, np.ndarray]) -> None:
    """The runaway happened, the estimates stayed finite and reached the average, no mass
    was lost."""
    data = record["data"]
    n = len(data)
    assert record["p_ahead"][0] == 0.0  # agent 0's p underflowed: x / p was 0 / 0 there
    assert record["smallest_p"][0] == 0.0
    assert (record["nonfinite"] == 0).all(), record["nonfinite"]
    # agent 0 held its own value (its ratio never changed), the others had not moved
    np.testing.assert_allclose(record["z_ahead"][0], data[0], rtol=1e-12)
    np.testing.assert_array_equal(record["z_ahead"][1:], data[1:])
    np.testing.assert_allclose(
        record["z"], np.broadcast_to(data.mean(axis=0), data.shape), atol=1e-10
    )
    assert abs(record["mass_p"][0] - n) <= 1e-12 * n
    np.testing.assert_allclose(record["mass_x"], data.sum(axis=0), rtol=0, atol=1e-12 * n)


@pytest.mark.parametrize("n", [4, 8])
def test_simulated_agent_far_ahead_keeps_a_finite_estimate_and_the_mass(n):
    from fogsim import _context

    rounds = []

    def mass_is_kept(x: np.ndarray) -> None:  # values, buffers and messages in flight
        win = _context.current().backend.window("x")
        xf, pf = win.in_flight_mass()
        total_p = win.p.sum() + win.p_buffers.sum() + pf
        assert abs(total_p - n) <= 1e-12 * n, len(rounds)
        total_x = x.sum(axis=0) + win.buffers.sum(axis=0) + xf
        np.testing.assert_allclose(total_x, initial, rtol=0, atol=1e-12 * n)
        rounds.append(total_p)

    initial = np.random.default_rng(5).standard_normal((n, DIM)).sum(axis=0)
    check_record(runaway(n, really_asynchronous=False, check=mass_is_kept))
    assert len(rounds) == AHEAD + AFTER


def test_spmd_agent_far_ahead_keeps_a_finite_estimate():
    import fogsim.spmd

    records = fogsim.spmd.run(lambda: runaway(None, really_asynchronous=False), size=4)
    for record in records:  # every agent reads the same global views
        check_record(record)


@pytest.mark.mpi
def test_mpi_rank_far_ahead_keeps_a_finite_estimate(tmp_path):
    out = tmp_path / "runaway.npz"
    _jobs.fogrun(4, "-m", "tests.test_push_sum_runaway", "mpi", str(out), timeout=90).check()
    with np.load(out) as saved:
        check_record(dict(saved))


if __name__ == "__main__":
    mode, out = sys.argv[1:]
    runaway(None, really_asynchronous=mode == "mpi", out=out)
