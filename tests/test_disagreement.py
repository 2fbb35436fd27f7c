"""Ranks that disagree on a call get the same clear error, and the job goes on.

A rank whose dtype, shape, root, name or op differs from the others' must be refused on
every rank before any byte of the call moves (an MPI type mismatch aborts the job; a
broadcast from two roots silently hands out rank 0's data or hangs), under MPI and torch,
and the SPMD agents refuse the same calls with the same exception type. The job is
tests/disagreement_job.py; each rank writes what it got per case.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import _jobs

JOB = Path(__file__).with_name("disagreement_job.py")

_DTYPES = ("ValueError", ("float32", "float64"))
_NAMES = ("ValueError", ("'v0'", "'v1'"))


def _expected(n: int) -> dict[str, tuple[str, tuple[str, ...]] | None]:
    """Case -> (exception type, parts of its message); None: the call works."""
    cases: dict[str, tuple[str, tuple[str, ...]] | None] = {}
    for odd in (0, n - 1):
        cases[f"dtype first call, odd rank {odd}"] = _DTYPES
        cases[f"dtype after agreed calls, odd {odd}"] = _DTYPES
        cases[f"dtype queued, odd {odd}"] = _DTYPES
    cases.update(
        {
            "same bytes, another dtype": ("ValueError", ("(6,)", "(3,)")),
            "dtype in allreduce": _DTYPES,
            "average and sum": ("ValueError", ("average",)),
            "broadcast from two roots": ("ValueError", ("root", "0", "1")),
            "broadcast root out of range on one rank": ("ValueError", ("root_rank",)),
            "names in allreduce": _NAMES,
            "names in broadcast": _NAMES,
            "names in allgather": _NAMES,
            "names in neighbor_allreduce": _NAMES,
            "names in queued neighbor_allreduce": _NAMES,
            "names in neighbor_allgather": _NAMES,
            "sum of booleans": ("TypeError", ("booleans",)),
            "0-d object array": ("TypeError", ("object",)),
            "1-d object array": ("TypeError", ("object",)),
            "broadcast of booleans": None,
            "one name on every rank": None,
        }
    )
    return cases


def _outcomes(out: Path, n: int) -> dict[str, list[dict]]:
    by_case: dict[str, list[dict]] = {}
    for r in range(n):
        path = out / f"rank{r}.jsonl"
        assert path.exists(), f"rank {r} wrote nothing"
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_case.setdefault(record["case"], []).append(record)
    return by_case


def check_outcomes(job: _jobs.Job, out: Path, n: int, same_message: bool) -> None:
    job.check()
    got = _outcomes(out, n)
    for case, want in _expected(n).items():
        records = got.get(case)
        assert records is not None and len(records) == n, (case, records)
        kinds = {rec["kind"] for rec in records}
        assert kinds == {None if want is None else want[0]}, (case, records)
        if want is not None:
            for part in want[1]:
                assert all(part in rec["message"] for rec in records), (case, part, records)
            if same_message:  # every rank raises the one agreed message
                assert len({rec["message"] for rec in records}) == 1, (case, records)
        assert all(rec["after"] == (n - 1) / 2 for rec in records), (case, records)


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("backend", ["mpi", "torch"])
def test_ranks_that_disagree_are_refused_on_every_rank(tmp_path, backend, n):
    job = _jobs.fogrun(n, str(JOB), str(tmp_path), timeout=120, env={"FOGSIM_BACKEND": backend})
    check_outcomes(job, tmp_path, n, same_message=True)


def test_spmd_agents_refuse_the_same_calls(tmp_path):
    job = _jobs.fogrun(4, str(JOB), str(tmp_path), options=("--spmd",), timeout=120)
    check_outcomes(job, tmp_path, 4, same_message=False)
