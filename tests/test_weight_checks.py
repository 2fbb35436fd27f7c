"""Weights neither row- nor column-stochastic: one WeightWarning per call site, or an error.

Row-stochastic (averaging) and column-stochastic (push-sum) weights pass silently; weights
that are neither warn once per call site naming the first bad row and column and their
sums; ``check_weights=False`` silences; ``FOGSIM_CHECK_WEIGHTS=error`` raises a
ValueError (on every rank alike, distributed), ``off`` skips the check.
"""

from __future__ import annotations

import warnings

import networkx as nx
import numpy as np
import pytest

import fogsim as fs
import fogsim.compat.bluefog as bf
import fogsim.spmd as spmd
from fogsim import _weightcheck
from fogsim import topology as T
from tests import _jobs

N = 4


def _bad() -> np.ndarray:
    """Row 2 and column 0 sum to 1.5 (every other row and column to 1)."""
    w = np.full((N, N), 0.25)
    w[2, 0] = 0.75
    return w


def _row_stochastic() -> np.ndarray:
    w = np.random.default_rng(0).uniform(0.1, 1.0, (N, N))
    return w / w.sum(axis=1, keepdims=True)


@pytest.fixture(autouse=True)
def _world(monkeypatch):
    monkeypatch.delenv("FOGSIM_CHECK_WEIGHTS", raising=False)
    fs.init(size=N)
    yield
    fs.shutdown()
    _weightcheck.configure("warn")


@pytest.fixture
def silent():
    """Fail on any WeightWarning inside the block."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", fs.WeightWarning)
        yield


def _x():
    return fs.local(lambda r: np.array([float(r), 1.0]))


def test_a_bad_topology_warns_once_naming_the_row_column_and_sums():
    with pytest.warns(fs.WeightWarning) as record:
        for _ in range(3):  # one call site: one warning
            fs.set_topology(_bad(), is_weighted=True)
    assert len(record) == 1
    message = str(record[0].message)
    assert message.startswith("set_topology: the weights are neither row- nor column-stochastic")
    assert "row 2 sums to 1.5 and column 0 to 1.5" in message
    assert "check_weights=False" in message
    assert record[0].filename == __file__  # the user's line, not fogsim's


def test_bad_per_call_weights_warn_once_per_call_site():
    x = _x()
    src = fs.local(lambda r: {(r - 1) % N: 0.5})
    with pytest.warns(fs.WeightWarning) as record:
        for _ in range(3):
            fs.neighbor_allreduce(x, self_weight=0.75, src_weights=src)  # rows sum to 1.25
        fs.neighbor_allreduce(x, src_weights=_bad())  # another site warns too
        fs.wait(fs.neighbor_allreduce_nonblocking(x, src_weights=T.as_topology(_bad())))
    messages = [str(r.message) for r in record]
    assert len(messages) == 3
    assert all(m.startswith("neighbor_allreduce: ") for m in messages)
    assert "row 0 sums to 1.25 and column 0 to 1.25" in messages[0]
    assert "row 2 sums to 1.5 and column 0 to 1.5" in messages[1]


def test_dynamic_weights_are_checked_as_the_effective_matrix():
    # x_i <- 0.5 x_i + src_i[j] dst_j[i] x_j: src 1.0 times dst 0.5 makes rows of 1
    x = _x()
    with pytest.warns(fs.WeightWarning, match=r"row 0 sums to 1\.5 and column 0 to 1\.5"):
        fs.neighbor_allreduce(
            x,
            self_weight=0.5,
            src_weights=fs.local(lambda r: {(r - 1) % N: 1.0}),
            dst_weights=fs.local(lambda r: {(r + 1) % N: 1.0}),
        )


def test_row_and_column_stochastic_weights_are_silent(silent):
    w = _row_stochastic()
    fs.set_topology(w, is_weighted=True)
    fs.set_topology(w.T.copy(), is_weighted=True)  # column-stochastic
    fs.set_topology(_bad(), is_weighted=False)  # uniform weights: always averaging
    x = _x()
    fs.neighbor_allreduce(x)
    fs.neighbor_allreduce(x, src_weights=w)
    fs.neighbor_allreduce(x, src_weights=w.T.copy())
    fs.set_topology(T.ring_graph)
    third = fs.local(lambda r: {(r - 1) % N: 1 / 3, (r + 1) % N: 1 / 3})
    fs.neighbor_allreduce(x, self_weight=1 / 3, src_weights=third)  # 1/3 * 3: round-off
    # push-sum: agent 0 keeps 1/3 and pushes 1/3 to agents 1 and 2, the others keep 1/2
    # and push 1/2 to the next: every column sums to 1, rows 1 and 2 do not
    push = [{1: 1 / 3, 2: 1 / 3}] + [{(r + 1) % N: 0.5} for r in range(1, N)]
    senders = [{j: 1.0 for j in range(N) if r in push[j]} for r in range(N)]
    fs.neighbor_allreduce(
        x,
        self_weight=fs.local(lambda r: 0.5 if r else 1 / 3),
        src_weights=senders,
        dst_weights=push,
    )


def test_a_sum_off_by_more_than_round_off_warns():
    w = _row_stochastic()
    w[1] *= 1 + 1e-6
    with pytest.warns(fs.WeightWarning, match=r"row 1 sums to 1\.00000(09|1)"):
        fs.set_topology(w, is_weighted=True)


def test_check_weights_false_is_silent(silent):
    fs.set_topology(_bad(), is_weighted=True, check_weights=False)
    x = _x()
    fs.neighbor_allreduce(x, src_weights=_bad(), check_weights=False)
    fs.wait(fs.neighbor_allreduce_nonblocking(x, src_weights=_bad(), check_weights=False))
    fs.set_machine_topology(np.array([[1.5]]), is_weighted=True, check_weights=False)
    bf.set_topology(nx.from_numpy_array(_bad().T, create_using=nx.DiGraph), is_weighted=True)
    bf.neighbor_allreduce(x, 1.0, fs.local(lambda r: {(r - 1) % N: 1.0}))  # BlueFog: no word
    # and the check is back on for the next call
    with pytest.warns(fs.WeightWarning, match="row 2 sums to 1.5"):
        fs.neighbor_allreduce(x, src_weights=_bad())


def test_check_weights_must_be_a_bool():
    with pytest.raises(TypeError, match="check_weights must be a bool"):
        fs.set_topology(_bad(), is_weighted=True, check_weights=0)
    with pytest.raises(TypeError, match="check_weights must be a bool"):
        fs.neighbor_allreduce(_x(), check_weights="no")


def test_the_machine_topology_is_checked():
    fs.init(size=N, local_size=2)
    with pytest.warns(fs.WeightWarning, match="set_machine_topology: .* row 0 sums to 1.5"):
        fs.set_machine_topology(np.array([[0.5, 1.0], [0.5, 0.5]]), is_weighted=True)


def test_error_setting_raises_and_keeps_the_old_topology(monkeypatch):
    monkeypatch.setenv("FOGSIM_CHECK_WEIGHTS", "error")
    fs.init(size=N, topology=T.ring_graph)
    with pytest.raises(ValueError, match="set_topology: .*row 2 sums to 1.5 and column 0"):
        fs.set_topology(_bad(), is_weighted=True)
    assert fs.load_topology() == T.ring_graph(N) and not fs.is_topology_weighted()
    with pytest.raises(ValueError, match="neighbor_allreduce: .*FOGSIM_CHECK_WEIGHTS=error"):
        fs.neighbor_allreduce(_x(), src_weights=_bad())
    fs.set_topology(_bad(), is_weighted=True, check_weights=False)  # still silenced


def test_off_setting_skips_and_a_bad_value_is_named(monkeypatch, silent):
    monkeypatch.setenv("FOGSIM_CHECK_WEIGHTS", "off")
    fs.init(size=N)
    fs.set_topology(_bad(), is_weighted=True)
    monkeypatch.setenv("FOGSIM_CHECK_WEIGHTS", "loud")
    with pytest.raises(ValueError, match="FOGSIM_CHECK_WEIGHTS='loud'"):
        fs.init(size=N)


def test_spmd_warns_once_and_the_error_reaches_every_agent(monkeypatch):
    def main():
        fs.init()
        src = {(fs.rank() - 1) % N: 0.5}
        for _ in range(2):
            fs.neighbor_allreduce(np.ones(2), self_weight=0.75, src_weights=src)

    with pytest.warns(fs.WeightWarning, match="row 0 sums to 1.25") as record:
        spmd.run(main, size=N)
    assert len(record) == 1  # the agents share one call site

    def strict():
        fs.init()
        try:
            fs.set_topology(_bad(), is_weighted=True)
        except ValueError as exc:
            return str(exc)
        return None

    monkeypatch.setenv("FOGSIM_CHECK_WEIGHTS", "error")
    got = spmd.run(strict, size=N)
    assert all(m is not None and "row 2 sums to 1.5" in m for m in got), got


MPI_SCRIPT = """
import sys
import warnings
import numpy as np
import fogsim as fs

fs.init()
n, r = fs.size(), fs.rank()
lines = []
say = lines.append
bad = np.full((n, n), 1.0 / n)
bad[1, 0] += 0.5
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    try:
        fs.set_topology(bad, is_weighted=True)
        say(f"rank {r}: set_topology passed")
    except ValueError as exc:
        say(f"rank {r}: set_topology raised: {exc}")
    try:
        fs.neighbor_allreduce(np.ones(2), src_weights=bad)
        say(f"rank {r}: matrix passed")
    except ValueError as exc:
        say(f"rank {r}: matrix raised: {exc}")
    fs.set_topology(lambda k: np.full((k, k), 1.0 / k), is_weighted=True)
    # only rank 1's row is bad: 0.5 + 0.75
    fs.neighbor_allreduce(np.ones(2), self_weight=0.5,
                          src_weights={(r + 1) % n: 0.75 if r == 1 else 0.5})
    say(f"rank {r}: dicts passed")
for w in seen:
    if issubclass(w.category, fs.WeightWarning):
        say(f"rank {r}: warned: {w.message}")
with open(f"{sys.argv[1]}/rank{r}.txt", "w") as out:  # one file per rank: no interleaving
    out.write("\\n".join(lines))
fs.shutdown()
"""


@pytest.mark.parametrize("mode", ["warn", "error"])
def test_under_mpi_every_rank_checks_the_whole_topology(tmp_path, mode):
    job = _jobs.fogrun_script(
        tmp_path, MPI_SCRIPT, 2, str(tmp_path), timeout=90, env={"FOGSIM_CHECK_WEIGHTS": mode}
    ).check()
    for r in range(2):
        mine = (tmp_path / f"rank{r}.txt").read_text().splitlines()
        warned = [line for line in mine if "warned:" in line]
        assert f"rank {r}: dicts passed" in mine, job.describe()  # no hang, no error
        if mode == "warn":
            assert f"rank {r}: set_topology passed" in mine
            assert sum("set_topology: the weights are neither" in w for w in warned) == 1
            assert sum("neighbor_allreduce: the weights are neither" in w for w in warned) == 1
        else:  # every rank raises the same error; the per-rank row only warns
            assert any("set_topology raised" in m and "row 1 sums to 1.5" in m for m in mine)
            assert any("matrix raised" in m and "row 1 sums to 1.5" in m for m in mine)
        row_warnings = [w for w in warned if "weights of rank" in w]
        if r == 1:
            assert len(row_warnings) == 1 and "sum to 1.25" in row_warnings[0]
            assert "columns cannot be checked on one rank" in row_warnings[0]
        else:
            assert row_warnings == []
