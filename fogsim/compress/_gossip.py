"""Compressed gossip, written once against the public API: every mode gives the same numbers.

Each agent compresses its value, :func:`~fogsim.compress.pack`\\ s the payload into one
``uint8`` row and ``fs.neighbor_allgather`` moves exactly those bytes to its out-neighbors
(in simulation one stacked call, distributed the compressed payload on the wire); each agent
then decompresses its in-neighbors' payloads and mixes them with the static topology's
weights or one call's (e.g. a dynamic step's matrix; see ``_mixing``). The mixing is the
same float64 operations in every mode, in the same order (own term first, then the
in-neighbors by ascending rank; vectorized over the stacked agents in simulation), so
simulation, SPMD, MPI and torch.distributed agree bit for bit.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any, overload

import numpy as np

import fogsim as fs

from .. import _api
from .._arrays import wrap_like
from ._base import Compressor, _to_host, _values, _wrap, pack, unpack
from ._mixing import MixWeights
from ._simple import Identity

if TYPE_CHECKING:
    import torch

    from .._rng import StackedGenerator
    from .._types import ArrayLike, SelfWeight, Value, Weights

__all__ = ["CompressedGossip", "compressed_neighbor_allreduce"]


def _exchange(
    arr: np.ndarray, compressor: Compressor, rng: Any, weights: MixWeights
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(C(x)_i, self_w_i C(x)_i + sum_j w_ij C(x_j))`` for the agents here.

    ``arr`` is ``x`` in host memory; both results flat (``lead + (d,)``) in float64.
    """
    if rng is None:
        rng = fs.rng()
    if weights.stacked:
        payload = compressor.compress_stacked(arr, rng)
        own = compressor.decompress_stacked(payload)
    else:
        payload = compressor.compress(arr, rng)
        own = compressor.decompress(payload)
    assert isinstance(own, np.ndarray)  # as arr is: a payload decompresses to its value's type
    shape, dtype = payload.shape, payload.dtype
    d = int(np.prod(shape, dtype=np.int64))
    lead = own.shape[:1] if weights.stacked else ()
    own = own.reshape(*lead, d).astype(np.float64)
    got = fs.neighbor_allgather(pack(payload), weights.src_ranks, weights.dst_ranks)
    nbytes = compressor.payload_bytes(shape, dtype)
    if weights.stacked:
        if isinstance(got, list):  # in-degrees differ: one array per agent
            flat = np.concatenate([np.asarray(g).reshape(-1) for g in got])
        else:
            flat = np.asarray(got).reshape(-1)
        rows = flat.reshape(-1, nbytes) if nbytes else np.zeros((int(weights.recv.sum()), 0))
        values = _decompress_rows(compressor, rows, shape, dtype, d)
        mixed = _mix_stacked(own, values, weights)
    else:
        rows = np.asarray(got).reshape(-1, nbytes) if nbytes else np.zeros((weights.recv, 0))
        values = _decompress_rows(compressor, rows, shape, dtype, d)
        mixed = weights.self_w * own
        for t in range(int(weights.counts)):
            mixed = mixed + weights.nbr_w[t] * values[weights.pos[t]]
    return own, mixed


def _decompress_rows(
    compressor: Compressor, rows: np.ndarray, shape: tuple[int, ...], dtype: np.dtype, d: int
) -> np.ndarray:
    """Return the float64 values ``(m, d)`` of ``m`` packed payload rows."""
    if rows.shape[0] == 0:
        return np.zeros((0, d))
    payload = unpack(compressor, rows, shape, dtype, stacked=True)
    values: np.ndarray = np.asarray(compressor.decompress_stacked(payload), dtype=np.float64)
    return values.reshape(rows.shape[0], d)


def _mix_stacked(own: np.ndarray, values: np.ndarray, weights: MixWeights) -> np.ndarray:
    """Mix the stacked agents' own terms and the received rows they combine (grouped by agent)."""
    mixed: np.ndarray = weights.self_w[:, None] * own
    counts = weights.counts
    if weights.uniform:
        received = values.reshape(own.shape[0], -1, own.shape[1])
        for t in range(received.shape[1]):
            mixed = mixed + weights.nbr_w[:, t, None] * received[:, t]
        return mixed
    starts = np.concatenate([[0], np.cumsum(weights.recv)[:-1]])
    for t in range(weights.nbr_w.shape[1]):
        # only the agents with a t-th in-neighbor add: a padded 0 * 0 could turn -0.0 into +0.0
        has = counts > t
        picked = values[starts[has] + weights.pos[has, t]]
        mixed[has] = mixed[has] + weights.nbr_w[has, t, None] * picked
    return mixed


def compressed_neighbor_allreduce(
    x: ArrayLike,
    compressor: Compressor,
    rng: StackedGenerator | np.random.Generator | None = None,
    self_weight: SelfWeight = None,
    src_weights: Weights = None,
) -> Value:
    """Return the weighted average of own and in-neighbors' compressed values.

    ``x_i <- w_ii C(x_i) + sum_j w_ij C(x_j)``. Without weights, the static topology's (its
    own if it was set with ``is_weighted=True``, else ``1/(in-degree + 1)``, as
    :func:`fogsim.neighbor_allreduce` takes them). Per-call weights, as that op reads them:

    * ``src_weights`` one ``n x n`` matrix or :class:`~fogsim.topology.Topology` for the
      step (a dynamic schedule's ``step.weights``), ``w_ii`` from its diagonal unless
      ``self_weight`` is given: each agent sends its payload only to the agents whose row
      weighs it (``neighbor_allgather`` with this step's ``src_ranks``/``dst_ranks``).
    * ``self_weight`` and ``src_weights`` per agent (``{rank: weight}``; stacked in
      simulation, a sequence of n dicts): the senders are the static topology's, since a
      sender cannot tell which receivers weigh it; the keys must be in-neighbors, and every
      out-neighbor of the topology receives the payload (as in the uncompressed op).

    Only the packed payloads travel (``compressor.payload_bytes`` per destination, counted
    by ``fs.bytes_sent()``). ``rng`` is the agents' generator for a randomized compressor
    (default ``fs.rng()``, so every mode draws the same numbers). With
    :func:`~fogsim.compress.identity` this is ``fs.neighbor_allreduce(x, self_weight,
    src_weights)``, bit for bit. The result has ``x``'s type and dtype (mixed in float64).
    """
    _check_compressor(compressor)
    # a float array (a device's values copied to the host), else the compressor's
    # TypeError, before any exchange
    arr, kind = _values(x)
    if isinstance(compressor, Identity):
        if src_weights is None and self_weight is None:
            out: Value = fs.neighbor_allreduce(x)
        else:
            out = fs.neighbor_allreduce(x, self_weight, src_weights)
        return out
    weights = MixWeights.per_call(self_weight, src_weights)
    _, mixed = _exchange(arr, compressor, rng, weights)
    return _wrap(mixed.astype(arr.dtype).reshape(arr.shape), kind)


class CompressedGossip:
    """CHOCO-gossip: gossip with compressed differences and error feedback.

    Koloskova, Stich and Jaggi (2019), Algorithm 1, in its memory-efficient form. Every agent
    keeps its public copy ``x_hat_i`` (what its neighbors know of it; zero at the start) and
    ``s_i = sum_j w_ij x_hat_j`` (itself included); one :meth:`step` is::

        q_i = C(x_i - x_hat_i);  x_hat_i += q_i;  s_i += w_ii q_i + sum_j w_ij q_j
        x_i += gamma (s_i - x_hat_i)

    Only ``q`` travels (one compressed exchange per step). With a doubly stochastic ``W``
    the average of ``x`` is preserved; for ``gamma`` small enough (the paper's bound, from
    the spectral gap of ``W`` and the compressor's ``delta``) every ``x_i`` tends to it
    linearly. The weights are the static topology's at construction, for every step: the
    running sum ``s_i`` holds ``sum_j w_ij x_hat_j`` for one fixed ``W``, so a dynamic
    topology (another ``W`` each step) does not fit it; ``bytes_sent`` is the
    cumulative bytes each agent has sent (stacked in simulation): ``payload_bytes`` times
    its out-degree per step.
    """

    def __init__(self, compressor: Compressor, gamma: float) -> None:
        _check_compressor(compressor)
        self.compressor = compressor
        self.gamma = check_gamma(gamma)
        self._weights = MixWeights.static()
        self._x_hat: np.ndarray | None = None
        self._s: np.ndarray | None = None
        self.bytes_sent: Any = (
            np.zeros_like(self._weights.out_degree) if self._weights.stacked else 0
        )

    @overload
    def step(
        self, x: np.ndarray, rng: StackedGenerator | np.random.Generator | None = None
    ) -> np.ndarray: ...
    @overload
    def step(
        self, x: torch.Tensor, rng: StackedGenerator | np.random.Generator | None = None
    ) -> torch.Tensor: ...
    @overload
    def step(
        self, x: ArrayLike, rng: StackedGenerator | np.random.Generator | None = None
    ) -> np.ndarray | torch.Tensor: ...
    def step(
        self, x: ArrayLike, rng: StackedGenerator | np.random.Generator | None = None
    ) -> np.ndarray | torch.Tensor:
        """Return ``x`` after one CHOCO-gossip step (same type, shape and dtype)."""
        arr, kind = _to_host(x)  # a device's values are mixed on the host
        _values(arr)  # a float array, else the compressor's TypeError naming x
        w = self._weights
        lead = arr.shape[:1] if w.stacked else ()
        flat = arr.reshape(*lead, -1).astype(np.float64)
        if self._x_hat is None or self._s is None:
            self._x_hat, self._s = np.zeros_like(flat), np.zeros_like(flat)
        elif self._x_hat.shape != flat.shape:
            raise ValueError(
                f"x has shape {arr.shape}, but this gossip state holds values of "
                f"{self._x_hat.shape[len(lead) :]} entries per agent"
            )
        diff = (flat - self._x_hat).astype(arr.dtype).reshape(arr.shape)
        if isinstance(self.compressor, Identity):
            q = diff.reshape(flat.shape).astype(np.float64)
            mixed = np.asarray(fs.neighbor_allreduce(diff)).reshape(flat.shape)
        else:
            q, mixed = _exchange(diff, self.compressor, rng, w)
        self._x_hat = self._x_hat + q
        self._s = self._s + mixed
        new = flat + self.gamma * (self._s - self._x_hat)
        nbytes = self.compressor.payload_bytes(arr.shape[len(lead) :], arr.dtype)
        self.bytes_sent = self.bytes_sent + nbytes * w.out_degree
        out: np.ndarray | torch.Tensor = wrap_like(new.astype(arr.dtype).reshape(arr.shape), kind)
        return out

    @property
    def x_hat(self) -> np.ndarray | None:
        """The agents' public copies ``x_hat_i`` (flat, float64), None before the first step."""
        return self._x_hat


def check_gamma(gamma: Any) -> float:
    """Return the consensus step size ``gamma`` if it is a real number in (0, 1]."""
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma must be a real number in (0, 1], got {type(gamma).__name__}")
    value = float(gamma)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
    return value


def _check_compressor(compressor: Any) -> None:
    if not isinstance(compressor, Compressor):
        raise TypeError(
            "compressor must be a fogsim.compress.Compressor (e.g. fogsim.compress.top_k(0.1)), "
            f"got {type(compressor).__name__}"
        )


_api.set_compressed_gossip(compressed_neighbor_allreduce)  # neighbor_allreduce(compressor=)
