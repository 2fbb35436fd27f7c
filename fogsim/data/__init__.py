"""Data across agents: seeded partitioners, a heterogeneity report, small data sets, and
per-agent batches.

A partitioner splits a data set's sample indices over ``n`` agents from a seed. Every
process computes the whole split (a few vectorized passes over the labels) and takes its
own agents' parts, so agent r holds the same samples simulated, sharded, under MPI or as
an SPMD thread:

>>> import numpy as np
>>> from fogsim import data
>>> y = np.repeat(np.arange(10), 100)                 # 1000 samples, 10 classes
>>> part = data.dirichlet(y, agents=8, alpha=0.3, seed=0)
>>> len(part), int(part.sizes.sum())
(8, 1000)
>>> idx = part[3]                                     # agent 3's indices, sorted
>>> mine = part[np.arange(8)]         # a list, one per agent: part[fs.rank()] in any mode
>>> rep = part.report(y)                              # label histograms, TV distances
>>> rep.counts.shape
(8, 10)

The partitioners (each returns a :class:`Partition`; an agent left with no sample raises
a ValueError unless ``allow_empty=True``):

* :func:`iid`: shuffled, sizes differing by at most one;
* :func:`dirichlet`: label skew, class k split by ``q_k ~ Dir(alpha 1)`` (Hsu et al. 2019,
  the per-class variant), with ``sizes=`` for label and quantity skew together;
* :func:`pathological`: every agent holds exactly ``classes_per_agent`` classes (the
  "#C = k" split of Li et al. 2022, after McMahan et al. 2017);
* :func:`size_skew`: IID content, log-normal or power-law sizes.

:meth:`Partition.report` returns a :class:`Report`: per-agent label counts, the mean
total-variation distance to the global label distribution, classes per agent, and
:meth:`Report.plot`.

Data sets (:class:`Dataset`: float64 ``X``, int64 ``y``, ``n_classes``, ``name``):
:func:`load` reads scikit-learn's bundled ``digits``, ``breast_cancer``, ``wine`` and
``iris`` (no download); :func:`make_classification` and :func:`make_regression` draw
synthetic ones from a seed; :func:`from_arrays` and :func:`from_npz` wrap data already
on disk; :func:`from_torch` (a torch ``Dataset``, labels from ``.targets`` when present;
``torchvision.datasets.ImageFolder`` for a folder of images per class), :func:`from_hf`
(a Hugging Face ``datasets.Dataset``) and :func:`from_flwr` (a Flower Datasets
partitioner, as a :class:`Partition`) use those libraries' objects without importing
them. ``import fogsim.data`` imports neither scikit-learn nor torch.

:class:`AgentLoader` gives every agent batches of its own shard: stacked ``(n, b, ...)``
in the simulator, the rank's own ``(b, ...)`` under MPI, torch.distributed and SPMD, and
agent r the same samples in the same order in every mode (each agent shuffles its shard
per epoch from its own counter-based keys, or samples it with replacement).
"""

from __future__ import annotations

from ._datasets import Dataset, from_arrays, from_npz, load, make_classification, make_regression
from ._interop import (
    FlwrPartitionerLike,
    HFDatasetLike,
    TorchDatasetLike,
    from_flwr,
    from_hf,
    from_torch,
)
from ._loader import AgentLoader
from ._partition import Partition, dirichlet, iid, pathological, size_skew
from ._report import Report

__all__ = [
    "AgentLoader",
    "Dataset",
    "FlwrPartitionerLike",
    "HFDatasetLike",
    "Partition",
    "Report",
    "TorchDatasetLike",
    "dirichlet",
    "from_arrays",
    "from_flwr",
    "from_hf",
    "from_npz",
    "from_torch",
    "iid",
    "load",
    "make_classification",
    "make_regression",
    "pathological",
    "size_skew",
]
