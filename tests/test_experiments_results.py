"""fogsim.experiments' results: the tidy tables (CSV, pandas), summaries over seeds, plots.

The runs are those of ``test_experiments.py`` (module-level, importable by workers); every
number is checked against the same runs done by hand.
"""

from __future__ import annotations

import csv
import sys
import types

import numpy as np
import pytest

import fogsim as fs
from fogsim.experiments import grid, sweep
from tests.test_experiments import CONFIGS, ITERS, by_hand, dgd_run, scalars_run


@pytest.fixture(autouse=True)
def no_world_left():
    yield
    assert not fs.is_initialized()


# -- tables ----------------------------------------------------------------------------------
def test_to_csv_round_trips(tmp_path):
    results = sweep(dgd_run, CONFIGS, progress=False)
    results.to_csv(tmp_path / "rows.csv")
    with open(tmp_path / "rows.csv", newline="") as fh:
        read = list(csv.DictReader(fh))
    assert len(read) == len(results.rows)
    for got, row in zip(read, results.rows, strict=True):
        assert list(got) == list(row)
        assert int(got["seed"]) == row["seed"] and int(got["iteration"]) == row["iteration"]
        for key in ("alpha", *results.metrics):
            assert float(got[key]) == row[key]
    results.to_csv(tmp_path / "runs.csv", what="runs")
    with open(tmp_path / "runs.csv", newline="") as fh:
        runs = list(csv.DictReader(fh))
    assert [float(r["distance"]) for r in runs] == [r["distance"] for r in results.runs]


def test_scalars_and_missing_values_in_the_tables(tmp_path):
    results = sweep(scalars_run, grid(a=[1.0, 2.0], seed=[0, 1]), progress=False)
    assert results.metrics == ["loss"]
    assert results.runs[3] == {"a": 2.0, "seed": 1, "loss": 9.0, "best": 2.0, "tag": "x"}
    assert [r["loss"] for r in results.rows[:5]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert results.summary("best", by=["a"])[1]["mean"] == 2.0


def test_to_pandas_builds_a_dataframe_from_the_rows(monkeypatch):
    got = {}

    class DataFrame:
        @classmethod
        def from_records(cls, records):
            got["records"] = records
            return "frame"

    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(DataFrame=DataFrame))
    results = sweep(scalars_run, grid(a=[1.0], seed=[0]), progress=False)
    assert results.to_pandas() == "frame" and got["records"] == results.rows
    assert results.to_pandas("runs") == "frame" and got["records"] == results.runs
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        results.to_pandas()
    with pytest.raises(ValueError, match="what must be 'rows' or 'runs'"):
        results.to_csv("unused.csv", what="cols")


def test_summary_is_the_mean_and_std_over_seeds():
    results = sweep(dgd_run, CONFIGS, progress=False)
    summary = results.summary("distance")
    assert [s["alpha"] for s in summary] == [0.02, 0.05] and "seed" not in summary[0]
    for entry in summary:
        finals = [by_hand(entry["alpha"], s).history["distance"][-1] for s in (0, 1, 2)]
        mean = sum(finals) / 3
        std = (sum((f - mean) ** 2 for f in finals) / 3) ** 0.5
        assert entry["count"] == 3
        assert entry["mean"] == pytest.approx(mean, rel=1e-14)
        assert entry["std"] == pytest.approx(std, rel=1e-12)
        assert (entry["min"], entry["max"]) == (min(finals), max(finals))
    at5 = results.summary("distance", by=["seed"], at=5)
    assert at5[0]["mean"] == pytest.approx(
        (by_hand(0.02, 0).history["distance"][5] + by_hand(0.05, 0).history["distance"][5]) / 2
    )
    with pytest.raises(ValueError, match="by: no axis 'beta'"):
        results.summary("distance", by=["beta"])
    with pytest.raises(ValueError, match="metric: no 'loss'"):
        results.summary("loss")


def test_select_narrows_the_runs():
    results = sweep(dgd_run, CONFIGS, progress=False)
    chosen = results.select(alpha=0.05)
    assert chosen.configs == CONFIGS[3:]
    assert results.select(alpha=0.05, seed=1).runs == [results.runs[4]]
    with pytest.raises(ValueError, match="no axis 'beta'"):
        results.select(beta=1)


# -- plots ------------------------------------------------------------------------------------
def test_plot_draws_one_mean_line_and_band_per_hue_value():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    results = sweep(dgd_run, CONFIGS, progress=False)
    ax = results.plot("distance", hue="alpha")
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["alpha=0.02", "alpha=0.05"]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    mean = np.mean([by_hand(0.05, s).history["distance"] for s in (0, 1, 2)], axis=0)
    np.testing.assert_allclose(lines[1].get_ydata(), mean, rtol=1e-14)
    np.testing.assert_array_equal(lines[1].get_xdata(), np.arange(ITERS + 1))
    assert ax.get_yscale() == "log"
    plt.close(ax.figure)

    ax = results.plot("distance", x="bytes", hue="alpha", band="minmax", logy=False)
    np.testing.assert_array_equal(lines[0].get_xdata(), np.arange(ITERS + 1))
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), by_hand(0.02, 0).history["bytes"])
    assert ax.get_yscale() == "linear"
    plt.close(ax.figure)

    panels = results.plot("consensus_error", col="alpha", band=None)
    assert len(panels) == 2 and [len(p.get_lines()) for p in panels] == [1, 1]
    assert not [c for p in panels for c in p.collections if isinstance(c, PolyCollection)]
    plt.close(panels[0].figure)

    _, mine = plt.subplots()
    assert results.select(alpha=0.02).plot("distance", ax=mine) is mine
    assert len(mine.get_lines()) == 1
    plt.close(mine.figure)


def test_plot_refuses_what_it_cannot_draw():
    results = sweep(dgd_run, CONFIGS, progress=False)
    with pytest.raises(ValueError, match="axis 'alpha' holds 2 values"):
        results.plot("distance")
    with pytest.raises(ValueError, match="x must be 'iteration', 'bytes' or 'time'"):
        results.plot("distance", x="seconds", hue="alpha")
    with pytest.raises(ValueError, match="x: the runs recorded no 'time'"):
        results.plot("distance", x="time", hue="alpha")
    with pytest.raises(ValueError, match="band must be"):
        results.plot("distance", hue="alpha", band="iqr")
    with pytest.raises(ValueError, match="hue: no axis 'beta'"):
        results.plot("distance", hue="beta")
    with pytest.raises(ValueError, match="metric: no per-iteration 'loss'"):
        results.plot("loss", hue="alpha")
