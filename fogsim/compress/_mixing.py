"""The mixing weights of one compressed exchange, for the agents of this process.

Either the static topology's (:meth:`MixWeights.static`) or one call's
(:meth:`MixWeights.per_call`), read by the rules of :func:`fogsim.neighbor_allreduce`:

* ``src_weights`` one ``n x n`` matrix (or Topology) for the whole step: agent i hears the
  agents of row i's off-diagonal pattern and tells those of column i's, so the payloads
  move only along this step's edges; self weights from the diagonal unless ``self_weight``
  is given.
* ``self_weight`` and ``src_weights`` per agent (``{rank: weight}``, stacked in simulation):
  a sender cannot know which receivers weigh it, so, as in the uncompressed op, the payloads
  move over the static topology and each receiver combines the rows of its keys, which must
  be in-neighbors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import fogsim as fs

from .. import _weightcheck
from ..backends._runtime.plan import rank_weights, scalar_weight
from ..backends._weights import check_partners, is_matrix
from ..topology import Topology, as_topology

__all__ = ["MixWeights"]

_OP = "neighbor_allreduce"


class MixWeights:
    """Who sends to whom, and the weights each agent here mixes with.

    ``self_w``, ``recv`` (rows each agent receives), ``counts`` (rows it combines) and
    ``out_degree`` have the agent axis ``lead`` (``(rows,)`` stacked, ``()`` distributed);
    ``pos`` and ``nbr_w`` are ``lead + (max count,)``, zero-padded: entry t combines
    received row ``pos[t]`` with weight ``nbr_w[t]``, sources ascending (the order
    ``neighbor_allgather`` delivers them, and the uncompressed op's accumulation order).
    ``src_ranks``/``dst_ranks`` are the call's ``neighbor_allgather`` arguments (None: the
    static topology's neighbors).
    """

    def __init__(
        self,
        stacked: bool,
        self_w: np.ndarray,
        recv: np.ndarray,
        pos: np.ndarray,
        nbr_w: np.ndarray,
        counts: np.ndarray,
        out_degree: np.ndarray,
        ranks: tuple[Any, Any] | None = None,
    ) -> None:
        width = nbr_w.shape[1]
        self.stacked = stacked
        # every agent combines all `width` rows it receives, in order: one reshape mixes them
        self.uniform = bool(
            np.all(counts == width)
            and np.all(recv == width)
            and np.array_equal(pos, np.broadcast_to(np.arange(width), pos.shape))
        )
        self.src_ranks: Any = None if ranks is None else ranks[0]
        self.dst_ranks: Any = None if ranks is None else ranks[1]
        if stacked:
            self.self_w, self.recv, self.pos, self.nbr_w = self_w, recv, pos, nbr_w
            self.counts = counts
            self.out_degree: Any = out_degree
        else:
            self.self_w, self.recv, self.pos, self.nbr_w = self_w[0], recv[0], pos[0], nbr_w[0]
            self.counts, self.out_degree = counts[0], int(out_degree[0])

    @classmethod
    def static(cls) -> MixWeights:
        """The static topology's weights (its own if weighted, else ``1/(in-degree + 1)``)."""
        stacked, rows = _rows()
        topo = fs.load_topology()
        mix = topo if fs.is_topology_weighted() else topo.uniform()
        return cls._from_matrix(stacked, rows, mix, mix.self_weights[rows], topo, None)

    @classmethod
    def per_call(cls, self_weight: Any, src_weights: Any) -> MixWeights:
        """One call's weights; the static topology's when both arguments are None."""
        if check_partners(self_weight, src_weights, None):
            return cls.static()
        stacked, rows = _rows()
        n = fs.size()
        if is_matrix(src_weights):
            step = as_topology(src_weights, size=n, argname="src_weights")
            given = _self_weights(self_weight, stacked, rows, n)
            self_w = step.self_weights[rows] if given is None else given
            _check_matrix(step, self_w, rows, whole=given is None)
            ranks = _ranks(step, rows, stacked)
            return cls._from_matrix(stacked, rows, step, self_w, step, ranks)
        self_w = _self_weights(self_weight, stacked, rows, n)
        if self_w is None:
            raise ValueError("src_weights was given without self_weight; give both")
        return cls._from_dicts(stacked, rows, n, self_w, src_weights)

    @classmethod
    def _from_matrix(
        cls,
        stacked: bool,
        rows: np.ndarray,
        mix: Topology,
        self_w: np.ndarray,
        senders: Topology,
        ranks: tuple[Any, Any] | None,
    ) -> MixWeights:
        """Every agent combines all it receives: row r of ``mix``'s off-diagonal pattern."""
        indptr, _, data = mix.offdiag_csr()
        counts = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
        width = int(counts.max(initial=0))
        nbr_w = np.zeros((rows.size, width))
        for t in range(width):
            has = counts > t
            nbr_w[has, t] = data[indptr[rows[has]] + t]
        pos = np.broadcast_to(np.arange(width, dtype=np.int64), (rows.size, width))
        out_degree = senders.out_degrees()[rows]
        return cls(stacked, self_w, counts, pos, nbr_w, counts, out_degree, ranks)

    @classmethod
    def _from_dicts(
        cls, stacked: bool, rows: np.ndarray, n: int, self_w: np.ndarray, src_weights: Any
    ) -> MixWeights:
        """Per-agent dicts: the static topology's in-neighbors send, the keys' rows combine."""
        topo = fs.load_topology()
        indptr, indices, _ = topo.offdiag_csr()
        entries = _per_agent(src_weights, stacked, rows, n, "src_weights")
        parsed = []
        for r, entry in zip(rows.tolist(), entries, strict=True):
            srcs, w = rank_weights(entry, n, r, "src_weights")
            heard = indices[indptr[r] : indptr[r + 1]]
            missing = srcs[~np.isin(srcs, heard)]
            if missing.size:
                raise ValueError(
                    f"src_weights[{r}] names rank {missing[0]}, which is not an in-neighbor "
                    f"of agent {r} in the topology (in-neighbors {heard.tolist()}); with a "
                    "compressor per-agent src_weights use the topology's neighbors: pass one "
                    "weight matrix for a dynamic step"
                )
            parsed.append((np.searchsorted(heard, srcs), w, srcs))
        counts = np.array([p.size for p, _, _ in parsed], dtype=np.int64)
        width = int(counts.max(initial=0))
        pos = np.zeros((rows.size, width), dtype=np.int64)
        nbr_w = np.zeros((rows.size, width))
        for k, (p, w, _) in enumerate(parsed):
            pos[k, : p.size], nbr_w[k, : p.size] = p, w
        _check_rows(self_w, [(s, w) for _, w, s in parsed], rows, n)
        recv = (indptr[rows + 1] - indptr[rows]).astype(np.int64)
        return cls(stacked, self_w, recv, pos, nbr_w, counts, topo.out_degrees()[rows])


def _rows() -> tuple[bool, np.ndarray]:
    """Whether this process holds stacked agents, and their ranks."""
    ranks = fs.rank()
    return bool(np.ndim(ranks) > 0), np.atleast_1d(np.asarray(ranks, dtype=np.int64))


def _per_agent(value: Any, stacked: bool, rows: np.ndarray, n: int, argname: str) -> list[Any]:
    """The entries of a per-agent argument for the agents here (one entry distributed)."""
    if not stacked:
        return [value]
    if isinstance(value, dict) or not isinstance(value, list | tuple | np.ndarray):
        raise TypeError(
            f"{argname} must be a sequence of {n} per-agent dicts {{rank: weight}} or an "
            f"{n}x{n} weight matrix, got {type(value).__name__}"
        )
    if len(value) == n:
        return [value[r] for r in rows.tolist()]
    if len(value) == rows.size:  # a block of a sharded world, as fogsim.local builds it
        return list(value)
    raise ValueError(f"{argname} has {len(value)} entries; expected one per agent ({n})")


def _self_weights(value: Any, stacked: bool, rows: np.ndarray, n: int) -> np.ndarray | None:
    """``self_weight`` for the agents here as float64 ``(rows,)``, or None."""
    if value is None:
        return None
    if not stacked or np.ndim(value) == 0:
        return np.full(rows.size, scalar_weight(value, "self_weight"))
    entries = _per_agent(value, stacked, rows, n, "self_weight")
    return np.array(
        [scalar_weight(v, f"self_weight[{r}]") for r, v in zip(rows, entries, strict=True)]
    )


def _ranks(step: Topology, rows: np.ndarray, stacked: bool) -> tuple[Any, Any]:
    """``neighbor_allgather``'s ``src_ranks``/``dst_ranks`` for the agents here."""
    indptr, indices, _ = step.offdiag_csr()
    n = step.size
    receivers = np.repeat(np.arange(n), np.diff(indptr))[np.argsort(indices, kind="stable")]
    tptr = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=n))])
    src = [indices[indptr[r] : indptr[r + 1]].tolist() for r in rows.tolist()]
    dst = [receivers[tptr[r] : tptr[r + 1]].tolist() for r in rows.tolist()]
    return (src, dst) if stacked else (src[0], dst[0])


def _check_matrix(step: Topology, self_w: np.ndarray, rows: np.ndarray, whole: bool) -> None:
    """The uncompressed op's weight check of a step's matrix (a warning by default)."""
    if not _weightcheck.enabled():
        return
    if whole:  # every agent holds the whole step
        _weightcheck.check_topology(_OP, step)
        return
    indptr, indices, data = step.offdiag_csr()
    if rows.size == step.size and rows.size > 1:  # all agents here: rows and columns
        totals, columns = _weightcheck.csr_sums(self_w, indptr, indices, data, step.size)
        _weightcheck.check_sums(_OP, totals, columns)
        return
    for k, r in enumerate(rows.tolist()):
        total = float(self_w[k]) + float(np.sum(data[indptr[r] : indptr[r + 1]]))
        _weightcheck.check_row(_OP, r, total)


def _check_rows(
    self_w: np.ndarray, entries: list[tuple[np.ndarray, np.ndarray]], rows: np.ndarray, n: int
) -> None:
    """Per-agent weights: rows and columns when all agents are here, else each row."""
    if not _weightcheck.enabled():
        return
    totals = self_w + np.array([float(w.sum()) for _, w in entries])
    if rows.size == n and n > 1:

        def columns() -> np.ndarray:
            srcs = np.concatenate([s for s, _ in entries] + [np.zeros(0, np.int64)])
            data = np.concatenate([w for _, w in entries] + [np.zeros(0)])
            return self_w + np.bincount(srcs, data, minlength=n)

        _weightcheck.check_sums(_OP, totals, columns)
        return
    for r, total in zip(rows.tolist(), totals.tolist(), strict=True):
        _weightcheck.check_row(_OP, r, total)
