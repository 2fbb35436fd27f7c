"""fogsim.experiments: grids, cached and parallel sweeps, tidy results, plots, stacked seeds.

Written as a user would use the package: every number a sweep returns is checked against
the same run done by hand with fogsim.algorithms, and the cache against a counter the run
function writes to a file (never against timings).
"""

from __future__ import annotations

import csv
import json
import logging
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import fogsim as fs
from fogsim import algorithms as A
from fogsim.experiments import (
    Results,
    SweepError,
    grid,
    optimize,
    sweep,
    unstack,
    world,
)

ROOT = Path(__file__).resolve().parents[1]
ITERS = 12


# -- run functions (module-level: worker processes import them) ----------------------------
def dgd_run(config):
    """DGD on random least squares over a ring of 8 agents."""
    with world(8, fs.topology.ring_graph):
        problem = A.LeastSquares.random(m=6, d=3, seed=config["seed"])
        return A.dgd(problem, alpha=config["alpha"], iters=ITERS)


def by_hand(alpha, seed):
    """The run dgd_run makes, written out with fogsim.init."""
    fs.init(size=8, topology=fs.topology.ring_graph)
    try:
        problem = A.LeastSquares.random(m=6, d=3, seed=seed)
        return A.dgd(problem, alpha=alpha, iters=ITERS)
    finally:
        fs.shutdown()


class Counting:
    """dgd_run that appends each configuration it runs to a file, and fails where told."""

    def __init__(self, log, fail=None, interrupt=None):
        self.log = str(log)
        self.fail = fail
        self.interrupt = interrupt

    def __call__(self, config):
        with open(self.log, "a") as fh:
            fh.write(json.dumps(config, sort_keys=True) + "\n")
        if config == self.fail:
            raise RuntimeError("this run breaks")
        if config == self.interrupt:
            raise KeyboardInterrupt
        return dgd_run(config)


def calls(log):
    path = Path(log)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def stacked_dgd(config):
    """dgd_run that also accepts a list of seeds (one simulation, state (n, S, d))."""
    with world(8, fs.topology.ring_graph):
        problem = A.LeastSquares.random(m=6, d=3, seed=config["seed"])
        result = A.dgd(problem, alpha=config["alpha"], iters=ITERS)
    return unstack(result) if isinstance(config["seed"], list) else result


def scalars_run(config):
    """A run returning a dict: one series and two scalars."""
    k = np.arange(5, dtype=np.float64)
    return {"loss": config["a"] * k + config["seed"], "best": config["a"], "tag": "x"}


CONFIGS = grid(alpha=[0.02, 0.05], seed=[0, 1, 2])


@pytest.fixture(autouse=True)
def no_world_left():
    yield
    assert not fs.is_initialized()


# -- grid -----------------------------------------------------------------------------------
def test_grid_is_the_cartesian_product_first_axis_slowest():
    configs = grid(algorithm=["dgd", "exact_diffusion"], alpha=[0.1, 0.2, 0.3], seed=range(2))
    expected = []
    for algorithm in ["dgd", "exact_diffusion"]:
        for alpha in [0.1, 0.2, 0.3]:
            for seed in [0, 1]:
                expected.append({"algorithm": algorithm, "alpha": alpha, "seed": seed})
    assert configs == expected
    assert [list(c) for c in configs] == [["algorithm", "alpha", "seed"]] * 12


def test_grid_takes_single_values_and_numpy_values_as_json_scalars():
    configs = grid(alpha=np.array([0.5, 1.5]), n=np.int64(8), name="ring", flag=None)
    assert configs == [
        {"alpha": 0.5, "n": 8, "name": "ring", "flag": None},
        {"alpha": 1.5, "n": 8, "name": "ring", "flag": None},
    ]
    assert all(type(c["alpha"]) is float and type(c["n"]) is int for c in configs)


def test_grid_refuses_bad_axes_naming_them():
    with pytest.raises(ValueError, match="axis 'alpha' has no values"):
        grid(alpha=[], seed=[0])
    with pytest.raises(TypeError, match="axis 'topology'.*JSON scalars"):
        grid(topology=[fs.topology.ring_graph])
    with pytest.raises(TypeError, match="axis 'shape'.*JSON scalars"):
        grid(shape=[[1, 2]])
    with pytest.raises(ValueError, match="axis 'alpha'.*not a finite number"):
        grid(alpha=[0.1, float("nan")])
    with pytest.raises(ValueError, match="axis 'seed' holds a value twice"):
        grid(seed=[1, 1])
    with pytest.raises(ValueError, match="at least one axis"):
        grid()


# -- sweep: numbers, cache, resumption, parallel ---------------------------------------------
def test_a_sweep_gives_the_numbers_of_each_run_made_by_hand():
    results = sweep(dgd_run, CONFIGS, progress=False)
    assert results.configs == CONFIGS and results.computed == 6 and results.cached == 0
    assert results.metrics == ["consensus_error", "distance", "grad_norm", "bytes"]
    for config, outcome in zip(results.configs, results.outcomes, strict=True):
        expected = by_hand(config["alpha"], config["seed"])
        assert set(outcome.series) == set(expected.history)
        for key, values in expected.history.items():
            np.testing.assert_array_equal(outcome.series[key], values)
    rows = results.rows
    assert len(rows) == 6 * (ITERS + 1)
    assert list(rows[0]) == ["alpha", "seed", "iteration", *results.metrics]
    third = by_hand(0.02, 2)
    row = rows[2 * (ITERS + 1) + 5]  # the third run, iteration 5
    assert (row["alpha"], row["seed"], row["iteration"]) == (0.02, 2, 5)
    assert row["distance"] == third.history["distance"][5]
    assert results.runs[2]["distance"] == third.history["distance"][-1]


def test_a_second_sweep_with_the_cache_computes_nothing_and_returns_the_same(tmp_path):
    log = tmp_path / "calls.jsonl"
    first = sweep(Counting(log), CONFIGS, cache=tmp_path / "cache", progress=False)
    assert sorted(map(json.dumps, calls(log))) == sorted(
        json.dumps(c, sort_keys=True) for c in CONFIGS
    )
    assert len(list((tmp_path / "cache").glob("*.json"))) == 6
    second = sweep(Counting(log), CONFIGS, cache=tmp_path / "cache", progress=False)
    assert len(calls(log)) == 6  # nothing ran again
    assert (second.computed, second.cached) == (0, 6)
    assert second.rows == first.rows and second.runs == first.runs
    # another version, or another run function, is another cache entry
    sweep(Counting(log), CONFIGS[:1], cache=tmp_path / "cache", version="2", progress=False)
    assert len(calls(log)) == 7


def test_a_run_that_fails_is_reported_and_the_next_sweep_runs_only_it(tmp_path):
    log, cache = tmp_path / "calls.jsonl", tmp_path / "cache"
    with pytest.raises(SweepError, match="1 of 6 runs failed") as info:
        sweep(Counting(log, fail=CONFIGS[2]), CONFIGS, cache=cache, progress=False)
    ((config, text),) = info.value.failures
    assert config == CONFIGS[2] and "this run breaks" in text
    assert info.value.results.configs == CONFIGS[:2] + CONFIGS[3:]
    assert len(calls(log)) == 6  # the sweep went on after the failure
    again = sweep(Counting(log), CONFIGS, cache=cache, progress=False)
    assert calls(log)[6:] == [CONFIGS[2]]
    assert (again.computed, again.cached) == (1, 5)
    whole = sweep(dgd_run, CONFIGS, progress=False)
    assert again.rows == whole.rows


def test_on_error_skip_returns_the_rest_with_the_failures():
    results = sweep(
        Counting("/dev/null", fail=CONFIGS[0]), CONFIGS, progress=False, on_error="skip"
    )
    assert results.configs == CONFIGS[1:]
    assert [c for c, _ in results.failures] == [CONFIGS[0]]


def test_an_interrupted_sweep_resumes_with_the_missing_runs(tmp_path):
    log, cache = tmp_path / "calls.jsonl", tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        sweep(Counting(log, interrupt=CONFIGS[2]), CONFIGS, cache=cache, progress=False)
    assert len(calls(log)) == 3
    assert len(list(cache.glob("*.json"))) == 2  # whole files only, no temporary left
    assert not [p for p in cache.iterdir() if p.suffix != ".json"]
    resumed = sweep(Counting(log), CONFIGS, cache=cache, progress=False)
    assert calls(log)[3:] == CONFIGS[2:]
    assert resumed.rows == sweep(dgd_run, CONFIGS, progress=False).rows


def test_a_cache_file_cut_short_is_recomputed(tmp_path):
    log, cache = tmp_path / "calls.jsonl", tmp_path / "cache"
    sweep(Counting(log), CONFIGS[:2], cache=cache, progress=False)
    victim = sorted(cache.glob("*.json"))[0]
    victim.write_text(victim.read_text()[:50])
    sweep(Counting(log), CONFIGS[:2], cache=cache, progress=False)
    assert len(calls(log)) == 3


def test_two_jobs_give_the_numbers_of_one(tmp_path):
    one = sweep(dgd_run, CONFIGS, progress=False)
    two = sweep(dgd_run, CONFIGS, n_jobs=2, progress=False)
    assert two.configs == one.configs and two.rows == one.rows


def test_backend_goes_to_joblib_and_ray_is_registered(monkeypatch):
    import joblib
    from joblib._parallel_backends import SequentialBackend

    used = []

    class Recording(SequentialBackend):
        def configure(self, *args, **kwargs):
            used.append("configure")
            return super().configure(*args, **kwargs)

    def register_ray():
        used.append("register_ray")
        joblib.register_parallel_backend("ray", Recording)

    ray = types.ModuleType("ray")
    ray_util = types.ModuleType("ray.util")
    ray_joblib = types.ModuleType("ray.util.joblib")
    ray_joblib.register_ray = register_ray
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.util", ray_util)
    monkeypatch.setitem(sys.modules, "ray.util.joblib", ray_joblib)
    results = sweep(dgd_run, CONFIGS[:3], backend="ray", n_jobs=2, progress=False)
    assert used[0] == "register_ray" and "configure" in used
    assert results.rows == sweep(dgd_run, CONFIGS[:3], progress=False).rows


def test_a_missing_cluster_engine_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    with pytest.raises(ImportError, match="pip install dask distributed"):
        sweep(dgd_run, CONFIGS, backend="dask", progress=False)
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.util.joblib", None)
    with pytest.raises(ImportError, match="pip install ray"):
        sweep(dgd_run, CONFIGS, backend="ray", progress=False)


def test_sweep_refuses_bad_arguments_naming_them():
    with pytest.raises(ValueError, match="n_jobs must be >= 1"):
        sweep(dgd_run, CONFIGS, n_jobs=0)
    with pytest.raises(TypeError, match="n_jobs must be an int"):
        sweep(dgd_run, CONFIGS, n_jobs=2.0)
    with pytest.raises(TypeError, match="configs must be a sequence of dicts"):
        sweep(dgd_run, CONFIGS[0])
    with pytest.raises(ValueError, match="configs is empty"):
        sweep(dgd_run, [])
    with pytest.raises(ValueError, match=r"configs\[1\] repeats configs\[0\]"):
        sweep(dgd_run, [CONFIGS[0], dict(CONFIGS[0])])
    with pytest.raises(TypeError, match=r"configs\[0\]\['alpha'\].*JSON scalars"):
        sweep(dgd_run, [{"alpha": [0.1]}])
    with pytest.raises(TypeError, match="run must be a function"):
        sweep("dgd", CONFIGS)
    with pytest.raises(TypeError, match="progress must be a bool"):
        sweep(dgd_run, CONFIGS, progress=1)
    with pytest.raises(ValueError, match="on_error must be"):
        sweep(dgd_run, CONFIGS, on_error="ignore")
    with pytest.raises(TypeError, match="cache must be a folder"):
        sweep(dgd_run, CONFIGS, cache=3)


def test_a_run_returning_something_else_fails_naming_its_config():
    results = sweep(lambda c: [1, 2], CONFIGS[:1], progress=False, on_error="skip")
    ((config, text),) = results.failures
    assert config == CONFIGS[0] and "returned list" in text


def test_the_callers_world_stays_open_and_current():
    fs.init(size=4, topology=fs.topology.ring_graph)
    try:
        sweep(dgd_run, CONFIGS[:2], progress=False)
        assert fs.is_initialized() and fs.size() == 4
    finally:
        fs.shutdown()


def test_a_run_that_closes_the_callers_world_is_warned_about():
    fs.init(size=4)
    with pytest.warns(RuntimeWarning, match="closed the fogsim world"):
        sweep(lambda c: by_hand(c["alpha"], c["seed"]), CONFIGS[:1], progress=False)
    assert not fs.is_initialized()


# -- stacked seeds ---------------------------------------------------------------------------
def test_stacked_seeds_equal_separate_runs_and_are_reported(caplog):
    configs = grid(
        algorithm=["dgd", "gradient_tracking", "exact_diffusion"],
        alpha=[0.02],
        seed=[0, 1, 2, 3],
        iters=15,
        n=6,
        heterogeneity=[0.0, 0.5],
    )
    separate = sweep(optimize, configs, progress=False)
    assert separate.stacked == []
    with caplog.at_level(logging.INFO, logger="fogsim.experiments"):
        stacked = sweep(optimize, configs, progress=False, stack_seeds=True)
    assert "stacked seeds: 24 runs in 6 simulations" in caplog.text
    assert len(stacked.stacked) == 6
    assert stacked.stacked[0] == {
        "config": {"algorithm": "dgd", "alpha": 0.02, "iters": 15, "n": 6, "heterogeneity": 0.0},
        "seeds": [0, 1, 2, 3],
    }
    assert "stacked 24 runs in 6 simulations" in repr(stacked)
    assert stacked.configs == separate.configs
    for a, b in zip(separate.outcomes, stacked.outcomes, strict=True):
        assert set(a.series) == set(b.series)
        for key in a.series:
            np.testing.assert_allclose(b.series[key], a.series[key], rtol=1e-12, atol=1e-15)


def test_stacked_seeds_of_a_users_run_share_the_cache_with_separate_ones(tmp_path):
    stacked = sweep(stacked_dgd, CONFIGS, cache=tmp_path, stack_seeds=True, progress=False)
    assert [s["seeds"] for s in stacked.stacked] == [[0, 1, 2], [0, 1, 2]]
    again = sweep(stacked_dgd, CONFIGS, cache=tmp_path, progress=False)
    assert again.computed == 0
    alone = sweep(dgd_run, CONFIGS, progress=False)
    for a, b in zip(alone.outcomes, again.outcomes, strict=True):
        for key in a.series:
            np.testing.assert_allclose(b.series[key], a.series[key], rtol=1e-12, atol=1e-15)


def test_only_the_missing_seeds_are_stacked(tmp_path):
    sweep(stacked_dgd, CONFIGS[:2], cache=tmp_path, progress=False)
    results = sweep(stacked_dgd, CONFIGS, cache=tmp_path, stack_seeds=True, progress=False)
    # alpha=0.02 lacks seed 2 only: run alone; alpha=0.05's three seeds: one simulation
    assert results.stacked == [{"config": {"alpha": 0.05}, "seeds": [0, 1, 2]}]
    assert (results.computed, results.cached) == (4, 2)


def test_a_run_that_cannot_stack_fails_clearly():
    results = sweep(dgd_run, CONFIGS[:2], stack_seeds=True, progress=False, on_error="skip")
    assert len(results.failures) == 2 and results.configs == []


# -- the built-in run --------------------------------------------------------------------------
def test_optimize_at_no_heterogeneity_is_least_squares_random():
    config = {
        "algorithm": "exact_diffusion",
        "topology": "exponential_two",
        "n": 8,
        "m": 7,
        "d": 3,
        "alpha": 0.03,
        "iters": 20,
        "seed": 4,
    }
    result = optimize(config)
    fs.init(size=8, topology=fs.topology.exponential_two_graph)
    try:
        expected = A.exact_diffusion(A.LeastSquares.random(m=7, d=3, seed=4), alpha=0.03, iters=20)
    finally:
        fs.shutdown()
    for key, values in expected.history.items():
        np.testing.assert_array_equal(result.history[key], values)
    moved = optimize({**config, "heterogeneity": 1.0})
    assert moved.history["distance"][0] != result.history["distance"][0]


def test_optimize_with_a_clock_records_time_and_plots_against_it():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = grid(alpha=0.02, seed=[0, 1], iters=10, latency=1e-4, bandwidth=1e8)
    results = sweep(optimize, configs, progress=False)
    time = results.outcomes[0].series["time"]
    assert time[0] == 0 and np.all(np.diff(time) > 0)
    ax = results.plot("distance", x="time")
    np.testing.assert_allclose(ax.get_lines()[0].get_xdata(), time)
    plt.close(ax.figure)
    with pytest.raises(ValueError, match="cannot be stacked with a clock"):
        optimize({**configs[0], "seed": [0, 1]})


def test_optimize_refuses_bad_configs_naming_the_key():
    with pytest.raises(ValueError, match="unknown key 'step'"):
        optimize({"step": 0.1})
    with pytest.raises(ValueError, match="'alpha'.*is required"):
        optimize({"seed": 1})
    with pytest.raises(ValueError, match=r"config\['topology'\] must be one of"):
        optimize({"alpha": 0.1, "topology": "moebius"})
    with pytest.raises(ValueError, match=r"config\['n'\] must be an int >= 1"):
        optimize({"alpha": 0.1, "n": 0})


def test_world_is_current_in_the_block_only():
    with world(5, fs.topology.ring_graph) as ctx:
        assert fs.size() == 5
    assert ctx.closed and not fs.is_initialized()


# -- the command ------------------------------------------------------------------------------
def spec(tmp_path, **extra):
    data = {
        "grid": {
            "algorithm": ["dgd", "exact_diffusion"],
            "alpha": 0.02,
            "seed": [0, 1],
            "iters": 10,
        },
        "cache": "cache",
        "csv": "rows.csv",
        "runs_csv": "runs.csv",
        "summary": {"metric": "distance", "by": ["algorithm"]},
        "plot": {"metric": "distance", "hue": "algorithm", "path": "distance.png"},
        **extra,
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    return path


def test_the_command_sweeps_a_spec_and_resumes_from_its_cache(tmp_path, capsys):
    from fogsim.experiments import main

    path = spec(tmp_path, stack_seeds=True)
    assert main([str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "4 runs: 4 computed, 0 from the cache, 4 with seeds stacked" in out
    with open(tmp_path / "rows.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    expected = sweep(
        optimize,
        grid(algorithm=["dgd", "exact_diffusion"], alpha=0.02, seed=[0, 1], iters=10),
        progress=False,
    )
    assert len(rows) == len(expected.rows)
    assert [float(r["distance"]) for r in rows] == pytest.approx(
        [r["distance"] for r in expected.rows], rel=1e-12
    )
    assert (tmp_path / "runs.csv").exists() and (tmp_path / "distance.png").stat().st_size
    assert "algorithm=exact_diffusion" in out
    assert main([str(path), "--no-progress"]) == 0
    assert "4 runs: 0 computed, 4 from the cache" in capsys.readouterr().out


def test_the_command_refuses_a_bad_spec(tmp_path, capsys):
    from fogsim.experiments import main

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"grid": {"alpha": []}}))
    assert main([str(bad)]) == 2
    assert "axis 'alpha' has no values" in capsys.readouterr().err
    bad.write_text(json.dumps({"grid": {"alpha": [0.1]}, "jobs": 2}))
    assert main([str(bad)]) == 2
    assert "unknown key 'jobs'" in capsys.readouterr().err


def test_python_dash_m_and_the_fogsim_subcommand_run_a_spec(tmp_path):
    path = spec(tmp_path, plot=None, summary=None)
    for command in (["-m", "fogsim.experiments"], ["-m", "fogsim", "experiments"]):
        done = subprocess.run(
            [sys.executable, *command, str(path), "--no-progress"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert "4 runs:" in done.stdout
    assert isinstance(Results, type)
