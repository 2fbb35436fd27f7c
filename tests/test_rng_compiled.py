"""``fs.rng()``'s compiled draws in simulation: the numbers and states of each agent's own
numpy ``Generator``, whichever path runs; and the fish school, which draws through it."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest

import fogsim as fs
from fogsim import _rng
from fogsim._rng import StackedGenerator
from fogsim.demos import fish_school as fish

pytest.importorskip("numba")

BIT_GENERATORS = [np.random.PCG64, np.random.MT19937, np.random.Philox, np.random.SFC64]


@pytest.fixture
def compiled(monkeypatch):
    """Every float64 standard_normal/random of a StackedGenerator runs compiled."""
    monkeypatch.setattr(_rng, "_COMPILE_AFTER", 0)


@pytest.fixture(autouse=True)
def no_world():
    fs.shutdown()
    yield
    fs.shutdown()


def generators(bit_generator, n: int = 300, seed: int = 4) -> list[np.random.Generator]:
    return [np.random.Generator(bit_generator([seed, r])) for r in range(n)]


@pytest.mark.parametrize("bit_generator", BIT_GENERATORS, ids=lambda b: b.__name__)
@pytest.mark.parametrize("method", ["standard_normal", "random"])
@pytest.mark.parametrize("size", [None, (), 3, (2, 5), [4], (0,), np.int64(2)])
def test_compiled_draws_are_each_generators_own(compiled, bit_generator, method, size):
    stacked, reference = StackedGenerator(generators(bit_generator)), generators(bit_generator)
    for _ in range(3):  # the states after each call continue the same stream
        got = getattr(stacked, method)(size)
        want = np.stack([np.asarray(getattr(g, method)(size)) for g in reference])
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    for mine, theirs in zip(stacked.generators, reference, strict=True):
        assert mine.integers(1 << 62) == theirs.integers(1 << 62)


def test_many_normal_draws_cover_the_ziggurats_rare_branches(compiled):
    # 1 in ~100 draws takes the rejection branch and 1 in ~10^4 the tail: 10^6 draws see both.
    stacked, reference = (
        StackedGenerator(generators(np.random.PCG64, 100)),
        generators(np.random.PCG64, 100),
    )
    got = stacked.standard_normal(10_000)
    np.testing.assert_array_equal(got, np.stack([g.standard_normal(10_000) for g in reference]))
    assert np.abs(got).max() > 3.6541528853610088  # the ziggurat's tail was drawn


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((2,), {"dtype": np.float32}),
        ((), {"size": 3, "dtype": "float64"}),
        ((3, float), {}),
        ((), {"size": (2, 2), "dtype": np.dtype("f8")}),
    ],
)
def test_dtype_arguments_give_numpys_result(compiled, args, kwargs):
    stacked, reference = (
        StackedGenerator(generators(np.random.PCG64, 20)),
        generators(np.random.PCG64, 20),
    )
    for method in ("standard_normal", "random"):
        got = getattr(stacked, method)(*args, **kwargs)
        want = np.stack([getattr(g, method)(*args, **kwargs) for g in reference])
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_out_and_bad_arguments_behave_as_numpy(compiled):
    stacked = StackedGenerator(generators(np.random.PCG64, 4))
    with pytest.raises(ValueError, match="negative"):
        stacked.standard_normal(-1)
    with pytest.raises(TypeError):
        stacked.random(3, bogus=1)
    with pytest.raises(TypeError):
        stacked.standard_normal(size="3")
    out = np.empty(2)
    assert stacked.random(out=out).shape == (4, 2)


def test_a_copy_draws_from_its_own_generators(compiled):
    stacked = StackedGenerator(generators(np.random.PCG64, 50))
    stacked.standard_normal(2)  # makes and keeps the addresses of stacked's generators
    twin = copy.deepcopy(stacked)
    np.testing.assert_array_equal(twin.standard_normal(3), stacked.standard_normal(3))


def test_fs_rng_switches_to_compiled_draws_without_changing_a_number(monkeypatch):
    monkeypatch.setattr(_rng, "_COMPILE_AFTER", 64)  # the first 4 calls of 16 agents in Python
    fs.init(size=16, seed=5)
    draws = np.stack([fs.rng().standard_normal(3) for _ in range(8)], axis=1)
    for r in range(16):
        g = np.random.default_rng([5, r])
        np.testing.assert_array_equal(draws[r], np.stack([g.standard_normal(3) for _ in range(8)]))


def test_fish_school_is_the_same_with_compiled_draws(monkeypatch):
    kwargs = {"n": 120, "steps": 12, "mode": "encircle", "switch_step": 6, "seed": 2}
    monkeypatch.setattr(_rng, "_COMPILE_AFTER", 1 << 62)
    python = fish.simulate(**kwargs)
    monkeypatch.setattr(_rng, "_COMPILE_AFTER", 0)
    compiled = fish.simulate(**kwargs)
    np.testing.assert_array_equal(compiled.trajectories(), python.trajectories())
    np.testing.assert_array_equal(compiled.estimates_alone, python.estimates_alone)


SMALL_RUNS = """
import sys
import numpy as np
import fogsim as fs
from fogsim import faults
from fogsim.demos import fish_school as fish
fs.init(size=64, seed=0)
for _ in range(100):
    fs.rng().standard_normal(3)
faults.inject(noise=0.1, link_drop=0.1)
x = np.ones((64, 4))
for _ in range(100):
    x = fs.neighbor_allreduce(x)
fish.simulate(n=100, steps=30)
assert 'numba' not in sys.modules, 'numba imported'
"""


def test_small_runs_do_not_import_numba():
    run = subprocess.run([sys.executable, "-c", SMALL_RUNS], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
