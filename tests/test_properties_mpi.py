"""The hypothesis properties of neighbor averaging, under ``mpiexec -n 2`` and ``-n 4``.

Cases are drawn here (hypothesis, derandomized: the same cases on every run) for a world of
n agents: random directed topologies with random or uniform weights, per-call weight
matrices, per-agent dynamic weights, dynamic schedules (matrix and per-agent forms), fused
nonblocking batches of random dtypes and shapes, and bad calls (NaN or infinite weights,
ranks out of range, senders their receivers do not list, integer data, shapes that differ
on one agent). One MPI job of n processes runs them all (``tests/properties_driver.py``);
each case is then run in the simulator here, from the same data, and the two must agree:
bit for bit for valid calls, and a bad call must raise the same exception type on every
rank, naming what is wrong, as the simulator does, with the next case still running.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests import _jobs, property_cases

# The drawn weights are arbitrary on purpose (rows and columns sum to anything): the
# properties are about equal bits in every mode, not about weights fit for averaging.
pytestmark = pytest.mark.filterwarnings("ignore::fogsim.WeightWarning")

SIZES = (2, 4)
VALID_EXAMPLES = 120
BAD_PER_KIND = 8

_shapes = st.sampled_from([(), (1,), (3,), (2, 2)])
_dtypes = st.sampled_from(["float64", "float32"])


@st.composite
def _valid_case(draw, n: int) -> dict:
    case = {
        "n": n,
        "adjacency": draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n)),
        "kind": draw(st.sampled_from(property_cases.KINDS)),
        "dtype": draw(_dtypes),
        "shape": list(draw(_shapes)),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }
    if case["kind"] == "schedule":
        case["schedule"] = draw(st.sampled_from(property_cases.SCHEDULES))
        case["steps"] = draw(st.integers(1, 6))
        case["by_ranks"] = draw(st.booleans())
        case["local_size"] = draw(st.sampled_from([k for k in (1, 2, n) if n % k == 0]))
    if case["kind"] == "fused":
        case["exp2"] = draw(st.booleans())
        pairs = st.tuples(_dtypes, _shapes.map(list))
        case["tensors"] = draw(st.lists(pairs, min_size=1, max_size=8))
    return case


@st.composite
def _bad_case(draw, n: int, bad: str) -> dict:
    return {
        "n": n,
        "adjacency": draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n)),
        "dtype": "float64",
        "shape": list(draw(_shapes)),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "bad": bad,
        "agent": draw(st.integers(0, n - 1)),
    }


def draw_cases(strategy, count: int) -> list[dict]:
    """The first ``count`` cases hypothesis draws from ``strategy`` (the same every run)."""
    drawn: list[dict] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(case):
        drawn.append(case)

    collect()
    return drawn


@pytest.fixture(scope="module")
def mpi_run(tmp_path_factory):
    """For n processes: (the cases, the job that ran them, its saved results)."""
    cache: dict[int, tuple] = {}

    def get(n: int):
        if n not in cache:
            cases = draw_cases(_valid_case(n), VALID_EXAMPLES)
            for bad in property_cases.BAD:  # every kind of bad call, drawn alike
                cases += draw_cases(_bad_case(n, bad), BAD_PER_KIND)
            tmp = tmp_path_factory.mktemp(f"properties-{n}")
            (tmp / "cases.json").write_text(json.dumps(cases))
            job = _jobs.fogrun(
                n,
                "-m",
                "tests.properties_driver",
                str(tmp / "cases.json"),
                str(tmp / "out.npz"),
                timeout=300,
            ).check()
            with np.load(tmp / "out.npz") as saved:
                cache[n] = cases, job, dict(saved)
        return cache[n]

    return get


def _drawn(cases: list[dict], job: _jobs.Job, bad: bool):
    """(index, case, the MPI ranks' errors, the simulator's outcome) of the valid or bad cases."""
    for k, case in enumerate(cases):
        if bool(case.get("bad")) == bad:
            errors = job.case(str(k))["errors"]
            yield k, case, errors, property_cases.outcome(case, backend="sim", size=case["n"])


@pytest.mark.mpi
@pytest.mark.parametrize("n", SIZES)
def test_drawn_valid_calls_give_the_simulators_bits(mpi_run, n):
    cases, job, saved = mpi_run(n)
    checked, kinds = 0, set()
    for k, case, errors, (want, error) in _drawn(cases, job, bad=False):
        assert errors == [None] * n, (case, errors)
        assert error is None, (case, error)
        for m, w in enumerate(want):
            got = saved[f"{k}.{m}"]
            assert got.dtype == w.dtype and got.shape == w.shape, (case, m, got.shape, w.shape)
            assert got.tobytes() == w.tobytes(), (case, m, np.max(np.abs(got - w)))
        checked += 1
        kinds.add(case["kind"])
    assert checked >= VALID_EXAMPLES // 2 and kinds == set(property_cases.KINDS), (checked, kinds)


@pytest.mark.mpi
@pytest.mark.parametrize("n", SIZES)
def test_drawn_bad_calls_raise_the_same_error_on_every_rank(mpi_run, n):
    cases, job, _ = mpi_run(n)
    checked, kinds = 0, set()
    for _, case, errors, (_, sim_error) in _drawn(cases, job, bad=True):
        assert sim_error is not None, ("the simulator accepted", case)
        assert all(e is not None for e in errors), ("some ranks did not raise", case, errors)
        types = {e[0] for e in errors}
        assert types == {type(sim_error).__name__}, (case, errors, repr(sim_error))
        names = property_cases.BAD_NAMES[case["bad"]]
        for message in [e[1] for e in errors] + [str(sim_error)]:
            assert all(name in message for name in names), (case, names, message)
        checked += 1
        kinds.add(case["bad"])
    assert checked == BAD_PER_KIND * len(property_cases.BAD), checked
    assert kinds == set(property_cases.BAD), kinds
