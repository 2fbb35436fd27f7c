"""The mode checker (fogrun --check-modes, fogsim.check_modes): it names the first op where a
script's simulated run and its SPMD run differ, and passes the repository's examples."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import fogsim as fs
from tests import _jobs

ROOT = _jobs.ROOT

# The new user's decentralized gradient step, written the obvious way (issue 18): with
# stacked A (n, 4, 4) and w (n, 4), A @ w broadcasts to (n, n, 4) in the simulator.
NOT_BATCH_FRIENDLY = """
import numpy as np
import fogsim as fs

fs.init()
rng = np.random.default_rng(0)
As, bs = rng.standard_normal((fs.size(), 4, 4)), rng.standard_normal((fs.size(), 4))
A, b = fs.local(lambda r: As[r]), fs.local(lambda r: bs[r])
w = fs.local(lambda r: np.zeros(4))
for _ in range(20):
    grad = A.T @ (A @ w - b)
    w = fs.neighbor_allreduce(w - 0.01 * grad)
"""
WITH_VMAP = NOT_BATCH_FRIENDLY.replace(
    "grad = A.T @ (A @ w - b)", "grad = fs.vmap(lambda A, w, b: A.T @ (A @ w - b))(A, w, b)"
)
# Same shapes, other values: x.mean() is every agent's mean simulated, one agent's in SPMD.
MEAN_OF_WHAT = """
import numpy as np
import fogsim as fs

fs.init()
x = fs.local(lambda r: np.arange(3.0) + r)
x = fs.neighbor_allreduce(x - x.mean())
x = fs.allreduce(x)
"""


def _script(tmp_path, text: str):
    path = tmp_path / "script.py"
    path.write_text(text)
    return path


def test_the_broadcasting_step_is_named_with_its_line_and_shapes(tmp_path):
    path = _script(tmp_path, NOT_BATCH_FRIENDLY)
    report = fs.check_modes(path, 4)
    assert not report.ok and report.ops == 1
    said = str(report)
    assert f"op 1 (neighbor_allreduce) at {path}:12" in said
    assert "(4, 4, 4) simulated but (4, 4) as 4 SPMD agents" in said
    assert "each agent's value is (4, 4) simulated, (4,) per agent" in said
    assert "fs.vmap" in said


def test_the_same_step_with_vmap_agrees_op_by_op(tmp_path):
    report = fs.check_modes(_script(tmp_path, WITH_VMAP), 4)
    assert report.ok and report.ops == 20, str(report)
    assert str(report) == "fogsim check-modes: 20 ops agree, simulated and as 4 SPMD agents"


def _notebook(tmp_path, *cells: str):
    """A notebook of a markdown cell, then ``cells`` as code cells (nbformat 4 JSON)."""
    import json

    code = [
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": text.strip("\n").splitlines(keepends=True),
        }
        for text in cells
    ]
    nb = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# A lesson"]}, *code],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "lesson.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_a_notebook_is_checked_cell_by_cell_and_named_by_cell(tmp_path):
    setup, loop = NOT_BATCH_FRIENDLY.split("for _ in range(20):")
    loop = "%time\n!echo magics and shell escapes are left out\nfor _ in range(20):" + loop
    report = fs.check_modes(_notebook(tmp_path, "%matplotlib inline\n" + setup, loop), 4)
    assert not report.ok and report.ops == 1, str(report)
    # cell 3 (the markdown cell is cell 1), line 5 of the cell
    assert f"op 1 (neighbor_allreduce) at {tmp_path / 'lesson.ipynb'}[cell 3]:5" in str(report)
    fixed = loop.replace(
        "grad = A.T @ (A @ w - b)", "grad = fs.vmap(lambda A, w, b: A.T @ (A @ w - b))(A, w, b)"
    )
    report = fs.check_modes(_notebook(tmp_path, setup, "%%time\nraise SystemExit(3)", fixed), 4)
    assert report.ok and report.ops == 20, str(report)  # a cell-magic cell is left out


def test_values_that_differ_name_the_agent_and_the_gap(tmp_path):
    path = _script(tmp_path, MEAN_OF_WHAT)
    report = fs.check_modes(path, 3)
    assert not report.ok and report.ops == 1
    said = str(report)
    assert f"op 1 (neighbor_allreduce) at {path}:7: input of agent" in said
    assert "differs by up to" in said


def test_a_script_that_fails_in_one_mode_is_reported_with_its_error(tmp_path):
    # with 2 agents, (2, 4, 4) @ (2, 4) cannot even broadcast: the simulated run fails
    report = fs.check_modes(_script(tmp_path, NOT_BATCH_FRIENDLY), 2)
    assert set(report.errors) == {"sim"} and "matmul" in report.errors["sim"]
    said = str(report)
    assert "the script failed simulated" in said
    assert "made 0 ops simulated and 20 as 2 SPMD agents" in said


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="size must be an integer >= 1, got 0"):
        fs.check_modes(_script(tmp_path, WITH_VMAP), 0)
    with pytest.raises(ValueError, match="script .*nothing.py' is not a file"):
        fs.check_modes(tmp_path / "nothing.py", 2)


def test_fogrun_check_modes_exits_with_the_verdict(tmp_path):
    bad = _jobs.python(
        "-m",
        "fogsim.run",
        "--check-modes",
        "-np",
        "4",
        "python",
        str(_script(tmp_path, NOT_BATCH_FRIENDLY)),
        timeout=300,
    )
    assert not bad.timed_out and bad.returncode == 1, bad.describe()
    assert "the modes differ" in bad.stderr and "op 1 (neighbor_allreduce)" in bad.stderr
    good_path = tmp_path / "good.py"
    good_path.write_text(WITH_VMAP)
    _jobs.python(
        "-m", "fogsim.run", "--check-modes", "-np", "4", "python", str(good_path), timeout=300
    ).check()
    refused = _jobs.python(
        "-m",
        "fogsim.run",
        "--check-modes",
        "--spmd",
        "-np",
        "2",
        "python",
        str(good_path),
        timeout=60,
    )
    assert refused.returncode == 2 and "leave out --sim and --spmd" in refused.stderr


EXAMPLES = {
    "consensus": ("--iters", "20"),
    "dgd": ("--iters", "20"),
    "exact_diffusion": ("--iters", "20"),
    "gradient_tracking": ("--iters", "20"),
    "push_diging": ("--iters", "20"),
    "async_push_sum": ("--iters", "20"),
    "fish_school": ("--steps", "10"),
    "local_solver": ("--iters", "5"),  # fs.vmap(jit=True): compiled per agent under SPMD
    "decentralized_training": ("--epochs", "1"),  # float32: agrees to float32's round-off
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_every_example_agrees_in_both_modes(example):
    report = fs.check_modes(ROOT / "examples" / f"{example}.py", 4, EXAMPLES[example])
    assert report.ok and report.ops > 0, str(report)


#: Notebooks about the simulator alone, and why: they run in the simulator only (their
#: execution is tested in tests/test_notebooks.py).
SIMULATOR_NOTEBOOKS = {
    "07_when_decentralization_pays_off.ipynb": "simulated time (fogsim.clock) is the "
    "simulator's: SPMD agents, threads of one process, have no clock of their own",
    "08_heterogeneous_data.ipynb": "its runs are sweeps (fogsim.experiments), each run in a "
    "simulated world of its own (experiments.world): nothing runs in the notebook's world",
}

#: The notebooks, checked as 16 agents (their own number; 04 takes fs.size() fish).
NOTEBOOKS = [
    p for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if p.name not in SIMULATOR_NOTEBOOKS
]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_every_notebook_agrees_in_both_modes(notebook):
    report = fs.check_modes(notebook, 16)
    assert report.ok and report.ops > 0, str(report)


def test_every_example_and_notebook_is_checked():
    """A new example is either checked above or says it is simulation-only."""
    examples = {p.stem for p in (ROOT / "examples").glob("*.py") if not p.stem.startswith("_")}
    text = {e: (ROOT / "examples" / f"{e}.py").read_text() for e in examples}
    simulation_only = {e for e in examples if "simulation_only(" in text[e]}
    # Examples of the sharded simulator ask for backend="sim" (sharded over the launched
    # processes; SPMD agents refuse it): each is checked against one process in its own test.
    sharded = {e for e in examples - simulation_only if 'backend="sim"' in text[e]}
    assert sharded == {"sharded_consensus"}
    assert all((ROOT / "tests" / f"test_example_{e}.py").exists() for e in sharded)
    checked = examples - simulation_only - sharded
    assert checked == set(EXAMPLES), sorted(checked)
    assert len(NOTEBOOKS) >= 4
    every = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert set(SIMULATOR_NOTEBOOKS) <= every  # no stale entry
    assert {p.name for p in NOTEBOOKS} | set(SIMULATOR_NOTEBOOKS) == every


# -- the simulator's own guard: per-agent values that grew an agent axis ------------------
def _least_squares_world(n=4, d=4):
    fs.init(backend="sim", size=n)
    rng = np.random.default_rng(0)
    As, bs = rng.standard_normal((n, d, d)), rng.standard_normal((n, d))
    return fs.local(lambda r: As[r]), fs.local(lambda r: bs[r]), fs.local(lambda r: np.zeros(d))


def test_the_simulator_warns_once_where_values_grew_an_agent_axis():
    A, b, w = _least_squares_world()
    try:
        with pytest.warns(fs.AgentShapeWarning) as caught:
            for _ in range(5):
                grad = A.T @ (A @ w - b)
                w = fs.neighbor_allreduce(w - 0.01 * grad)  # the line the warning names
        line = sys._getframe().f_lineno - 1
        assert len(caught) == 1, [str(c.message) for c in caught]
        said = str(caught[0].message)
        assert (
            f"neighbor_allreduce at {__file__}:{line}: each agent's value has shape (4, 4)" in said
            and "fs.vmap" in said
            and "--check-modes" in said
        )
        assert caught[0].filename == __file__ and caught[0].lineno == line
    finally:
        fs.shutdown()


def test_batch_friendly_code_and_local_values_themselves_do_not_warn():
    A, b, w = _least_squares_world()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", fs.AgentShapeWarning)
            fs.allreduce(A)  # (4, 4) per agent, as local() made it: meant
            grad = fs.vmap(lambda A, w, b: A.T @ (A @ w - b))(A, w, b)
            w = fs.neighbor_allreduce(w - 0.01 * grad)
            w = fs.neighbor_allreduce(w - 0.01 * np.einsum("aji,aj->ai", A, w))
    finally:
        fs.shutdown()


def test_a_line_whose_values_grew_an_agent_axis_warns_once_without_local():
    """Values made without fs.local: the guard compares with the earlier calls of the line."""
    fs.init(backend="sim", size=4)
    rng = np.random.default_rng(0)
    A, b, w = rng.standard_normal((4, 4, 4)), rng.standard_normal((4, 4)), np.zeros((4, 4))
    try:
        with pytest.warns(fs.AgentShapeWarning) as caught:
            for _ in range(4):
                w = fs.neighbor_allreduce(w)  # (4,) per agent first, then (4, 4) and again
                w = w - 0.01 * (A.T @ (A @ w - b))
        line = sys._getframe().f_lineno - 2
        assert len(caught) == 1, [str(c.message) for c in caught]
        said = str(caught[0].message)
        assert (
            f"neighbor_allreduce at {__file__}:{line}: each agent's value has shape (4, 4) "
            "here, (4,) at an earlier call from this line" in said
        )
        assert caught[0].filename == __file__ and caught[0].lineno == line
    finally:
        fs.shutdown()


def test_one_line_averaging_parameters_of_many_shapes_does_not_warn():
    fs.init(backend="sim", size=4)
    params = [np.ones((4, 3)), np.ones((4, 4, 3)), np.ones((4,)), np.ones((4, 4, 4, 3))]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", fs.AgentShapeWarning)
            for _ in range(2):
                for p in params:
                    fs.neighbor_allreduce(p)  # shapes (3,), (4, 3), (), (4, 4, 3): all meant
    finally:
        fs.shutdown()
