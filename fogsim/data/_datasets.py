"""Small data sets without downloads: scikit-learn's bundled ones, synthetic ones, arrays."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal

import numpy as np
import numpy.typing as npt

from ._checks import as_labels, check_count

__all__ = [
    "Dataset",
    "from_arrays",
    "from_npz",
    "load",
    "make_classification",
    "make_regression",
]

_BUNDLED = ("digits", "breast_cancer", "wine", "iris")


@dataclass(frozen=True, eq=False)
class Dataset:
    """Samples and their labels, for a partitioner and a loader.

    Attributes
    ----------
    X : numpy.ndarray or None
        The features, float64, one row per sample (``(n_samples, ...)``); None when the
        samples stay in ``source`` (:func:`from_torch`, :func:`from_hf`).
    y : numpy.ndarray
        The targets, one per sample: int64 classes ``0 .. n_classes-1`` for
        classification, float64 values for regression.
    n_classes : int
        The number of classes (``max(y) + 1``); 0 for regression.
    name : str
        A short name.
    source : object, optional
        The object the samples are read from when not loaded into ``X`` (a torch
        ``Dataset``, a Hugging Face ``Dataset``).
    kind : {"arrays", "torch", "hf"}
        Where the samples are: in ``X``, or in ``source`` as a torch or Hugging
        Face data set; :meth:`select` uses it.
    """

    X: np.ndarray | None
    y: np.ndarray
    n_classes: int
    name: str
    source: object = field(default=None, repr=False)
    kind: Literal["arrays", "torch", "hf"] = "arrays"

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __repr__(self) -> str:
        shape = None if self.X is None else self.X.shape
        what = f"{self.n_classes} classes" if self.n_classes else "regression"
        return f"Dataset({self.name!r}: {len(self)} samples, X {shape}, {what}, {self.kind})"

    def select(self, indices: npt.ArrayLike) -> Dataset:
        """Return the samples at ``indices`` (e.g. ``partition[r]``) as a Dataset.

        Arrays are indexed; a torch source becomes a ``torch.utils.data.Subset``, a
        Hugging Face source its ``select(indices)``. ``n_classes`` is kept.
        """
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ValueError("indices must be a 1-D array of sample indices")
        idx = idx.astype(np.int64)
        source = self.source
        if self.kind == "torch":
            from torch.utils.data import Subset

            source = Subset(source, idx.tolist())  # type: ignore[arg-type]
        elif self.kind == "hf":
            source = source.select(idx)  # type: ignore[attr-defined]
        X = None if self.X is None else self.X[idx]
        return Dataset(X, self.y[idx], self.n_classes, self.name, source, self.kind)


def load(
    name: Literal["digits", "breast_cancer", "wine", "iris"], *, standardize: bool = False
) -> Dataset:
    """Return one of scikit-learn's bundled classification data sets (no download).

    ``"digits"`` (1797 x 64, 10 classes), ``"breast_cancer"`` (569 x 30, 2), ``"wine"``
    (178 x 13, 3), ``"iris"`` (150 x 4, 3). With ``standardize=True`` every feature is
    shifted and scaled to mean 0 and standard deviation 1 over the whole data set
    (constant features become 0). Needs scikit-learn (``pip install scikit-learn``).
    """
    if name not in _BUNDLED:
        raise ValueError(f"name must be one of {', '.join(map(repr, _BUNDLED))}, got {name!r}")
    datasets = _sklearn_datasets()
    bunch = getattr(datasets, f"load_{name}")()
    return from_arrays(bunch.data, bunch.target, name=name, standardize=standardize)


def make_classification(
    n_samples: int = 1000,
    n_features: int = 20,
    n_classes: int = 2,
    seed: int = 0,
    *,
    n_informative: int | None = None,
    class_sep: float = 1.0,
    standardize: bool = False,
) -> Dataset:
    """Return scikit-learn's ``make_classification`` data drawn from ``seed``.

    Classes are clusters of points around the vertices of a hypercube in the
    ``n_informative`` dimensions (default: enough for ``n_classes``, at least 2), the other
    features noise. Needs scikit-learn.
    """
    n_samples = check_count(n_samples, "n_samples")
    n_features = check_count(n_features, "n_features")
    n_classes = check_count(n_classes, "n_classes", minimum=2)
    seed = check_count(seed, "seed", minimum=0)
    if n_informative is None:
        n_informative = min(n_features, max(2, int(np.ceil(np.log2(n_classes))) + 1))
    n_informative = check_count(n_informative, "n_informative")
    if n_informative > n_features:
        raise ValueError(f"n_informative ({n_informative}) exceeds n_features ({n_features})")
    if n_classes > 2**n_informative:
        raise ValueError(
            f"n_classes ({n_classes}) must be at most 2**n_informative ({2**n_informative})"
        )
    X, y = _sklearn_datasets().make_classification(
        n_samples=n_samples,
        n_features=n_features,
        n_informative=n_informative,
        n_redundant=0,
        n_classes=n_classes,
        n_clusters_per_class=1,
        class_sep=class_sep,
        random_state=seed,
    )
    return from_arrays(X, y, name="classification", standardize=standardize)


def make_regression(
    n_samples: int = 1000,
    n_features: int = 20,
    seed: int = 0,
    *,
    noise: float = 0.1,
    standardize: bool = False,
) -> Dataset:
    """Return scikit-learn's ``make_regression`` data (a random linear model plus Gaussian
    ``noise``) drawn from ``seed``; ``y`` is float64 and ``n_classes`` 0. Needs scikit-learn.
    """
    n_samples = check_count(n_samples, "n_samples")
    n_features = check_count(n_features, "n_features")
    seed = check_count(seed, "seed", minimum=0)
    X, y = _sklearn_datasets().make_regression(
        n_samples=n_samples, n_features=n_features, noise=noise, random_state=seed
    )
    return _dataset(
        np.asarray(X, dtype=np.float64), standardize, y.astype(np.float64), 0, "regression"
    )


def from_arrays(
    X: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    name: str = "arrays",
    standardize: bool = False,
    n_classes: int | None = None,
) -> Dataset:
    """Return a classification Dataset of features ``X`` (float64) and integer labels ``y``.

    ``X`` has one row per sample (any trailing shape); ``y`` is 1-D integer classes
    ``>= 0`` (integral floats accepted). ``n_classes`` defaults to ``max(y) + 1``.
    """
    labels = as_labels(y, "y")
    features = np.asarray(X)
    if features.dtype.kind not in "iufb":
        raise TypeError(f"X must be numeric, got dtype {features.dtype}")
    if features.ndim < 1 or features.shape[0] != labels.size:
        raise ValueError(
            f"X must have one row per label ({labels.size}), got shape {features.shape}"
        )
    found = int(labels.max()) + 1 if labels.size else 0
    if n_classes is None:
        n_classes = found
    elif check_count(n_classes, "n_classes") < found:
        raise ValueError(f"n_classes ({n_classes}) is below max(y) + 1 ({found})")
    return _dataset(features.astype(np.float64), standardize, labels, n_classes, name)


def from_npz(
    path: str | os.PathLike[str],
    x_key: str = "X",
    y_key: str = "y",
    *,
    standardize: bool = False,
) -> Dataset:
    """Return the Dataset saved in the ``.npz`` file at ``path`` (``np.savez(path, X=..., y=...)``).

    The arrays are read from the keys ``x_key`` and ``y_key`` (no pickled objects).
    """
    with np.load(path, allow_pickle=False) as archive:
        for key, arg in ((x_key, "x_key"), (y_key, "y_key")):
            if key not in archive.files:
                raise ValueError(f"{arg}={key!r} is not in {os.fspath(path)!r} ({archive.files})")
        X, y = archive[x_key], archive[y_key]
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return from_arrays(X, y, name=name, standardize=standardize)


def _dataset(X: np.ndarray, standardize: bool, y: np.ndarray, n_classes: int, name: str) -> Dataset:
    if standardize:
        mean = X.mean(axis=0)
        std = X.std(axis=0)
        X = (X - mean) / np.where(std > 0, std, 1.0)
    return Dataset(np.ascontiguousarray(X, dtype=np.float64), y, n_classes, name)


def _sklearn_datasets() -> ModuleType:
    try:
        datasets: ModuleType = importlib.import_module("sklearn.datasets")
    except ImportError:
        raise ImportError(
            "fogsim.data's bundled and synthetic data sets need scikit-learn: "
            "pip install scikit-learn"
        ) from None
    return datasets
