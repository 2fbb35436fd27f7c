"""fogsim.data's data sets: bundled, synthetic, from arrays and files, and the interop with
torch, Hugging Face ``datasets`` and Flower Datasets (small fakes written from those
libraries' documented interfaces; the libraries themselves are not installed here)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fogsim import data

pytest.importorskip("sklearn")

# Shapes and class counts as scikit-learn's documentation of its toy data sets gives them.
BUNDLED = {
    "digits": ((1797, 64), None),  # ~180 per class
    "breast_cancer": ((569, 30), [212, 357]),
    "wine": ((178, 13), [59, 71, 48]),
    "iris": ((150, 4), [50, 50, 50]),
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_load_bundled_shapes_and_types(name):
    shape, class_counts = BUNDLED[name]
    ds = data.load(name)
    assert ds.X.shape == shape and ds.X.dtype == np.float64
    assert ds.y.shape == (shape[0],) and ds.y.dtype == np.int64
    assert len(ds) == shape[0] and ds.name == name
    if class_counts is not None:
        assert list(np.bincount(ds.y)) == class_counts
    assert ds.n_classes == (10 if name == "digits" else len(class_counts))
    assert set(np.unique(ds.y)) == set(range(ds.n_classes))


def test_digits_pixels_and_standardize():
    raw = data.load("digits")
    assert raw.X.min() == 0 and raw.X.max() == 16  # 8x8 images of 4-bit gray levels
    std = data.load("digits", standardize=True)
    constant = raw.X.std(axis=0) == 0
    assert constant.any()  # digits has pixels that are always 0
    assert np.allclose(std.X[:, constant], 0)
    assert np.allclose(std.X[:, ~constant].mean(axis=0), 0, atol=1e-12)
    assert np.allclose(std.X[:, ~constant].std(axis=0), 1)
    assert np.array_equal(std.y, raw.y)


def test_load_unknown_name():
    with pytest.raises(ValueError, match="name"):
        data.load("mnist")


def test_missing_scikit_learn_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        data.load("iris")


def test_make_classification():
    ds = data.make_classification(500, 8, n_classes=4, seed=3)
    assert ds.X.shape == (500, 8) and ds.X.dtype == np.float64
    assert ds.y.dtype == np.int64 and ds.n_classes == 4
    assert set(np.unique(ds.y)) == {0, 1, 2, 3}
    again = data.make_classification(500, 8, n_classes=4, seed=3)
    other = data.make_classification(500, 8, n_classes=4, seed=4)
    assert np.array_equal(ds.X, again.X) and np.array_equal(ds.y, again.y)
    assert not np.array_equal(ds.X, other.X)
    with pytest.raises(ValueError, match="n_classes"):
        data.make_classification(100, 2, n_classes=8, n_informative=2)
    with pytest.raises(ValueError, match="n_classes"):
        data.make_classification(100, 4, n_classes=1)
    with pytest.raises(TypeError, match="n_samples"):
        data.make_classification(100.0)


def test_make_regression_is_a_linear_model():
    ds = data.make_regression(200, 5, seed=1, noise=0.0)
    assert ds.X.shape == (200, 5) and ds.y.dtype == np.float64 and ds.n_classes == 0
    coef, *_ = np.linalg.lstsq(ds.X, ds.y, rcond=None)
    assert np.allclose(ds.X @ coef, ds.y)
    noisy = data.make_regression(2000, 5, seed=1, noise=1.0)
    coef, *_ = np.linalg.lstsq(noisy.X, noisy.y, rcond=None)
    assert np.std(noisy.y - noisy.X @ coef) == pytest.approx(1.0, rel=0.1)


def test_from_arrays_and_select():
    X = np.arange(12).reshape(6, 2)
    ds = data.from_arrays(X, [0, 1, 0, 2, 2, 1.0], name="toy")
    assert ds.X.dtype == np.float64 and ds.y.dtype == np.int64 and ds.n_classes == 3
    part = data.iid(ds.y, 2, seed=0)
    mine = ds.select(part[1])
    assert np.array_equal(mine.X, X[part[1]]) and np.array_equal(mine.y, ds.y[part[1]])
    assert mine.n_classes == 3 and len(mine) == 3
    assert data.from_arrays(X, [0] * 6, n_classes=5).n_classes == 5
    with pytest.raises(ValueError, match="X"):
        data.from_arrays(X[:5], ds.y)
    with pytest.raises(TypeError, match="y"):
        data.from_arrays(X, list("abcdef"))
    with pytest.raises(ValueError, match="y"):
        data.from_arrays(X, [0, 1, 0, 2, 2, 1.5])
    with pytest.raises(ValueError, match="n_classes"):
        data.from_arrays(X, ds.y, n_classes=2)
    with pytest.raises(TypeError, match="X"):
        data.from_arrays(np.array(list("abcdef")), ds.y)


def test_from_npz(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 3)).astype(np.float32), rng.integers(0, 4, 20)
    path = tmp_path / "mine.npz"
    np.savez(path, features=X, labels=y)
    ds = data.from_npz(path, "features", "labels")
    assert np.array_equal(ds.X, X.astype(np.float64)) and np.array_equal(ds.y, y)
    assert ds.name == "mine"
    with pytest.raises(ValueError, match="x_key"):
        data.from_npz(path)


# -- torch -------------------------------------------------------------------------------------


def test_from_torch_reads_targets_without_loading_samples():
    torch = pytest.importorskip("torch")

    class Labelled(torch.utils.data.Dataset):
        targets = torch.tensor([2, 0, 1, 2])

        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise AssertionError("a sample was loaded")

    ds = data.from_torch(Labelled())
    assert ds.X is None and ds.kind == "torch" and ds.n_classes == 3
    assert list(ds.y) == [2, 0, 1, 2] and ds.y.dtype == np.int64


def test_from_torch_iterates_once_without_targets():
    torch = pytest.importorskip("torch")
    X = torch.arange(10.0).reshape(5, 2)
    tensors = torch.utils.data.TensorDataset(X, torch.tensor([1, 0, 1, 1, 0]))
    ds = data.from_torch(tensors, name="tensors")
    assert list(ds.y) == [1, 0, 1, 1, 0] and ds.name == "tensors"
    sub = ds.select(np.array([3, 1]))
    assert isinstance(sub.source, torch.utils.data.Subset) and len(sub.source) == 2
    assert torch.equal(sub.source[0][0], X[3]) and list(sub.y) == [1, 0]
    with pytest.raises(TypeError, match=r"dataset\[0\]"):
        data.from_torch([1, 2, 3])


# -- Hugging Face datasets and Flower Datasets: fakes of their documented interfaces ----------


class FakeHF:
    """A Hugging Face ``Dataset``'s documented surface: ``column_names``, ``len``,
    ``with_format("numpy")[column]`` (a numpy array), ``select``, ``add_column``."""

    def __init__(self, columns):
        self.columns = {k: list(v) for k, v in columns.items()}

    @property
    def column_names(self):
        return list(self.columns)

    def __len__(self):
        return len(next(iter(self.columns.values())))

    def __getitem__(self, column):
        return self.columns[column]

    def with_format(self, type):
        assert type == "numpy"
        return {k: np.asarray(v) for k, v in self.columns.items()}

    def select(self, indices):
        return FakeHF({k: [v[i] for i in indices] for k, v in self.columns.items()})

    def add_column(self, name, column):
        return FakeHF({**self.columns, name: column})


class FakePartitioner:
    """Flower Datasets' ``Partitioner`` interface: ``num_partitions``, a ``dataset`` assigned
    once, ``is_dataset_assigned()``, ``load_partition(i)`` returning a data set. Partition i
    holds rows i, i + n, i + 2n, ... (its own rule, unknown to fogsim)."""

    def __init__(self, num_partitions):
        self._n = num_partitions
        self._dataset = None

    @property
    def num_partitions(self):
        return self._n

    @property
    def dataset(self):
        if self._dataset is None:
            raise ValueError("no dataset assigned")
        return self._dataset

    @dataset.setter
    def dataset(self, value):
        if self._dataset is not None:
            raise ValueError("The dataset should be assigned only once to the partitioner.")
        self._dataset = value

    def is_dataset_assigned(self):
        return self._dataset is not None

    def load_partition(self, partition_id):
        return self.dataset.select(range(partition_id, len(self.dataset), self._n))


class FakeSizePartitioner(FakePartitioner):
    """Exposes the public ``partition_id_to_indices`` mapping, computed on first load."""

    def __init__(self, num_partitions):
        super().__init__(num_partitions)
        self._mapping = {}

    @property
    def partition_id_to_indices(self):
        return self._mapping

    def load_partition(self, partition_id):
        n = len(self.dataset)
        self._mapping = {i: list(range(i, n, self._n)) for i in range(self._n)}
        return super().load_partition(partition_id)


def hf_rows(n=10):
    return FakeHF({"x": [[i, -i] for i in range(n)], "y": [i % 3 for i in range(n)]})


def test_from_hf_labels_and_features():
    hf = hf_rows()
    ds = data.from_hf(hf, label="y", features="x")
    assert ds.X.shape == (10, 2) and ds.X.dtype == np.float64 and ds.X[3, 1] == -3
    assert list(ds.y) == [i % 3 for i in range(10)] and ds.n_classes == 3
    lazy = data.from_hf(hf, label="y", name="rows")
    assert lazy.X is None and lazy.kind == "hf" and lazy.name == "rows"
    assert lazy.select(np.array([4, 2])).source["x"] == [[4, -4], [2, -2]]
    with pytest.raises(ValueError, match="label"):
        data.from_hf(hf)  # no "label" column
    with pytest.raises(ValueError, match="features"):
        data.from_hf(hf, label="y", features=["x", "z"])
    with pytest.raises(ValueError, match="'y'"):
        data.from_hf(FakeHF({"y": [0.5, 1.0]}), label="y")


def test_from_flwr_binds_the_dataset_with_an_index_column():
    part = data.from_flwr(FakePartitioner(3), dataset=hf_rows(10))
    assert [list(p) for p in part] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert part.n_samples == 10 and "FakePartitioner" in part.scheme
    assert part.report(hf_rows(10)["y"]).counts.shape == (3, 3)


def test_from_flwr_reads_a_user_index_column_or_the_public_mapping():
    bound = FakePartitioner(4)
    hf = hf_rows(9)
    bound.dataset = hf.add_column("idx", list(range(9)))
    part = data.from_flwr(bound, 4, index_column="idx")
    assert [list(p) for p in part] == [[0, 4, 8], [1, 5], [2, 6], [3, 7]]
    sized = FakeSizePartitioner(2)
    sized.dataset = hf
    assert [list(p) for p in data.from_flwr(sized)] == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]


def test_from_flwr_errors():
    bound = FakePartitioner(2)
    bound.dataset = hf_rows()
    with pytest.raises(ValueError, match="index column"):
        data.from_flwr(bound)
    with pytest.raises(ValueError, match="agents"):
        data.from_flwr(bound, 3)
    with pytest.raises(ValueError, match="already"):
        data.from_flwr(bound, dataset=hf_rows())
    with pytest.raises(ValueError, match="index_column"):
        data.from_flwr(bound, index_column="nope")
    with pytest.raises(ValueError, match="no dataset"):
        data.from_flwr(FakePartitioner(2))
    with pytest.raises(ValueError, match="agent 3"):  # 3 rows over 4 partitions
        data.from_flwr(FakePartitioner(4), dataset=hf_rows(3))
