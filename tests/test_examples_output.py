"""The examples' output as a user reads it: a header naming the columns, rows of numbers and
a last line saying what the result means, true to the run (converged or not).

Run here as a user runs them, ``python examples/X.py``. The other launches (``fogrun -np
N``, ``--sim``, ``--spmd``, the simulation-only and sharded examples, the BlueFog programs)
are checked by the tests that already run them (``tests/example_output.table``).
"""

from __future__ import annotations

import ast
import re

import pytest

from tests import _jobs, environment
from tests.example_output import table

EXAMPLES = _jobs.ROOT / "examples"
COLUMN = "mean_i ||x_i - x*||^2 (mean squared distance of the agents to the optimum x*)"

#: example, options, its header, and what its last line must say about that run.
RUNS = {
    "consensus": (
        ("--iters", "5"),
        " iter  consensus error (RMS distance of the agents' vectors to their average)",
        "consensus error fell from 1.79e+00 to 4.92e-02 in 5 iterations and is still falling: "
        "not converged yet",
    ),
    "dgd": (
        (),  # 200 iterations: DGD has levelled off, short of x*
        f" iter  {COLUMN}",
        "in 200 iterations and levelled off: with a constant step size DGD stops this close "
        "to x*, not at it",
    ),
    "gradient_tracking": (
        (),  # 300 iterations: x* to round-off
        f" iter  {COLUMN}",
        "in 300 iterations: the agents reach the optimum x*, to 15 digits",
    ),
    "exact_diffusion": (
        ("--iters", "20"),
        f" iter  {COLUMN}",
        "in 20 iterations and is still falling: not converged yet (run more --iters); DGD "
        "with the same step size ends at",
    ),
    "push_diging": (
        (),  # 300 iterations
        f" iter  {COLUMN}",
        "in 300 iterations: the agents reach the optimum x*",
    ),
    "async_push_sum": (
        ("--iters", "20"),
        " iter  max_i |z_i - xbar| / |xbar| (the worst agent's relative error, z_i = x_i/p_i)",
        "x/p is approaching the average but not there yet (run more --iters), and no mass was lost",
    ),
    "fish_school": (
        ("--size", "30", "--steps", "10", "--quiet"),
        " step  diffusion error  alone error  central error  distance to predator",
        "at step 10 the fish's shared (diffusion) estimates are",
    ),
}


@pytest.mark.parametrize("example", list(RUNS))
def test_an_example_names_its_columns_and_says_what_its_result_means(example):
    options, header, says = RUNS[example]
    job = _jobs.python(str(EXAMPLES / f"{example}.py"), *options, timeout=120).check()
    out = table(job.stdout)
    assert out.header == header, job.stdout
    assert says in out.last, job.stdout
    assert all(len(row) == len(out.rows[0]) for row in out.rows), job.stdout


# -- the last line of the shared examples says what the curve did ------------------------
@pytest.fixture(scope="module")
def common():
    return environment.load_example("_common")


def say(common, curve, goal=1e-6):
    return common.outcome(curve, "error", len(curve) - 1, reached="REACHED", goal=goal)


def test_a_curve_below_the_goal_is_reached(common):
    line = say(common, [1.0, 1e-3, 1e-7])
    assert line == "error fell from 1.00e+00 to 1.00e-07 in 2 iterations: REACHED"


def test_a_curve_still_falling_is_not_converged(common):
    line = say(common, [1.0, 0.5, 0.25, 0.125])
    assert "still falling: not converged yet" in line and "REACHED" not in line


def test_a_curve_that_levelled_off_above_the_goal_says_so(common):
    line = say(common, [1.0, 0.1, *[0.01] * 10])
    assert "levelled off: it stopped falling before converging" in line
    assert "REACHED" not in line


def test_a_curve_that_grew_diverges(common):
    assert "grew from 1.00e+00 to 1.00e+03 in 2 iterations: the run diverges" in say(
        common, [1.0, 10.0, 1e3]
    )
    assert "the run diverges" in say(common, [1.0, float("nan")])
    assert "stayed at 1.00e+00 in 2 iterations: the run does not converge" in say(
        common, [1.0, 1.0, 1.0]
    )


def test_a_curve_at_zero_from_the_start_and_a_run_of_no_iteration(common):
    assert say(common, [0.0, 0.0]) == "error is 0 from the start: REACHED"
    assert say(common, [2.0]) == "error is 2.00e+00 at the start, and no iteration ran"


def test_digits_count_what_a_relative_error_leaves(common):
    assert common.digits(3e-10) == "to 9 digits"
    assert common.digits(0.0) == "exactly"


# -- what --help and the docstrings say -------------------------------------------------
SCRIPTS = sorted(p for p in EXAMPLES.rglob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_docstring_says_what_is_printed_and_the_last_line(script):
    doc = " ".join(ast.get_docstring(ast.parse(script.read_text())).split())
    assert re.search(r"\bprints?\b[^.]* a header naming the columns", doc, re.I), script.name
    assert re.search(r"\blast\b", doc), script.name


def test_help_shows_the_docstring_and_the_defaults():
    job = _jobs.python(str(EXAMPLES / "local_solver.py"), "--help", timeout=60).check()
    assert "Prints a header naming the columns" in job.stdout
    assert "default FOGSIM_SIZE, else 100000" in job.stdout and "(default 20)" in job.stdout
