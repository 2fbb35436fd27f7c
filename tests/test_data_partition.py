"""fogsim.data's partitioners and report, checked against their definitions.

Statistical checks use fixed seeds and bounds several standard deviations wide.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import fogsim as fs
from fogsim import data

from .environment import ROOT


def balanced_labels(classes: int, per_class: int) -> np.ndarray:
    """Labels 0..classes-1, per_class of each, in a scrambled order."""
    y = np.repeat(np.arange(classes), per_class)
    return np.random.default_rng(1234).permutation(y)


def assert_partition_of(part: data.Partition, n: int) -> None:
    """Every sample 0..n-1 is held by exactly one agent; parts sorted, int64."""
    assert len(part) == part.agents
    everything = np.concatenate(list(part))
    assert everything.dtype == np.int64
    assert np.array_equal(np.sort(everything), np.arange(n))
    for r, idx in enumerate(part):
        assert np.all(np.diff(idx) > 0), f"agent {r}'s indices are not sorted ascending"
        assert np.array_equal(part.of(r), idx)
    assert np.array_equal(part.sizes, [len(idx) for idx in part])
    assert part.n_samples == n


def label_distributions(part: data.Partition, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    classes = int(y.max()) + 1
    counts = np.array([np.bincount(y[idx], minlength=classes) for idx in part])
    return counts, np.bincount(y, minlength=classes) / y.size


def tv_distances(part: data.Partition, y: np.ndarray) -> np.ndarray:
    counts, global_p = label_distributions(part, y)
    with np.errstate(invalid="ignore"):  # empty agents: NaN
        p = counts / counts.sum(axis=1, keepdims=True)
    return 0.5 * np.abs(p - global_p).sum(axis=1)


# -- iid ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, agents", [(10, 3), (100, 100), (1001, 10), (7, 1)])
def test_iid_assigns_every_sample_once_sizes_within_one(n, agents):
    part = data.iid(n, agents, seed=0)
    assert_partition_of(part, n)
    assert part.sizes.max() - part.sizes.min() <= 1
    assert "iid" in part.scheme and f"agents={agents}" in part.scheme


def test_iid_content_is_uniform():
    # Each agent's share of the first half of the samples is Binomial(1000, 1/2)/1000.
    part = data.iid(np.zeros(10_000), 10, seed=3)
    first_half = np.array([np.mean(idx < 5_000) for idx in part])
    assert np.all(np.abs(first_half - 0.5) < 5 * np.sqrt(0.25 / 1000))


def test_iid_accepts_labels_for_their_length():
    assert_partition_of(data.iid(["a", "b", "c", "d"], 2, seed=0), 4)


# -- dirichlet ---------------------------------------------------------------------------------


def test_dirichlet_assigns_every_sample_once():
    y = balanced_labels(10, 300)
    for seed in range(3):
        assert_partition_of(data.dirichlet(y, 20, 0.5, seed), y.size)


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_dirichlet_class_shares_follow_the_beta_marginal(alpha):
    # With 2 agents, agent 0's share of each class is q ~ Dir(alpha, alpha)_0 = Beta(alpha,
    # alpha) (up to the 1/1000 rounding of 1000 samples per class): a KS test over 300 classes.
    y = balanced_labels(300, 1000)
    part = data.dirichlet(y, 2, alpha, seed=11, min_size=0, allow_empty=True)
    counts, _ = label_distributions(part, y)
    shares = counts[0] / 1000
    assert stats.kstest(shares, stats.beta(alpha, alpha).cdf).pvalue > 1e-3


def test_dirichlet_large_alpha_is_nearly_iid():
    y = balanced_labels(10, 1000)
    for seed in range(3):
        tv = tv_distances(data.dirichlet(y, 10, 1e4, seed), y)
        assert tv.max() < 0.06


def test_dirichlet_small_alpha_agents_hold_one_or_two_classes():
    y = balanced_labels(10, 1000)
    for seed in range(3):
        part = data.dirichlet(y, 10, 0.01, seed, min_size=0, allow_empty=True)
        counts, _ = label_distributions(part, y)
        held = counts[counts.sum(axis=1) > 0]
        top2 = np.sort(held, axis=1)[:, -2:].sum(axis=1) / held.sum(axis=1)
        assert top2.mean() > 0.9
        assert tv_distances(part, y)[part.sizes > 0].mean() > 0.6


def test_dirichlet_samples_within_a_class_are_shuffled():
    # Agent i's part of a class is a uniformly random subset: its indices are not the class's
    # lowest ones. Labels in blocks (class k: indices 1000k..1000k+999).
    y = np.repeat(np.arange(4), 1000)
    part = data.dirichlet(y, 4, 1.0, seed=5)
    for idx in part:
        for k in np.unique(y[idx]):
            mine = idx[y[idx] == k] - 1000 * k
            if mine.size >= 50:  # mean of a uniform subset of 0..999: 499.5 +- 289/sqrt(m)
                assert abs(mine.mean() - 499.5) < 5 * 289 / np.sqrt(mine.size)


def test_dirichlet_min_size_is_met_and_retries_are_bounded():
    y = balanced_labels(10, 100)
    part = data.dirichlet(y, 20, 0.3, seed=0, min_size=20)
    assert part.sizes.min() >= 20
    with pytest.raises(ValueError, match="max_retries=5"):
        data.dirichlet(y, 40, 0.01, seed=0, min_size=24, max_retries=5)
    with pytest.raises(ValueError, match="min_size"):
        data.dirichlet(y, 40, 1.0, seed=0, min_size=26)


def test_dirichlet_empty_agent_raises_naming_it_unless_allowed():
    y = balanced_labels(3, 10)
    with pytest.raises(ValueError, match=r"agents? \d+.*allow_empty=True"):
        data.dirichlet(y, 30, 0.01, seed=0, min_size=0)
    part = data.dirichlet(y, 30, 0.01, seed=0, min_size=0, allow_empty=True)
    assert_partition_of(part, y.size)
    assert np.any(part.sizes == 0)


def test_dirichlet_with_sizes_composes_quantity_skew():
    # alpha large: agent i holds about w_i / sum(w) of every class, so of the data.
    y = balanced_labels(10, 2000)
    w = data.size_skew(y, 8, seed=4, kind="lognormal", sigma=1.0).sizes
    part = data.dirichlet(y, 8, 1e4, seed=4, sizes=w)
    assert_partition_of(part, y.size)
    expected = y.size * w / w.sum()
    assert np.all(np.abs(part.sizes - expected) < 0.05 * expected + 20)
    assert tv_distances(part, y).max() < 0.1
    # alpha small: still label skew, and the sizes still follow w on average over seeds.
    totals = np.zeros(8)
    for seed in range(20):
        totals += data.dirichlet(y, 8, 0.5, seed, sizes=w, min_size=0, allow_empty=True).sizes
    assert np.corrcoef(totals, w)[0, 1] > 0.9


# -- pathological ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "classes, agents, m", [(10, 10, 2), (10, 7, 3), (10, 100, 1), (5, 3, 5), (10, 5, 2)]
)
def test_pathological_every_agent_holds_exactly_m_classes(classes, agents, m):
    y = balanced_labels(classes, 211)
    part = data.pathological(y, agents, m, seed=2)
    assert_partition_of(part, y.size)
    counts, _ = label_distributions(part, y)
    assert np.all((counts > 0).sum(axis=1) == m)
    holders = (counts > 0).sum(axis=0)
    assert set(holders) <= {agents * m // classes, -(-agents * m // classes)}
    for k in range(classes):  # each class split evenly among its holders
        shares = counts[counts[:, k] > 0, k]
        assert shares.max() - shares.min() <= 1


def test_pathological_class_sets_are_random_over_agents():
    # 10 agents x 2 of 10 classes: each class has 2 holders, so agents pair up with equal
    # class sets. The agents are in a random order: the pairing changes with the seed.
    y = balanced_labels(10, 20)
    pairings = set()
    for seed in range(10):
        sets = [frozenset(np.unique(y[idx])) for idx in data.pathological(y, 10, 2, seed)]
        pairings.add(frozenset(frozenset(r for r in range(10) if sets[r] == s) for s in sets))
    assert len(pairings) > 5


def test_pathological_raises_when_impossible():
    y = balanced_labels(10, 50)
    with pytest.raises(ValueError, match="classes_per_agent"):
        data.pathological(y, 5, 11, seed=0)
    with pytest.raises(ValueError, match="classes_per_agent"):
        data.pathological(y, 4, 2, seed=0)  # 8 < 10 classes
    with pytest.raises(ValueError, match="class .* has 50 samples for"):
        data.pathological(y, 600, 1, seed=0)  # 60 holders per class, 50 samples


# -- size skew ---------------------------------------------------------------------------------


def test_size_skew_lognormal_log_spread_is_sigma():
    spreads = []
    for sigma in (0.25, 0.5, 1.0):
        part = data.size_skew(10**6, 400, seed=6, kind="lognormal", sigma=sigma)
        assert_partition_of(part, 10**6)
        spread = np.log(part.sizes).std()
        # sample std of 400 normals: relative error ~ 1/sqrt(800) = 3.5%
        assert abs(spread - sigma) < 0.15 * sigma
        spreads.append(spread)
    assert spreads[0] < spreads[1] < spreads[2]
    # and the log sizes are normal
    logs = np.log(data.size_skew(10**6, 400, seed=7, sigma=0.5).sizes)
    assert stats.normaltest(logs).pvalue > 1e-3


@pytest.mark.parametrize("exponent", [2.5, 4.0])
def test_size_skew_power_law_exponent_is_recovered(exponent):
    # Maximum-likelihood exponent of a power law above its minimum:
    # 1 + n / sum log(s_i / s_min) (Clauset, Shalizi & Newman 2009), sd ~ (a - 1)/sqrt(n).
    part = data.size_skew(10**6, 500, seed=8, kind="power", exponent=exponent)
    s = part.sizes.astype(float)
    estimate = 1 + s.size / np.log(s / s.min()).sum()
    assert abs(estimate - exponent) < 5 * (exponent - 1) / np.sqrt(s.size)


def test_size_skew_min_size_and_iid_content():
    y = balanced_labels(5, 2000)
    part = data.size_skew(y, 50, seed=1, kind="power", exponent=1.5, min_size=30)
    assert_partition_of(part, y.size)
    assert part.sizes.min() >= 30
    # sigma = 0: equal weights, sizes within one
    flat = data.size_skew(1000, 7, seed=1, sigma=0.0)
    assert flat.sizes.max() - flat.sizes.min() <= 1


# -- seeds and layout --------------------------------------------------------------------------

SCHEMES = {
    "iid": lambda y, seed: data.iid(y, 8, seed),
    "dirichlet": lambda y, seed: data.dirichlet(y, 8, 0.5, seed),
    "pathological": lambda y, seed: data.pathological(y, 8, 2, seed),
    "size_skew": lambda y, seed: data.size_skew(y, 8, seed, kind="power"),
}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_same_seed_same_split_other_seed_other_split(scheme):
    y = balanced_labels(10, 100)
    a, b, c = (SCHEMES[scheme](y, s) for s in (5, 5, 6))
    assert all(np.array_equal(x, z) for x, z in zip(a, b, strict=True))
    assert not all(np.array_equal(x, z) for x, z in zip(a, c, strict=True))


def test_each_process_takes_its_agents_by_rank():
    y = balanced_labels(10, 100)
    part = data.dirichlet(y, 4, 0.5, seed=3)
    fs.init(size=4)
    try:
        mine = part[fs.rank()]  # simulated: every agent's, in rank order
    finally:
        fs.shutdown()
    assert len(mine) == 4 and all(np.array_equal(m, part[r]) for r, m in enumerate(mine))


def test_spmd_agents_compute_the_same_split_and_take_their_own():
    import fogsim.spmd

    y = balanced_labels(10, 100)

    def main():
        fs.init()
        mine = data.dirichlet(y, fs.size(), 0.5, seed=3)[fs.rank()]  # one array per agent
        counts = np.bincount(y[mine], minlength=10)
        return mine, fs.allreduce(counts, average=False)

    results = fogsim.spmd.run(main, size=4, timeout=60)
    whole = data.dirichlet(y, 4, 0.5, seed=3)
    for r, (mine, total) in enumerate(results):
        assert np.array_equal(mine, whole[r])
        assert np.array_equal(total, np.bincount(y))  # every sample counted once


def test_split_does_not_depend_on_the_world():
    y = balanced_labels(10, 100)
    before = data.dirichlet(y, 4, 0.5, seed=3)
    fs.init(size=4)
    try:
        during = data.dirichlet(y, 4, 0.5, seed=3)
    finally:
        fs.shutdown()
    assert all(np.array_equal(x, z) for x, z in zip(before, during, strict=True))


# -- Partition ---------------------------------------------------------------------------------


def test_partition_from_indices():
    part = data.Partition([[4, 0], np.array([2], dtype=np.int32), []], 6, allow_empty=True)
    assert [list(p) for p in part] == [[0, 4], [2], []]
    assert part[-1].dtype == np.int64 and part.of(1)[0] == 2
    assert list(part.sizes) == [2, 1, 0]
    assert list(part.owner()) == [0, -1, 1, -1, 0, -1]
    assert [list(p) for p in part[np.array([2, 0])]] == [[], [0, 4]]
    assert list(part[np.int64(1)]) == [2] and len(part[1:]) == 2
    with pytest.raises(TypeError, match="index"):
        part[np.array([0.5])]
    with pytest.raises(ValueError):
        part[0][0] = 3  # read-only
    with pytest.raises(IndexError, match="agent"):
        part.of(3)
    with pytest.raises(ValueError, match="agent 2"):
        data.Partition([[0], [1], []], 3)
    with pytest.raises(ValueError, match="sample 1 2 times"):
        data.Partition([[0, 1], [1]], 3)
    with pytest.raises(ValueError, match=r"indices\[1\]"):
        data.Partition([[0], [3]], 3)
    with pytest.raises(TypeError, match=r"indices\[0\]"):
        data.Partition([[0.5]], 3)


# -- report ------------------------------------------------------------------------------------


def test_report_matches_the_definitions():
    y = balanced_labels(6, 200)
    part = data.dirichlet(y, 9, 0.3, seed=2)
    rep = part.report(y)
    counts, global_p = label_distributions(part, y)
    assert np.array_equal(rep.counts, counts)
    assert np.array_equal(rep.sizes, part.sizes)
    assert np.allclose(rep.global_distribution, global_p)
    tv = tv_distances(part, y)
    assert np.allclose(rep.tv, tv)
    assert rep.mean_tv == pytest.approx(tv.mean())
    assert np.array_equal(rep.classes_per_agent, (counts > 0).sum(axis=1))
    assert rep.mean_classes == pytest.approx((counts > 0).sum(axis=1).mean())
    text = rep.summary()
    assert f"{tv.mean():.3f}" in text and "9 agents" in text
    assert "empty" not in text


def test_report_leaves_empty_agents_out_and_says_so():
    y = np.array([0, 1, 1, 2])
    part = data.Partition([[0, 1], [], [2, 3]], 4, allow_empty=True)
    rep = part.report(y)
    assert np.isnan(rep.tv[1]) and list(rep.empty) == [1]
    # agent 0: (1/2, 1/2, 0) vs (1/4, 1/2, 1/4): TV 1/4; agent 2: (0, 1/2, 1/2): TV 1/4
    assert rep.tv[0] == pytest.approx(0.25) and rep.tv[2] == pytest.approx(0.25)
    assert rep.mean_tv == pytest.approx(0.25)
    assert rep.mean_classes == pytest.approx(2.0)
    assert "empty" in rep.summary() and str(rep) == rep.summary()
    assert "1 empty" in repr(rep) and "mean TV 0.250" in repr(rep)
    with pytest.raises(ValueError, match="labels"):
        part.report(y[:3])


def test_report_plot_bars_and_heatmap():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = balanced_labels(4, 100)
    ax = data.dirichlet(y, 5, 1.0, seed=0).report(y).plot()
    assert len(ax.patches) == 5 * 4  # one bar segment per agent and class
    heights = np.array([p.get_height() for p in ax.patches]).reshape(4, 5)
    assert np.allclose(heights.sum(axis=0), 1.0)
    ax2 = data.iid(y, 100, seed=0).report(y).plot()
    assert len(ax2.images) == 1 and ax2.images[0].get_array().shape == (4, 100)
    with pytest.raises(ValueError, match="kind"):
        data.iid(y, 2, seed=0).report(y).plot(kind="pie")
    plt.close("all")


# -- bad input ---------------------------------------------------------------------------------

Y = balanced_labels(4, 10)


@pytest.mark.parametrize(
    "call, error, name",
    [
        (lambda: data.dirichlet(Y, 4, 0.0, 0), ValueError, "alpha"),
        (lambda: data.dirichlet(Y, 4, -1.0, 0), ValueError, "alpha"),
        (lambda: data.dirichlet(Y, 4, float("nan"), 0), ValueError, "alpha"),
        (lambda: data.dirichlet(Y, 4, "1", 0), TypeError, "alpha"),
        (lambda: data.dirichlet(Y, 0, 1.0, 0), ValueError, "agents"),
        (lambda: data.iid(Y, 0, 0), ValueError, "agents"),
        (lambda: data.iid(Y, 2.0, 0), TypeError, "agents"),
        (lambda: data.iid(Y, 41, 0), ValueError, "agents"),
        (lambda: data.iid(Y, 2, -1), ValueError, "seed"),
        (lambda: data.iid(Y, 2, 1.5), ValueError, "seed"),
        (lambda: data.iid(np.zeros((4, 2)), 2, 0), ValueError, "n_samples_or_labels"),
        (lambda: data.iid(-3, 2, 0), ValueError, "n_samples_or_labels"),
        (lambda: data.dirichlet(Y + 0.5, 2, 1.0, 0), ValueError, "labels"),
        (lambda: data.dirichlet(["a", "b"], 2, 1.0, 0), TypeError, "labels"),
        (lambda: data.dirichlet("ab", 2, 1.0, 0), TypeError, "labels"),
        (lambda: data.dirichlet(Y - 1, 2, 1.0, 0), ValueError, "labels"),
        (lambda: data.dirichlet(Y.reshape(2, -1), 2, 1.0, 0), ValueError, "labels"),
        (lambda: data.dirichlet(Y, 2, 1.0, 0, sizes=[1.0]), ValueError, "sizes"),
        (lambda: data.dirichlet(Y, 2, 1.0, 0, sizes=[1.0, -1.0]), ValueError, "sizes"),
        (lambda: data.dirichlet(Y, 2, 1.0, 0, min_size=-1), ValueError, "min_size"),
        (lambda: data.pathological(Y, 2, 0, 0), ValueError, "classes_per_agent"),
        (lambda: data.pathological(Y, 2, 5, 0), ValueError, "classes_per_agent"),
        (lambda: data.pathological(Y.astype(float) + 0.1, 2, 2, 0), ValueError, "labels"),
        (lambda: data.size_skew(Y, 2, 0, kind="zipf"), ValueError, "kind"),
        (lambda: data.size_skew(Y, 2, 0, sigma=-1.0), ValueError, "sigma"),
        (lambda: data.size_skew(Y, 2, 0, kind="power", exponent=1.0), ValueError, "exponent"),
        (lambda: data.size_skew(Y, 5, 0, min_size=9), ValueError, "min_size"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_integral_float_labels_are_accepted():
    a = data.dirichlet(Y.astype(np.float64), 3, 1.0, seed=0)
    b = data.dirichlet(Y, 3, 1.0, seed=0)
    assert all(np.array_equal(x, z) for x, z in zip(a, b, strict=True))


def test_import_fogsim_data_imports_no_heavy_library():
    code = (
        "import sys, fogsim.data; "
        "print(sorted(m for m in ('sklearn', 'torch', 'matplotlib', 'datasets', "
        "'flwr_datasets', 'scipy') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"
