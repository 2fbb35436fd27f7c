"""The examples give the same numbers simulated (fogrun --sim), under MPI (fogrun) and as
per-agent threads of one process (fogrun --spmd), and print the same header and last line,
once per job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import _jobs
from tests.example_output import Table, table, wording

ROOT = _jobs.ROOT
CONFIGS = [
    *[(n, "exp2") for n in (1, 2, 3, 4)],
    (4, "ring"),
    (4, "one-peer-exp2"),
    (3, "one-peer-exp2"),
]


def fogrun(
    tmp_path: Path, mode: list[str], n: int, example: str, topology: str, *options: str
) -> np.ndarray:
    """Run ``example`` under ``fogrun -np n *mode``; return every agent's final value."""
    return run(tmp_path, mode, n, example, topology, *options)[0]


def run(
    tmp_path: Path, mode: list[str], n: int, example: str, topology: str, *options: str
) -> tuple[np.ndarray, Table]:
    """Run ``example`` under ``fogrun -np n *mode``; return the final values and the output."""
    how = mode[0].strip("-") if mode else "mpi"
    out = tmp_path / f"{example}-{how}-{n}-{topology}.npy"
    job = _jobs.fogrun(
        n,
        str(ROOT / "examples" / f"{example}.py"),
        "--topology",
        topology,
        "--iters",
        "40",
        "--save",
        str(out),
        *options,
        options=tuple(mode),
        timeout=120,
    ).check()
    lines = [ln for ln in job.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
    assert lines and len(set(lines)) == len(lines), "progress must be printed once per job"
    return np.load(out), table(job.stdout)


def same_output(*outputs: Table) -> None:
    """The same header, and the same last line up to the last digits, in every mode."""
    assert len({out.header for out in outputs}) == 1, [out.header for out in outputs]
    assert len({wording(out.last) for out in outputs}) == 1, [out.last for out in outputs]


@pytest.mark.mpi
@pytest.mark.parametrize("example", ["consensus", "dgd"])
@pytest.mark.parametrize(("n", "topology"), CONFIGS)
def test_example_same_numbers_in_both_modes(tmp_path, example, n, topology):
    simulated, printed = run(tmp_path, ["--sim"], n, example, topology)
    distributed, printed_mpi = run(tmp_path, [], n, example, topology)
    threads, printed_spmd = run(tmp_path, ["--spmd"], n, example, topology)
    same_output(printed, printed_mpi, printed_spmd)
    assert simulated.shape[0] == n
    np.testing.assert_allclose(distributed, simulated, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(threads, simulated, rtol=1e-12, atol=1e-14)


# Every other example once, on 4 agents; (topology, options) exercise what each is about.
OTHERS = {
    "exact_diffusion": ("ring", "--no-dgd"),
    "gradient_tracking": ("one-peer-exp2",),  # a matrix per step
    "push_diging": ("random-push",),  # column-stochastic, time-varying, directed
    "async_push_sum": ("exp2", "--lockstep", "--report-every", "10"),
    "local_solver": ("ring",),  # a per-agent Newton loop compiled with numba (jit=True)
}


@pytest.mark.mpi
@pytest.mark.parametrize("example", list(OTHERS))
def test_other_examples_same_numbers_in_both_modes(tmp_path, example):
    topology, *options = OTHERS[example]
    simulated, printed = run(tmp_path, ["--sim"], 4, example, topology, *options)
    distributed, printed_mpi = run(tmp_path, [], 4, example, topology, *options)
    threads, printed_spmd = run(tmp_path, ["--spmd"], 4, example, topology, *options)
    same_output(printed, printed_mpi, printed_spmd)
    assert simulated.shape[0] == 4
    np.testing.assert_allclose(distributed, simulated, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(threads, simulated, rtol=1e-12, atol=1e-14)


def test_local_solver_gives_the_same_numbers_compiled_and_uncompiled(tmp_path):
    """--no-jit runs the same per-agent Newton solver with fs.vmap(jit=False)."""
    script = str(ROOT / "examples" / "local_solver.py")
    saved = {}
    for name, flags in {"jit": [], "no-jit": ["--no-jit"]}.items():
        out = tmp_path / f"{name}.npy"
        options = ["--agents", "64", "--iters", "5", "--save", str(out), *flags]
        job = _jobs.python(script, *options, timeout=300).check()
        saved[name] = np.load(out)
        printed = table(job.stdout)  # as a user runs it
        assert printed.header.split()[:2] == ["iter", "mean_i"] and len(printed.rows[0]) == 5
        assert "||grad F(xbar)|| fell from" in printed.last, job.stdout
    assert saved["jit"].shape == (64, 3)
    np.testing.assert_allclose(saved["no-jit"], saved["jit"], rtol=1e-12, atol=1e-14)


def test_every_example_is_covered():
    # fish_school: test_fish_school.py; decentralized_training: test_optim.py;
    # cost_model (simulator only, it models a cluster): test_cost_model.py;
    # fault_tolerance (simulated faults): test_faults.py; sharded_consensus (the simulator
    # on 1 and 2 processes): test_example_sharded_consensus.py
    tested = {
        "consensus",
        "dgd",
        *OTHERS,
        "fish_school",
        "decentralized_training",
        "cost_model",
        "fault_tolerance",
        "sharded_consensus",
        "heterogeneity",  # sweeps of one-process worlds: test_heterogeneity.py
    }
    examples = {p.stem for p in (ROOT / "examples").glob("*.py") if not p.stem.startswith("_")}
    assert examples <= tested, sorted(examples - tested)
