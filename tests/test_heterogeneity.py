"""Heterogeneous data (``fogsim.demos.heterogeneity``, ``examples/heterogeneity.py``, notebook
08): the two published effects hold on the split digits.

* Decentralized gradient descent with a constant step stops short of the optimum, and the
  more skewed the split the farther (Yuan, Ling and Yin 2016); gradient tracking and exact
  diffusion reach the optimum whatever the split.
* Under strong label skew decentralized SGD on a ring trails the fully connected graph.

The optimum here is solved in the test from the agents' data (the normal equations of
the ridge problem), not taken from fogsim.
"""

from __future__ import annotations

import numpy as np
import pytest

from fogsim.demos import heterogeneity as H
from tests import _jobs
from tests.example_output import table

pytest.importorskip("sklearn", reason="the digits ship with scikit-learn (the dev extra)")


def test_the_split_and_the_runs_follow_their_configuration():
    features, labels = H.digits()
    assert features.shape == (1797, 62) and np.all(features[:, -1] == 1)
    part = H.split(labels, 0.1, seed=3)
    assert len(part) == H.AGENTS and sorted(np.concatenate(list(part))) == list(range(1797))
    with pytest.raises(ValueError, match="algorithm"):
        H.optimum_run({"algorithm": "adam", "alpha": 1.0, "seed": 0})
    with pytest.raises(ValueError, match="topology"):
        H.dsgd_run({"topology": "star", "alpha": 1.0, "seed": 0})
    with pytest.raises(ValueError, match="unknown keys"):
        H.dsgd_run({"topology": "ring", "alpha": 1.0, "seed": 0, "momentum": 0.9})


def test_dgds_floor_grows_with_the_skew_and_the_exact_methods_reach_the_optimum():
    floors = []
    for alpha in (0.1, 10.0):
        dgd = H.optimum_run({"algorithm": "dgd", "alpha": alpha, "seed": 1})
        floors.append(dgd["distance"][-1])
        for exact in ("gradient_tracking", "exact_diffusion"):
            run = H.optimum_run({"algorithm": exact, "alpha": alpha, "seed": 1})
            assert run["distance"][-1] < 1e-8, (exact, alpha)
    assert floors[0] > 2 * floors[1] > 0.02  # far from x*, farther with the skew


def test_the_optimum_is_the_ridge_problem_over_all_the_digits():
    """Every sample in some agent's rows and ridge ||x||^2 on each of the 16 agents: x*
    solves (X^T X + 16 ridge I) x = X^T t whatever the split (solved here)."""
    features, labels = H.digits()
    target = np.where(labels % 2 == 1, 1.0, -1.0)
    ridge = H.OPTIMUM["ridge"] * H.AGENTS
    x_star = np.linalg.solve(features.T @ features + ridge * np.eye(62), features.T @ target)
    for alpha, seed in ((0.1, 0), (10.0, 4)):
        run = H.optimum_run({"algorithm": "dgd", "alpha": alpha, "seed": seed, "iters": 1})
        assert run["optimum"] == pytest.approx(np.linalg.norm(x_star), rel=1e-10)
        assert run["distance"][0] == pytest.approx(1.0)  # x_0 = 0 on every agent


def test_decentralized_sgd_on_a_ring_trails_the_full_graph_under_skew():
    gaps = []
    for seed in range(2):
        ring = H.dsgd_run({"topology": "ring", "alpha": 0.1, "seed": seed})
        full = H.dsgd_run({"topology": "full", "alpha": 0.1, "seed": seed})
        assert len(ring["accuracy"]) == H.SGD["steps"] + 1
        assert full["accuracy"][-1] > 0.9 and ring["worst"] <= ring["accuracy"][-1]
        gaps.append(full["accuracy"][-1] - ring["accuracy"][-1])
    assert np.mean(gaps) > 0.005


def test_the_example_prints_both_tables_and_says_what_they_show():
    job = _jobs.python(
        str(_jobs.ROOT / "examples" / "heterogeneity.py"),
        *("--seeds", "1", "--iters", "600", "--steps", "30"),
        timeout=300,
    ).check()
    printed = table(job.stdout)
    assert printed.header.split() == "alpha label_TV dgd_mean std gt_mean std ed_mean std".split()
    alphas, tv, dgd = (np.array([r[k] for r in printed.rows]) for k in (0, 1, 2))
    assert list(alphas) == [0.1, 1.0, 10.0]
    assert np.all(np.diff(tv) < 0) and np.all(np.diff(dgd) < 0)  # less skew, lower floor
    exact = np.array([[r[4], r[6]] for r in printed.rows])
    assert np.all(exact < dgd[:, None] / 10)
    assert "farther the more skewed the split" in printed.last
    assert "decentralized SGD's accuracy fell by" in printed.last
