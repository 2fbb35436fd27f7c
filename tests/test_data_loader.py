"""fogsim.data.AgentLoader: per-agent batches, the same samples in every mode.

The data are mostly ``np.arange(N)`` (each sample is its own index), so a batch shows the
indices drawn. The expected orders are computed from the documented definition by a
pure-Python reference (Python ints, no numpy, no fogsim), and the modes are compared with
the in-process simulation: SPMD threads here, MPI ranks and a sharded simulation in one
launch each of this file as the job::

    fogrun -np 4 python -m tests.test_data_loader OUT.json
    fogrun --sim --shards 2 -np 8 python -m tests.test_data_loader OUT.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

import fogsim as fs
import fogsim.spmd as spmd
from fogsim.data import AgentLoader, _loader
from tests import _jobs

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


@pytest.fixture(autouse=True)
def _no_world_left():
    yield
    fs.shutdown()


# -- the documented definition, in Python ints --------------------------------------------------
def _out(state: int, i: int) -> int:
    z = (state + (i + 1) * GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_batches(seed, r, shard, b, steps, mode="epochs"):
    """Agent r's first ``steps`` batches as the loader's docstring defines them."""
    shard, m = [int(i) for i in shard], len(shard)
    if mode == "replacement":
        a = _out(_out(seed, 1), r)
        return [[shard[(_out(_out(a, t), k) * m) >> 64] for k in range(b)] for t in range(steps)]
    a = _out(_out(seed, 0), r)
    stream: list[int] = []
    e = 0
    while len(stream) < steps * b:
        s = _out(a, e)
        stream += [shard[p] for p in sorted(range(m), key=lambda p: (_out(s, p), p))]
        e += 1
    return [stream[t * b : (t + 1) * b] for t in range(steps)]


def draw(loader, steps):
    """The next ``steps`` batches, stacked along a step axis."""
    return np.stack([np.asarray(loader.next()) for _ in range(steps)])


UNEQUAL = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 50), np.array([50])]


# -- the definition -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["epochs", "replacement"])
@pytest.mark.parametrize("b", [1, 4, 7])
def test_batches_follow_the_documented_definition(mode, b):
    fs.init(size=4)
    data = np.arange(60)
    got = draw(AgentLoader(data, UNEQUAL, b, seed=11, mode=mode), 9)
    assert got.shape == (9, 4, b)
    for r, shard in enumerate(UNEQUAL):
        want = reference_batches(11, r, shard, b, 9, mode)
        np.testing.assert_array_equal(got[:, r], want)


def test_every_sample_once_per_epoch_with_batches_wrapping_into_the_next_epoch():
    fs.init(size=4)
    b, steps = 4, 30
    got = draw(AgentLoader(np.arange(60), UNEQUAL, b, seed=3), steps)
    for r, shard in enumerate(UNEQUAL):
        stream = got[:, r].ravel()  # every batch full: b samples at every step
        m = len(shard)
        for e in range(len(stream) // m):
            np.testing.assert_array_equal(np.sort(stream[e * m : (e + 1) * m]), np.sort(shard))
        assert set(stream) <= set(shard.tolist())


def test_replacement_draws_from_the_own_shard_only_and_covers_it():
    fs.init(size=4)
    got = draw(AgentLoader(np.arange(60), UNEQUAL, 8, seed=3, mode="replacement"), 200)
    for r, shard in enumerate(UNEQUAL):
        drawn = got[:, r].ravel()
        assert set(drawn.tolist()) == set(shard.tolist())  # 1,600 draws: every one seen
        counts = np.bincount(drawn - shard.min(), minlength=len(shard))
        expected = len(drawn) / len(shard)
        assert np.all(np.abs(counts - expected) < 6 * math.sqrt(expected))


def test_agents_and_epochs_are_shuffled_differently():
    fs.init(size=3)
    shards = [np.arange(64)] * 3  # the same shard: only the agent's own order differs
    got = draw(AgentLoader(np.arange(64), shards, 16, seed=0), 8)
    epochs = got.transpose(1, 0, 2).reshape(3, 2, 64)  # agent, epoch, order
    assert not np.array_equal(epochs[0, 0], epochs[1, 0])
    assert not np.array_equal(epochs[0, 0], epochs[2, 0])
    assert not np.array_equal(epochs[0, 0], epochs[0, 1])
    assert not np.array_equal(epochs[0, 0], np.arange(64))


def test_the_same_seed_reproduces_and_another_seed_does_not():
    fs.init(size=4)
    first = draw(AgentLoader(np.arange(60), UNEQUAL, 5, seed=7), 6)
    again = draw(AgentLoader(np.arange(60), UNEQUAL, 5, seed=7), 6)
    other = draw(AgentLoader(np.arange(60), UNEQUAL, 5, seed=8), 6)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_the_world_seed_is_the_default():
    fs.init(size=4, seed=5)
    default = draw(AgentLoader(np.arange(60), UNEQUAL, 5), 4)
    np.testing.assert_array_equal(default, draw(AgentLoader(np.arange(60), UNEQUAL, 5, seed=5), 4))


@pytest.mark.parametrize("mode", ["epochs", "replacement"])
def test_an_agents_batches_depend_neither_on_other_shards_nor_on_the_world_size(mode):
    fs.init(size=4)
    mine = draw(AgentLoader(np.arange(60), UNEQUAL, 3, seed=2, mode=mode), 12)[:, 1]
    others = [np.arange(40, 60), UNEQUAL[1], np.arange(5), np.arange(30), np.arange(2)]
    fs.init(size=5)
    moved = draw(AgentLoader(np.arange(60), others, 3, seed=2, mode=mode), 12)[:, 1]
    np.testing.assert_array_equal(mine, moved)


def test_compiled_walk_gives_the_same_batches(monkeypatch):
    fs.init(size=4)
    shards = [*UNEQUAL[:3], np.arange(50, 60)]
    want = draw(AgentLoader(np.arange(60), shards, 6, seed=4), 25)
    monkeypatch.setattr(_loader, "_COMPILE_AFTER", 0)
    loader = AgentLoader(np.arange(60), shards, 6, seed=4)
    np.testing.assert_array_equal(draw(loader, 25), want)
    loader.step = 3  # seeking works the same for the compiled walk
    np.testing.assert_array_equal(draw(loader, 5), want[3:8])


# -- the stream: passes, steps, resuming ------------------------------------------------------
def test_len_is_one_epoch_of_the_largest_shard_and_passes_continue_the_stream():
    fs.init(size=4)
    loader = AgentLoader(np.arange(60), UNEQUAL, 5, seed=1)
    assert len(loader) == math.ceil(37 / 5)
    first, second = list(loader), list(loader)
    assert len(first) == len(second) == len(loader) and loader.step == 2 * len(loader)
    both = np.stack(first + second)
    np.testing.assert_array_equal(both, draw(AgentLoader(np.arange(60), UNEQUAL, 5, seed=1), 16))
    assert len(AgentLoader(np.arange(60), UNEQUAL, 5, steps=3)) == 3


@pytest.mark.parametrize("mode", ["epochs", "replacement"])
def test_setting_step_resumes_the_stream(mode):
    fs.init(size=4)
    whole = draw(AgentLoader(np.arange(60), UNEQUAL, 4, seed=9, mode=mode), 20)
    loader = AgentLoader(np.arange(60), UNEQUAL, 4, seed=9, mode=mode)
    for t in (13, 0, 7):
        loader.step = t
        np.testing.assert_array_equal(draw(loader, 20 - t), whole[t:])


def test_epoch_counts_each_agents_whole_epochs():
    fs.init(size=4)
    loader = AgentLoader(np.arange(60), UNEQUAL, 4, seed=9)
    draw(loader, 5)
    np.testing.assert_array_equal(loader.epoch, [20 // 10, 20 // 3, 20 // 37, 20 // 1])
    np.testing.assert_array_equal(loader.shard_sizes, [10, 3, 37, 1])


# -- data kinds ---------------------------------------------------------------------------------
def test_stacked_shapes_of_arrays_tuples_and_tensors():
    n, b = 4, 3
    fs.init(size=n)
    X = np.arange(60 * 5, dtype=np.float32).reshape(60, 5)
    y = np.arange(60)
    shards = np.array_split(np.arange(60), n)
    idx = AgentLoader(y, shards, b, seed=0).next()
    assert idx.shape == (n, b)
    xb, yb = AgentLoader((X, y), shards, b, seed=0).next()
    assert xb.shape == (n, b, 5) and yb.shape == (n, b)
    np.testing.assert_array_equal(xb, X[idx])
    np.testing.assert_array_equal(yb, idx)
    t = AgentLoader(torch.from_numpy(X), shards, b, seed=0).next()
    assert isinstance(t, torch.Tensor) and t.shape == (n, b, 5)
    np.testing.assert_array_equal(t.numpy(), X[idx])
    assert isinstance(AgentLoader([X, y], shards, b).next(), list)


class Squares(Dataset):
    """A map-style Dataset: sample i is ``(tensor [i, i*i], label i % 3)``."""

    def __len__(self):
        return 30

    def __getitem__(self, i):
        return torch.tensor([float(i), float(i * i)]), i % 3


def test_torch_datasets_give_the_samples_a_dataloader_would():
    fs.init(size=3)
    shards = np.array_split(np.arange(30), 3)
    idx = draw(AgentLoader(np.arange(30), shards, 4, seed=6), 3)
    ds = Squares()
    for t, (xb, yb) in enumerate(
        AgentLoader(ds, shards, 4, seed=6, steps=3)
    ):  # default_collate turns the sample's tuple into a list of two tensors
        assert xb.shape == (3, 4, 2) and yb.shape == (3, 4) and yb.dtype == torch.int64
        np.testing.assert_array_equal(xb[..., 0].numpy(), idx[t])
        np.testing.assert_array_equal(yb.numpy(), idx[t] % 3)
    X = torch.arange(60.0).reshape(30, 2)
    tds = TensorDataset(X, torch.arange(30))
    xb, yb = AgentLoader(tds, shards, 4, seed=6).next()
    np.testing.assert_array_equal(xb.numpy(), X.numpy()[idx[0]])
    np.testing.assert_array_equal(yb.numpy(), idx[0])


class Doubled(TensorDataset):
    """A TensorDataset whose samples are its tensors' rows doubled."""

    def __getitem__(self, i):
        return tuple(2 * t[i] for t in self.tensors)


def test_a_tensor_dataset_subclass_is_read_through_its_own_getitem():
    fs.init(size=3)
    shards = np.array_split(np.arange(30), 3)
    idx = AgentLoader(np.arange(30), shards, 4, seed=6).next()
    (xb,) = AgentLoader(Doubled(torch.arange(30.0)), shards, 4, seed=6).next()
    np.testing.assert_array_equal(xb.numpy(), 2 * idx)


# -- SPMD ---------------------------------------------------------------------------------------
def _agent_batches(size=None):
    """What one agent draws: epochs and replacement, arrays, tensors, a Dataset."""
    fs.init(size=size)
    data = np.arange(60)
    X = np.arange(120.0).reshape(60, 2)
    shards = [np.arange(60)[r::3][: 5 + 4 * r] for r in range(fs.size())]
    out = {
        "epochs": draw(AgentLoader(data, shards, 6, seed=3), 7),
        "replacement": draw(AgentLoader(data, shards, 6, seed=3, mode="replacement"), 7),
        "tensor": draw(AgentLoader(torch.from_numpy(X), shards, 4, seed=1), 3),
    }
    dataset = TensorDataset(torch.from_numpy(X), torch.arange(60))
    loader = AgentLoader(dataset, shards, 4, seed=1, steps=3)
    out["dataset"] = np.stack([np.asarray(xb) for xb, _ in loader])
    return out


def test_spmd_agents_draw_the_rows_of_the_simulation():
    n = 4
    sim = _agent_batches(n)
    fs.shutdown()
    assert sim["epochs"].shape == (7, n, 6)
    for r, got in enumerate(spmd.run(lambda: _agent_batches(n), size=n)):
        for key, value in got.items():
            np.testing.assert_array_equal(value, sim[key][:, r], err_msg=f"{key}, agent {r}")


def test_spmd_agents_count_their_own_epochs():
    def main():
        fs.init()
        loader = AgentLoader(np.arange(60), UNEQUAL, 4, seed=9)
        draw(loader, 5)
        return loader.epoch, loader.shard_sizes

    for r, (epoch, size) in enumerate(spmd.run(main, size=4)):
        assert type(epoch) is int and type(size) is int
        assert (epoch, size) == (20 // len(UNEQUAL[r]), len(UNEQUAL[r]))


class Shards:
    """A sequence of shards that is no ``collections.abc.Sequence``."""

    def __len__(self):
        return len(UNEQUAL)

    def __getitem__(self, r):
        return UNEQUAL[r]


def test_any_sequence_of_index_arrays_is_a_partition():
    fs.init(size=4)
    want = draw(AgentLoader(np.arange(60), UNEQUAL, 3, seed=1), 4)
    for partition in (Shards(), tuple(UNEQUAL), [s.astype(np.int32) for s in UNEQUAL]):
        np.testing.assert_array_equal(
            draw(AgentLoader(np.arange(60), partition, 3, seed=1), 4), want
        )


# -- MPI and the sharded simulation: this file is the job ----------------------------------------
def job(out: str) -> None:
    batches = _agent_batches()
    stacked = np.ndim(fs.rank()) > 0  # simulated blocks: (steps, agents, ...), agents first
    every = {
        key: np.asarray(fs.global_view(v.swapaxes(0, 1) if stacked else v))
        for key, v in batches.items()
    }
    if fs.is_main_process():
        Path(out).write_text(json.dumps({key: v.tolist() for key, v in every.items()}))
    fs.shutdown()


def _simulated(n):
    sim = _agent_batches(n)
    fs.shutdown()
    return {key: v.swapaxes(0, 1) for key, v in sim.items()}  # agent first


@pytest.mark.parametrize(
    ("n", "options"),
    [(4, ()), (8, ("--sim", "--shards", "2"))],
    ids=["mpi-4", "sharded-2x8"],
)
def test_other_modes_draw_what_the_simulated_agents_draw(tmp_path, n, options):
    out = tmp_path / "batches.json"
    _jobs.fogrun(n, "-m", "tests.test_data_loader", str(out), options=options, timeout=120).check()
    got = json.loads(out.read_text())
    for key, want in _simulated(n).items():
        np.testing.assert_array_equal(np.asarray(got[key]), want, err_msg=key)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": 2.0}, TypeError, "batch_size"),
        ({"partition": UNEQUAL[:3]}, ValueError, "partition"),
        ({"partition": [*UNEQUAL[:3], np.array([60])]}, ValueError, "partition[3]"),
        ({"partition": [*UNEQUAL[:3], np.array([-1])]}, ValueError, "partition[3]"),
        ({"partition": [UNEQUAL[0], np.array([], int), *UNEQUAL[2:]]}, ValueError, "agent 1"),
        ({"partition": [UNEQUAL[0], [], *UNEQUAL[2:]]}, ValueError, "partition[1] is empty"),
        ({"partition": [*UNEQUAL[:3], np.array([1.0])]}, TypeError, "partition[3]"),
        ({"partition": [*UNEQUAL[:3], np.ones((2, 2), int)]}, ValueError, "partition[3]"),
        ({"partition": 5}, TypeError, "partition"),
        ({"mode": "shuffle"}, ValueError, "mode"),
        ({"seed": -1}, ValueError, "seed"),
        ({"steps": 0}, ValueError, "steps"),
        ({"data": (np.arange(60), np.arange(59))}, ValueError, "data[1]"),
        ({"data": 3.0}, TypeError, "data"),
        ({"data": np.float64(3.0)}, TypeError, "data"),
    ],
)
def test_bad_input_names_the_argument(kwargs, error, names):
    fs.init(size=4)
    args = {"data": np.arange(60), "partition": UNEQUAL, "batch_size": 2, **kwargs}
    data, partition, b = args.pop("data"), args.pop("partition"), args.pop("batch_size")
    with pytest.raises(error, match=names.replace("[", r"\[").replace("]", r"\]")):
        AgentLoader(data, partition, b, **args)
    loader = AgentLoader(np.arange(60), UNEQUAL, 2)
    with pytest.raises(ValueError, match="step"):
        loader.step = -1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        pytest.exit("usage: python -m tests.test_data_loader OUT.json")
    job(sys.argv[1])
