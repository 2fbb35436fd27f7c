"""Data held by other libraries: torch data sets, Hugging Face data sets, Flower partitioners.

Nothing here imports torch, ``datasets`` or ``flwr_datasets``: the objects are used through
their documented interfaces (``len``, ``__getitem__``, ``.targets``; ``column_names``,
``with_format``, ``add_column``; ``num_partitions``, ``load_partition``), so
``import fogsim.data`` stays light and the logic is testable without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ._checks import as_labels, check_count
from ._datasets import Dataset
from ._partition import Partition

__all__ = [
    "FlwrPartitionerLike",
    "HFDatasetLike",
    "TorchDatasetLike",
    "from_flwr",
    "from_hf",
    "from_torch",
]

_INDEX_COLUMN = "__fogsim_index__"


class TorchDatasetLike(Protocol):
    """A torch map-style data set: ``len`` and ``dataset[i] -> (sample, label)``."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Any: ...


class HFDatasetLike(Protocol):
    """The part of a Hugging Face ``datasets.Dataset`` used here."""

    @property
    def column_names(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def with_format(self, type: str) -> Any: ...  # noqa: A002 (the library's name)
    def add_column(self, name: str, column: list[int]) -> Any: ...


class FlwrPartitionerLike(Protocol):
    """The documented interface of a Flower Datasets ``Partitioner``."""

    dataset: Any

    @property
    def num_partitions(self) -> int: ...
    def is_dataset_assigned(self) -> bool: ...
    def load_partition(self, partition_id: int) -> Any: ...


def from_torch(
    dataset: TorchDatasetLike, *, name: str | None = None, n_classes: int | None = None
) -> Dataset:
    """Return a Dataset over a torch map-style ``Dataset`` of ``(sample, label)`` items.

    The labels come from ``dataset.targets`` when it has them (torchvision's MNIST, CIFAR,
    ``ImageFolder``, ...: no sample is loaded), else from one pass over
    ``dataset[i][1]``. The samples stay in the torch data set (``X`` is None,
    ``source`` is ``dataset``); ``Dataset.select(partition[r])`` gives agent r's
    ``torch.utils.data.Subset``.
    """
    targets = getattr(dataset, "targets", None)
    if targets is None:
        targets = [_label(dataset[i], i) for i in range(len(dataset))]
    y = as_labels(np.asarray(targets), "dataset labels")
    if y.size != len(dataset):
        raise ValueError(f"dataset.targets holds {y.size} labels for {len(dataset)} samples")
    classes = _classes(y, n_classes)
    label = name if name is not None else type(dataset).__name__
    return Dataset(None, y, classes, label, dataset, "torch")


def from_hf(
    dataset: HFDatasetLike,
    label: str = "label",
    *,
    features: str | Sequence[str] | None = None,
    name: str | None = None,
    n_classes: int | None = None,
) -> Dataset:
    """Return a Dataset over a Hugging Face ``datasets.Dataset``.

    The labels are the column ``label`` (integer classes, e.g. a ``ClassLabel``). With
    ``features`` (a column name or several) those columns are read as numpy arrays into
    ``X`` (float64; several columns side by side, one feature each, or flattened);
    without, the samples stay in ``dataset`` (``X`` is None) and
    ``Dataset.select(partition[r])`` calls ``dataset.select``.
    """
    columns = list(dataset.column_names)
    if label not in columns:
        raise ValueError(f"label={label!r} is not a column of the dataset ({columns})")
    as_numpy = dataset.with_format("numpy")
    y = as_labels(np.asarray(as_numpy[label]), f"column {label!r}")
    X = None
    if features is not None:
        wanted = [features] if isinstance(features, str) else list(features)
        missing = [c for c in wanted if c not in columns]
        if not wanted or missing:
            raise ValueError(
                f"features must name columns of the dataset ({columns}), got {features!r}"
            )
        arrays = [np.asarray(as_numpy[c], dtype=np.float64) for c in wanted]
        X = (
            arrays[0]
            if len(arrays) == 1
            else np.column_stack([a.reshape(y.size, -1) for a in arrays])
        )
    info_name = getattr(getattr(dataset, "info", None), "dataset_name", None)
    label_name = name if name is not None else str(info_name or "hf")
    return Dataset(X, y, _classes(y, n_classes), label_name, dataset, "hf")


def from_flwr(
    partitioner: FlwrPartitionerLike,
    agents: int | None = None,
    *,
    dataset: HFDatasetLike | None = None,
    index_column: str | None = None,
    allow_empty: bool = False,
) -> Partition:
    """Return the :class:`Partition` a Flower Datasets partitioner makes.

    Agent r holds partition r (``partitioner.load_partition(r)``) as indices into the
    partitioner's data set. The indices are found, in this order:

    * from ``index_column``, a column of the data set holding each row's index (add one
      before binding: ``ds = ds.add_column("idx", list(range(len(ds))))``);
    * by binding ``dataset`` to a partitioner that has none yet, with such a column added;
    * from the partitioner's public ``partition_id_to_indices`` mapping
      (``SizePartitioner``, ``LinearPartitioner``, ...).

    Otherwise a ValueError says how to add the column. ``agents`` (default: the
    partitioner's ``num_partitions``) must equal ``num_partitions``. Needs
    ``flwr-datasets`` only to build the partitioner.
    """
    n = check_count(partitioner.num_partitions, "partitioner.num_partitions")
    if agents is not None and check_count(agents, "agents") != n:
        raise ValueError(f"agents ({agents}) must equal partitioner.num_partitions ({n})")
    if dataset is not None:
        if partitioner.is_dataset_assigned():
            raise ValueError("dataset was given but the partitioner already has one")
        if index_column is not None:
            raise ValueError("pass dataset or index_column, not both")
        partitioner.dataset = dataset.add_column(_INDEX_COLUMN, list(range(len(dataset))))
        index_column = _INDEX_COLUMN
    elif not partitioner.is_dataset_assigned():
        raise ValueError("the partitioner has no dataset: pass dataset= or assign one first")
    n_samples = len(partitioner.dataset)
    if index_column is not None:
        if index_column not in partitioner.dataset.column_names:
            raise ValueError(f"index_column={index_column!r} is not a column of the dataset")
        parts = [
            np.asarray(partitioner.load_partition(r)[index_column], dtype=np.int64)
            for r in range(n)
        ]
    else:
        partitioner.load_partition(0)  # some partitioners compute their mapping lazily
        mapping = getattr(partitioner, "partition_id_to_indices", None)
        if mapping is None:
            raise ValueError(
                f"{type(partitioner).__name__} does not expose its indices: add an index "
                f'column (ds = ds.add_column("idx", list(range(len(ds))))) before binding '
                f'and pass index_column="idx", or pass the unbound partitioner and dataset='
            )
        parts = [np.asarray(mapping[r], dtype=np.int64) for r in range(n)]
    scheme = f"flwr {type(partitioner).__name__}(num_partitions={n})"
    return Partition(parts, n_samples, scheme, allow_empty=allow_empty)


def _label(item: Any, i: int) -> int:
    try:
        value = item[1]
    except (TypeError, IndexError, KeyError):
        raise TypeError(
            f"dataset[{i}] must be a (sample, label) pair when the dataset has no .targets"
        ) from None
    return value.item() if hasattr(value, "item") else value  # type: ignore[no-any-return]


def _classes(y: np.ndarray, n_classes: int | None) -> int:
    found = int(y.max()) + 1 if y.size else 0
    if n_classes is None:
        return found
    if check_count(n_classes, "n_classes") < found:
        raise ValueError(f"n_classes ({n_classes}) is below the largest label + 1 ({found})")
    return n_classes
