"""The :class:`Topology` class: an immutable weight matrix ``W`` of ``n`` agents."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeAlias, Union

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ._circulant import (
    CirculantForm,
    detect_circulant,
    expand_circulant,
    has_partial_zeros,
    make_circulant,
)
from ._exact import uniform_split
from ._util import check_agent, check_positive_int, readonly

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["CirculantForm", "Topology", "TopologyData", "WeightMatrix", "as_topology"]

#: An n x n weight matrix for one step (``W[i, j]``: what agent i applies to agent j's value).
WeightMatrix: TypeAlias = Union[np.ndarray, "sp.sparray", "sp.spmatrix", "Topology"]

#: What :func:`as_topology` takes: a weight matrix, a networkx graph (edge j -> i carrying
#: ``weight`` W[i, j]), or nested lists of numbers.
TopologyData: TypeAlias = Union[WeightMatrix, "nx.Graph", npt.ArrayLike]

_INT32_MAX = np.iinfo(np.int32).max


class Topology:
    """Weighted directed communication graph of ``n`` agents, held as its weight matrix.

    ``W[i, j]`` is the weight agent ``i`` applies to the value it receives from agent ``j``;
    the diagonal holds the self weights. Neighbor averaging is ``X <- W X``. A topology is
    immutable; the arrays it returns are read-only and shared.
    """

    __slots__ = (
        "_size",
        "_csr",
        "_form",
        "_form_known",
        "_offdiag",
        "_offdiag_t",
        "_weights_fine",
    )

    def __init__(self, matrix: npt.ArrayLike | sp.sparray | sp.spmatrix) -> None:
        self._set(_matrix_to_csr(matrix, "topology"), None)

    def _set(self, csr: sp.csr_array | None, form: CirculantForm | None, size: int = 0) -> None:
        self._size = int(csr.shape[0]) if csr is not None else size
        self._csr = csr
        self._form = form
        self._form_known = form is not None
        self._offdiag: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._offdiag_t: tuple[np.ndarray, np.ndarray] | None = None
        # found row- or column-stochastic by fogsim._weightcheck (immutable: checked once)
        self._weights_fine = False

    @classmethod
    def _from_csr(cls, csr: sp.csr_array) -> Topology:
        topo = cls.__new__(cls)
        topo._set(csr, None)
        return topo

    @classmethod
    def circulant(
        cls, size: int, offsets: npt.ArrayLike, weights: npt.ArrayLike, self_weight: npt.ArrayLike
    ) -> Topology:
        """Return the circulant topology where agent i receives from ``(i + offsets[k]) % size``.

        ``W[i, (i + offsets[k]) % n] = weights[k]`` (or ``weights[k, i]``), ``W[i, i] =
        self_weight`` (or ``self_weight[i]``). Stored in this compact form; the CSR and dense
        matrices are built only when asked for. A scalar ``weights`` applies to every offset;
        offsets whose weights are all zero are dropped, and per-agent weights with some zeros
        make a matrix-backed topology (no entry of a circulant form is zero).
        """
        size = check_positive_int(size, "size")
        form = make_circulant(size, offsets, weights, self_weight)
        if has_partial_zeros(form):
            return cls._from_csr(_csr_from_parts(size, *expand_circulant(size, form, True)))
        topo = cls.__new__(cls)
        topo._set(None, form, size)
        return topo

    @property
    def size(self) -> int:
        """Return the number of agents n."""
        return self._size

    def to_sparse(self) -> sp.csr_array:
        """Return ``W`` as a canonical read-only CSR array (n x n, diagonal included)."""
        if self._csr is None:
            assert self._form is not None
            parts = expand_circulant(self._size, self._form, diagonal=True)
            self._csr = _csr_from_parts(self._size, *parts)
        return self._csr

    def to_dense(self) -> np.ndarray:
        """Return ``W`` as a new dense float64 array."""
        dense: np.ndarray = self.to_sparse().toarray()
        return dense

    def to_networkx(self) -> nx.DiGraph:
        """Return ``W`` as a DiGraph: edge ``j -> i`` carries ``weight`` ``W[i, j]``."""
        import networkx as nx

        coo = self.to_sparse().tocoo()
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self._size))
        graph.add_weighted_edges_from(
            zip(coo.col.tolist(), coo.row.tolist(), coo.data.tolist(), strict=True)
        )
        return graph

    @property
    def self_weights(self) -> np.ndarray:
        """Return the self weights ``W[i, i]`` as a new (n,) float64 array (0 where absent)."""
        if self._form is not None:
            return np.broadcast_to(self._form.self_weight, (self._size,)).copy()
        diagonal: np.ndarray = self.to_sparse().diagonal()
        return diagonal

    def offdiag_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return the off-diagonal entries as CSR ``(indptr int64, indices int32, data float64)``.

        Column indices ascend within each row; the arrays are cached and read-only.
        """
        if self._offdiag is None:
            if self._csr is None and self._form is not None:
                indptr, indices, data = expand_circulant(self._size, self._form, diagonal=False)
            else:
                csr = self.to_sparse()
                rows = np.repeat(np.arange(self._size), np.diff(csr.indptr))
                keep = csr.indices != rows
                counts = np.bincount(rows[keep], minlength=self._size)
                indptr = np.concatenate([[0], np.cumsum(counts)])
                indices, data = csr.indices[keep], csr.data[keep]
            self._offdiag = (
                readonly(indptr.astype(np.int64)),
                readonly(indices.astype(np.int32)),
                readonly(data.astype(np.float64)),
            )
        return self._offdiag

    def circulant_form(self) -> CirculantForm | None:
        """Return the compact circulant form of ``W``, or None if ``W`` is not circulant.

        Matrix-built topologies are detected vectorized and reported when at most 64 distinct
        offsets ``(j - i) % n`` occur, each in every row.
        """
        if not self._form_known:
            csr = self.to_sparse()
            self._form = detect_circulant(self._size, csr.indptr, csr.indices, csr.data)
            self._form_known = True
        return self._form

    def in_neighbors(self, i: int) -> list[int]:
        """Return the agents ``j != i`` with ``W[i, j] != 0``, ascending."""
        i = check_agent(i, self._size)
        if self._form is not None:
            shifted: list[int] = ((self._form.offsets + i) % self._size).tolist()
            return sorted(shifted)
        indptr, indices, _ = self.offdiag_csr()
        neighbors: list[int] = indices[indptr[i] : indptr[i + 1]].tolist()
        return neighbors

    def out_neighbors(self, i: int) -> list[int]:
        """Return the agents ``j != i`` with ``W[j, i] != 0`` (receiving from i), ascending."""
        i = check_agent(i, self._size)
        if self._form is not None:
            shifted: list[int] = ((i - self._form.offsets) % self._size).tolist()
            return sorted(shifted)
        indptr, indices = self._transposed_pattern()
        neighbors: list[int] = indices[indptr[i] : indptr[i + 1]].tolist()
        return neighbors

    def _transposed_pattern(self) -> tuple[np.ndarray, np.ndarray]:
        if self._offdiag_t is None:
            indptr, indices, _ = self.offdiag_csr()
            rows = np.repeat(np.arange(self._size, dtype=np.int32), np.diff(indptr))
            order = np.argsort(indices, kind="stable")  # stable keeps rows ascending per column
            counts = np.bincount(indices, minlength=self._size)
            self._offdiag_t = (
                readonly(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)),
                readonly(rows[order]),
            )
        return self._offdiag_t

    def in_degrees(self) -> np.ndarray:
        """Return the number of in-neighbors of every agent (self excluded), int64 (n,)."""
        if self._form is not None:
            return np.full(self._size, self._form.num_offsets, dtype=np.int64)
        return np.diff(self.offdiag_csr()[0])

    def out_degrees(self) -> np.ndarray:
        """Return the number of out-neighbors of every agent (self excluded), int64 (n,)."""
        if self._form is not None:
            return np.full(self._size, self._form.num_offsets, dtype=np.int64)
        return np.bincount(self.offdiag_csr()[1], minlength=self._size).astype(np.int64)

    def uniform(self) -> Topology:
        """Return the same pattern with weights ``1 / (in_degree + 1)`` on self and in-neighbors.

        Exact: the neighbor weights are rounded to multiples of ``2**-53`` and the self weight
        is one minus them, so every row sums to exactly 1.0 in any order.
        """
        form = self.circulant_form()
        if form is not None:
            w, w_self = uniform_split(form.num_offsets)
            return Topology.circulant(self._size, form.offsets, float(w), float(w_self))
        indptr, indices, _ = self.offdiag_csr()
        degrees = np.diff(indptr)
        weight, self_weight = uniform_split(degrees)
        rows = np.repeat(np.arange(self._size), degrees)
        return _from_coo(
            self._size,
            np.concatenate([rows, np.arange(self._size)]),
            np.concatenate([indices, np.arange(self._size)]),
            np.concatenate([weight[rows], self_weight]),
        )

    def transpose(self) -> Topology:
        """Return the topology of ``W^T`` (push weights become pull weights and back)."""
        if self._form is not None:
            form, n = self._form, self._size
            if form.weights.ndim == 2:
                # W^T[i, i - o] = W[i - o, i] = w[i - o]: roll each row of weights by its offset.
                rows = (np.arange(n)[None, :] - form.offsets[:, None]) % n
                weights = np.take_along_axis(form.weights, rows, axis=1)
            else:
                weights = form.weights
            return Topology.circulant(n, n - form.offsets, weights, form.self_weight)
        csr = sp.csr_array(self.to_sparse().T)
        return Topology._from_csr(_canonical(csr))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        if self._size != other._size:
            return False
        if self._form is not None and other._form is not None:
            return self._form == other._form
        a, b = self.to_sparse(), other.to_sparse()
        return (
            np.array_equal(a.indptr, b.indptr)
            and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.data, b.data)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        form = self.circulant_form()
        if form is not None:
            offsets = form.offsets.tolist()
            shown = str(offsets) if len(offsets) <= 8 else f"{offsets[:8]}"[:-1] + ", ...]"
            edges = self._size * len(offsets)
            return f"Topology(size={self._size}, edges={edges}, circulant offsets={shown})"
        return f"Topology(size={self._size}, edges={self.offdiag_csr()[1].shape[0]})"


def as_topology(obj: TopologyData, size: int | None = None, argname: str = "topology") -> Topology:
    """Return ``obj`` as a :class:`Topology`, checking it has ``size`` agents when given.

    Accepts a Topology, a networkx DiGraph/Graph (edge ``j -> i`` with ``weight`` becomes
    ``W[i, j]``; missing weights are 1.0), a dense array-like or a scipy sparse matrix/array.
    """
    if isinstance(obj, Topology):
        topo = obj
    elif _is_networkx_graph(obj):
        topo = Topology._from_csr(_graph_to_csr(obj, argname))
    elif (
        sp.issparse(obj) or isinstance(obj, (np.ndarray, list, tuple)) or hasattr(obj, "__array__")
    ):
        topo = Topology._from_csr(_matrix_to_csr(obj, argname))
    else:
        raise TypeError(
            f"{argname} must be a Topology, a networkx graph or an n x n weight matrix, "
            f"got {type(obj).__name__}"
        )
    if size is not None:
        size = check_positive_int(size, "size")
        if topo.size != size:
            raise ValueError(f"{argname} has {topo.size} agents but the world has {size}")
    return topo


def _is_networkx_graph(obj: object) -> bool:
    # A networkx graph exists only once networkx is imported: no need to import it here.
    nx = sys.modules.get("networkx")
    return nx is not None and isinstance(obj, nx.Graph)


def _matrix_to_csr(matrix: Any, argname: str) -> sp.csr_array:
    if sp.issparse(matrix):
        shape = matrix.shape
        dtype = matrix.dtype
    else:
        if np.iscomplexobj(matrix):
            raise TypeError(f"{argname} weights must be real, got complex values")
        try:
            matrix = np.asarray(matrix, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{argname} weights must be real numbers: {exc}") from None
        shape, dtype = matrix.shape, matrix.dtype
    if np.issubdtype(dtype, np.complexfloating):
        raise TypeError(f"{argname} weights must be real, got complex values")
    if not np.issubdtype(dtype, np.number) and dtype != np.bool_:
        raise TypeError(f"{argname} weights must be real numbers, got dtype {dtype}")
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"{argname} must be a square n x n matrix, got shape {tuple(shape)}")
    if shape[0] < 1:
        raise ValueError(f"{argname} must have at least one agent")
    if sp.issparse(matrix):
        coo = sp.coo_array(matrix)
        bad = ~np.isfinite(coo.data)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            _raise_nonfinite(argname, int(coo.row[k]), int(coo.col[k]), coo.data[k])
        csr = sp.csr_array(matrix, dtype=np.float64, copy=True)
    else:
        bad = ~np.isfinite(matrix)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            _raise_nonfinite(argname, int(i), int(j), matrix[i, j])
        csr = sp.csr_array(matrix)
    return _canonical(csr)


def _raise_nonfinite(argname: str, i: int, j: int, value: float) -> None:
    raise ValueError(f"{argname} weight W[{i}, {j}] is {value}")


def _graph_to_csr(graph: nx.Graph, argname: str) -> sp.csr_array:
    n = graph.number_of_nodes()
    if n < 1:
        raise ValueError(f"{argname} must have at least one agent")
    nodes = list(graph.nodes)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in nodes) or (
        sorted(nodes) != list(range(n))
    ):
        shown = sorted(map(repr, nodes))[:5]
        raise ValueError(f"{argname} nodes must be exactly 0..{n - 1}, got {shown}...")
    edges = list(graph.edges(data="weight", default=1.0))
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    try:
        w = np.array([e[2] for e in edges], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{argname} edge weights must be real numbers: {exc}") from None
    bad = ~np.isfinite(w)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{argname} edge {src[k]} -> {dst[k]} has weight {w[k]}")
    if not graph.is_directed():
        loop = src == dst
        src, dst = np.concatenate([src, dst[~loop]]), np.concatenate([dst, src[~loop]])
        w = np.concatenate([w, w[~loop]])
    return _canonical(sp.csr_array((w, (dst, src)), shape=(n, n)))


def _canonical(csr: sp.csr_array) -> sp.csr_array:
    """Return ``csr`` summed, zero-free, sorted, float64, with the canonical index dtype."""
    csr.sum_duplicates()
    csr.eliminate_zeros()
    csr.sort_indices()
    return _csr_from_parts(csr.shape[0], csr.indptr, csr.indices, csr.data)


def _csr_from_parts(
    n: int, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray
) -> sp.csr_array:
    # One index-dtype rule for every construction path, so equal matrices have equal arrays.
    dtype = np.int32 if max(n, indices.shape[0]) <= _INT32_MAX else np.int64
    csr = sp.csr_array(
        (
            readonly(np.array(data, dtype=np.float64)),
            readonly(np.array(indices, dtype=dtype)),
            readonly(np.array(indptr, dtype=dtype)),
        ),
        shape=(n, n),
    )
    csr.has_canonical_format = True
    return csr


def _from_coo(n: int, rows: np.ndarray, cols: np.ndarray, data: np.ndarray) -> Topology:
    return Topology._from_csr(_canonical(sp.csr_array((data, (rows, cols)), shape=(n, n))))
