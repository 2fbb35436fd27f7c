"""Per-agent batches in every mode: :class:`AgentLoader`."""

from __future__ import annotations

import numbers
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from . import _order

if TYPE_CHECKING:
    import torch

    from ._interop import TorchDatasetLike

__all__ = ["AgentLoader"]

#: The modes of :class:`AgentLoader`.
MODES = ("epochs", "replacement")

# The epoch walk runs in compiled code (numba, `_order_nb`: the same numbers) once a loader
# has drawn this many entries: importing numba and loading the kernel costs about a second,
# the numpy walk about 50 ns an entry more, so a short run never pays for numba.
_COMPILE_AFTER = 1 << 20


def _count(value: Any, argname: str, *, low: int) -> int:
    """``value`` as an int ``>= low``, or raise naming ``argname``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer, got {type(value).__name__}")
    if value < low:
        raise ValueError(f"{argname} must be >= {low}, got {value}")
    return int(value)


def _torch() -> Any:
    """The torch module if something imported it already (no tensor exists otherwise)."""
    return sys.modules.get("torch")


class AgentLoader:
    """Batches of each agent's own shard, the same samples in every mode.

    ``for batch in AgentLoader(data, partition, batch_size)`` gives, at each step, every
    agent this process holds ``batch_size`` samples of its shard ``data[partition[r]]``.
    In simulation the batches are stacked, ``(k, batch_size, ...)`` for the ``k`` agents
    held here (all ``n``; a block of them under ``fogrun --sim --shards``); under MPI,
    torch.distributed and SPMD each agent gets its own ``(batch_size, ...)``. Agent ``r``'s
    batches depend on ``seed``, ``r``, its shard and ``batch_size`` only, so they are the
    same in every mode, and do not change with the other agents' shards.

    Parameters
    ----------
    data : array, tensor, tuple of them, or torch Dataset
        The samples, indexed along axis 0: a numpy array, a torch tensor, a tuple (or
        list) of arrays or tensors of one length indexed alike (``(X, y)``), or a
        map-style ``torch.utils.data.Dataset`` (``len(data)`` and ``data[i]``).
    partition : sequence of n 1-d integer arrays
        Agent ``r``'s shard: the indices of its samples in ``data`` (e.g. a
        :class:`Partition`). One per agent of the world, none empty, each index in
        ``[0, len(data))``; shards may overlap and differ in size.
    batch_size : int
        Samples per agent and step, ``b >= 1``.
    seed : int, optional
        Seeds every agent's order; default the world's seed (``init(seed=)``, else
        ``FOGSIM_SEED``, else 0), as :func:`fogsim.rng` does.
    mode : {"epochs", "replacement"}
        ``"epochs"``: each agent walks through its shuffled shard, epoch after epoch.
        ``"replacement"``: each agent draws ``b`` samples of its shard uniformly, with
        replacement, at each step.
    steps : int, optional
        Batches per pass (``len(loader)``, what one ``for`` loop over the loader yields);
        default ``ceil(max_r m_r / b)``, one epoch of the largest shard (``m_r``: agent
        ``r``'s shard size).

    Notes
    -----
    The loader is a stream: every agent's ``t``-th batch (``t = 0, 1, ...`` counted over
    all passes; :attr:`step` is the next ``t``, and may be set to resume) is defined as
    follows, with ``m`` the agent's shard size and ``b = batch_size``:

    * ``"epochs"``: the agent's stream is its shard in epoch 0's order, then epoch 1's,
      and so on; batch ``t`` is entries ``t b .. t b + b - 1`` of that stream. Epoch ``e``
      visits each entry of the shard exactly once, in an order drawn from ``(seed, r, e)``.
      Batches never come up short: a batch that reaches the end of an epoch is completed
      from the next epoch's order (each agent on its own, so agents with shards of
      different sizes start their epochs at different steps; :attr:`epoch` counts them);
      a shard smaller than ``b`` fills a batch from several epochs.
    * ``"replacement"``: batch ``t`` is ``b`` entries of the shard, each drawn uniformly
      and independently from ``(seed, r, t)``.

    Precisely, with SplitMix64's ``i``-th output ``out(s, i) = mix(s + (i + 1) G)``
    (``G = 0x9E3779B97F4A7C15``, ``mix`` its finalizer, arithmetic mod ``2**64``) and
    agent ``r``'s stream ``a = out(out(seed, kind), r)`` (``kind`` 0 for epochs, 1 for
    replacement): epoch ``e`` visits positions ``p`` of the shard sorted by
    ``(out(out(a, e), p), p)``, and draw ``k`` of batch ``t`` takes position
    ``floor(out(out(a, t), k) m / 2**64)``.

    A batch is ``data[idx]`` for the agents' indices ``idx``: numpy arrays and tensors
    gathered along axis 0 (a tuple of them as a tuple), a torch Dataset's samples
    ``data[i]`` collated with ``torch.utils.data.default_collate`` (as a torch
    ``DataLoader`` would; a ``TensorDataset`` gathered from its tensors, a list; a
    subclass of it through its own ``data[i]``), stacked
    along a leading agent axis in simulation.

    Examples
    --------
    >>> import fogsim as fs
    >>> from fogsim.data import AgentLoader
    >>> _ = fs.init(size=4)
    >>> X, y = np.arange(80.0).reshape(40, 2), np.arange(40) % 2
    >>> shards = np.array_split(np.arange(40), 4)
    >>> loader = AgentLoader((X, y), shards, 5, seed=1)
    >>> xb, yb = next(iter(loader))
    >>> xb.shape, yb.shape, len(loader)
    ((4, 5, 2), (4, 5), 2)
    >>> fs.shutdown()
    """

    def __init__(
        self,
        data: npt.ArrayLike | torch.Tensor | tuple[Any, ...] | TorchDatasetLike,
        partition: Sequence[npt.ArrayLike],
        batch_size: int,
        *,
        seed: int | None = None,
        mode: str = "epochs",
        steps: int | None = None,
    ) -> None:
        from .. import _context  # here: the world's modules (and scipy) load with a world
        from .._rng import DEFAULT_SEED

        ctx = _context.current()
        backend = ctx.backend
        self._stacked = ctx.is_simulated
        self._ranks = np.atleast_1d(np.asarray(backend.rank(), dtype=np.int64))
        self.batch_size = _count(batch_size, "batch_size", low=1)
        if mode not in MODES:
            raise ValueError(f"mode must be 'epochs' or 'replacement', got {mode!r}")
        self.mode = mode
        if seed is None:
            seed = DEFAULT_SEED if ctx.seed is None else ctx.seed
        self.seed = _count(seed, "seed", low=0)
        if self.seed >= 1 << 64:
            raise ValueError(f"seed must be < 2**64, got {seed}")
        self._gather, length = _gatherer(data)
        self.data = data
        shards = _shards(partition, backend.size_int, length)
        longest = max(len(s) for s in shards)
        self.steps = (
            -(-longest // self.batch_size) if steps is None else _count(steps, "steps", low=1)
        )
        held = [shards[r] for r in self._ranks]
        self._sizes = np.array([len(s) for s in held], dtype=np.int64)
        self._offsets = np.cumsum(self._sizes) - self._sizes
        self._flat = np.concatenate(held).astype(np.int64, copy=False)
        streams = _order.agent_streams(self.seed, MODES.index(mode), self._ranks)
        self._streams = streams
        self._walk = _order.EpochOrders(self._flat, self._offsets, self._sizes, streams)
        self._step = 0
        self._drawn = 0
        self._kernel: Any = None

    # -- the stream -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[Any]:
        for _ in range(self.steps):
            yield self.next()

    def next(self) -> Any:
        """Return the next batch (batch :attr:`step`) and move on by one step."""
        return self._gather(self._indices())

    @property
    def step(self) -> int:
        """The next batch's number ``t``: the batches drawn so far, over all passes.

        Setting it moves the stream there (to resume a run, or to start again at 0).
        """
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = _count(value, "step", low=0)
        if self.mode == "epochs":
            self._walk.seek(self._step * self.batch_size)

    @property
    def epoch(self) -> Any:
        """Each agent's epoch of the next batch's first sample, ``floor(t b / m_r)``.

        The number of whole epochs the agent has gone through (``"epochs"`` mode; in
        ``"replacement"`` mode, samples drawn over the shard's size). An array over the
        agents held here in simulation, an int distributed.
        """
        epochs = (self._step * self.batch_size) // self._sizes
        return epochs if self._stacked else int(epochs[0])

    @property
    def shard_sizes(self) -> Any:
        """Each held agent's shard size ``m_r`` (an array in simulation, an int distributed)."""
        return self._sizes.copy() if self._stacked else int(self._sizes[0])

    def indices(self) -> Any:
        """Return the next batch's indices into ``data`` and move on by one step.

        ``(k, batch_size)`` int64 in simulation, ``(batch_size,)`` distributed: the rows
        :meth:`next` would have gathered.
        """
        return self._indices()

    def _indices(self) -> np.ndarray:
        b = self.batch_size
        if self.mode == "replacement":
            positions = _order.replacement_positions(self._streams, self._sizes, self._step, b)
            idx = self._flat[self._offsets[:, None] + positions]
        elif self._compiled():
            idx = np.empty((len(self._sizes), b), dtype=np.int64)
            w = self._walk
            self._kernel(w.flat, w.order, w.offsets, w.sizes, w.streams, w.epoch, w.cursor, b, idx)
        else:
            idx = self._walk.take(b)
        self._step += 1
        out: np.ndarray = idx if self._stacked else idx[0]
        return out

    def _compiled(self) -> bool:
        """Count one batch; return whether the epoch walk should run compiled."""
        if self._kernel is not None:
            return True
        self._drawn += len(self._sizes) * self.batch_size
        if self._drawn < _COMPILE_AFTER:
            return False
        try:
            from . import _order_nb
        except ImportError:  # numba missing: the numpy walk gives the same numbers
            return False
        self._kernel = _order_nb.take
        return True

    def __repr__(self) -> str:
        where = f"{len(self._sizes)} agents stacked" if self._stacked else f"agent {self._ranks[0]}"
        return (
            f"<fogsim.data.AgentLoader {where}, batch_size={self.batch_size}, "
            f"mode={self.mode!r}, steps={self.steps}, step={self._step}>"
        )


def _shards(partition: Any, n: int, length: int) -> list[np.ndarray]:
    """Return the partition's n shards as integer arrays, checked against ``data``'s length."""
    if isinstance(partition, str | bytes | Mapping) or not (
        hasattr(partition, "__len__") and hasattr(partition, "__getitem__")
    ):
        raise TypeError(
            f"partition must be a sequence of {n} index arrays (one per agent), got "
            f"{type(partition).__name__}"
        )
    if len(partition) != n:
        raise ValueError(
            f"partition has {len(partition)} shards but the world has {n} agents: it needs "
            "one index array per agent"
        )
    shards = []
    for r in range(n):
        part = partition[r]
        arr = np.asarray(part)
        if arr.ndim != 1:
            raise ValueError(f"partition[{r}] must be a 1-d index array, got shape {arr.shape}")
        if arr.size == 0:
            raise ValueError(f"partition[{r}] is empty: agent {r} has no samples to draw from")
        if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"partition[{r}] must hold integer indices, got dtype {arr.dtype}")
        if arr.size >= 1 << 32:
            raise ValueError(f"partition[{r}] has {arr.size} indices; at most 2**32 - 1")
        shards.append(arr)
    every = np.concatenate(shards)
    if every.min() < 0 or every.max() >= length:  # name the first shard out of range
        ends = np.cumsum([len(s) for s in shards])
        first = int(np.flatnonzero((every < 0) | (every >= length))[0])
        r = int(np.searchsorted(ends, first, side="right"))
        raise ValueError(
            f"partition[{r}] holds index {every[first]}, out of range for data of {length} samples"
        )
    return shards


def _gatherer(data: Any) -> tuple[Any, int]:
    """Return the function turning indices into a batch of ``data``, and ``len(data)``."""
    torch = _torch()
    if isinstance(data, tuple | list):
        if not data:
            raise ValueError("data is an empty tuple: give arrays or tensors to draw from")
        fields = [_field(x, f"data[{i}]") for i, x in enumerate(data)]
        length = len(fields[0])
        for i, x in enumerate(fields):
            if len(x) != length:
                raise ValueError(
                    f"data[{i}] has {len(x)} samples but data[0] has {length}: the arrays "
                    "are indexed alike along axis 0"
                )
        gathers = [_field_gather(x) for x in fields]
        kind = type(data)
        return (lambda idx: kind(g(idx) for g in gathers)), length
    if isinstance(data, np.ndarray) or (torch is not None and isinstance(data, torch.Tensor)):
        field = _field(data, "data")
        return _field_gather(field), len(field)
    if torch is not None and isinstance(data, torch.utils.data.Dataset):
        return _dataset_gather(data, torch)
    raise TypeError(
        "data must be a numpy array, a torch tensor, a tuple of them or a map-style torch "
        f"Dataset, got {type(data).__name__}"
    )


def _field(x: Any, argname: str) -> Any:
    """``x`` as an array or tensor with an axis 0 to index, or raise naming ``argname``."""
    torch = _torch()
    if not (torch is not None and isinstance(x, torch.Tensor)):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError):
            raise TypeError(f"{argname} must be an array or a tensor") from None
        if x.dtype == object:
            raise TypeError(f"{argname} must be a numeric array or a tensor, not objects")
    if x.ndim == 0:
        raise ValueError(f"{argname} must have an axis of samples (axis 0), got a scalar")
    return x


def _field_gather(x: Any) -> Any:
    """The gather of one array or tensor along axis 0 into ``idx.shape + x.shape[1:]``."""
    if isinstance(x, np.ndarray):
        return lambda idx: x.take(idx.ravel(), axis=0).reshape(idx.shape + x.shape[1:])
    import torch

    def gather(idx: np.ndarray) -> Any:
        rows = torch.from_numpy(idx.ravel()).to(x.device)
        return x.index_select(0, rows).reshape(idx.shape + tuple(x.shape[1:]))

    return gather


def _dataset_gather(dataset: Any, torch: Any) -> tuple[Any, int]:
    """The gather of a map-style torch Dataset (``len`` and ``dataset[i]``), and its length."""
    try:
        length = len(dataset)
    except TypeError:
        raise TypeError(
            f"data is a torch Dataset without len() ({type(dataset).__name__}); an iterable "
            "Dataset cannot be indexed per agent: give a map-style one"
        ) from None
    if type(dataset) is torch.utils.data.TensorDataset:  # a subclass may redefine data[i]
        gathers = [_field_gather(t) for t in dataset.tensors]
        return (lambda idx: [g(idx) for g in gathers]), length

    collate = torch.utils.data.default_collate

    def gather(idx: np.ndarray) -> Any:
        samples = [dataset[int(i)] for i in idx.ravel()]
        return _reshape(collate(samples), samples[0], idx.shape, torch)

    return gather, length


def _reshape(value: Any, sample: Any, lead: tuple[int, ...], torch: Any) -> Any:
    """Give the leading axis of a collated batch the shape ``lead`` (agents, samples).

    ``sample`` is one of the samples collated: its structure (a tuple of fields, a dict)
    is the batch's.
    """
    if isinstance(value, torch.Tensor):
        return value.reshape(lead + tuple(value.shape[1:]))
    if isinstance(sample, Mapping):
        return {key: _reshape(value[key], sample[key], lead, torch) for key in value}
    if isinstance(sample, tuple | list):
        return type(value)(_reshape(v, s, lead, torch) for v, s in zip(value, sample, strict=True))
    if isinstance(value, list) and len(lead) == 2:  # e.g. strings: one list per agent
        k, b = lead
        return [value[a * b : (a + 1) * b] for a in range(k)]
    return value
