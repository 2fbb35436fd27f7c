"""The compact form of circulant weight matrices: building, normalising, detecting, expanding."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._util import readonly

__all__ = [
    "CirculantForm",
    "detect_circulant",
    "expand_circulant",
    "has_partial_zeros",
    "make_circulant",
    "row_weights",
]

#: Matrix-built topologies with more distinct offsets than this are not reported as circulant.
MAX_DETECTED_OFFSETS = 64


@dataclass(frozen=True, eq=False)
class CirculantForm:
    """Compact form of a circulant weight matrix.

    ``W[i, (i + offsets[k]) % n] = weights[k]`` (or ``weights[k, i]``) and
    ``W[i, i] = self_weight`` (or ``self_weight[i]``).

    ``offsets`` is int64, strictly ascending, each in ``[1, n - 1]``; ``weights`` is float64 of
    shape ``(K,)`` when every row uses the same weight for each offset, else ``(K, n)``;
    ``self_weight`` is float64 of shape ``()`` when constant, else ``(n,)``. The arrays are
    read-only.
    """

    offsets: np.ndarray
    weights: np.ndarray
    self_weight: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CirculantForm):
            return NotImplemented
        return (
            np.array_equal(self.offsets, other.offsets)
            and self.weights.shape == other.weights.shape
            and np.array_equal(self.weights, other.weights)
            and self.self_weight.shape == other.self_weight.shape
            and np.array_equal(self.self_weight, other.self_weight)
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def num_offsets(self) -> int:
        """Return the number K of off-diagonal offsets."""
        return int(self.offsets.shape[0])


def make_circulant(
    size: int, offsets: ArrayLike, weights: ArrayLike, self_weight: ArrayLike
) -> CirculantForm:
    """Validate and normalise circulant parameters (per-agent zero weights are kept)."""
    fast = _make_scalar_circulant(size, offsets, weights, self_weight)
    if fast is not None:
        return fast
    offs = np.asarray(offsets)
    if offs.ndim == 0:
        offs = offs.reshape(1)
    if offs.ndim != 1:
        raise ValueError(f"circulant offsets must be 1-D, got shape {offs.shape}")
    if offs.size == 0:
        offs = np.zeros(0, dtype=np.int64)
    elif not np.issubdtype(offs.dtype, np.integer):
        raise TypeError(f"circulant offsets must be integers, got dtype {offs.dtype}")
    reduced = offs.astype(np.int64) % size
    num = reduced.shape[0]
    if num and not reduced.all():
        k = int(np.flatnonzero(reduced == 0)[0])
        raise ValueError(f"circulant offset {offs[k]} is 0 mod size {size} (the self weight)")
    order = np.argsort(reduced, kind="stable")
    reduced = reduced[order]
    if num > 1 and (dup := np.flatnonzero(reduced[1:] == reduced[:-1])).size:
        a, b = sorted(order[dup[0] : dup[0] + 2])
        raise ValueError(f"circulant offsets {offs[a]} and {offs[b]} coincide mod size {size}")

    w = _float_array(weights, "circulant weights")
    if w.ndim == 0:
        w = np.full(num, float(w))
    elif w.shape not in ((num,), (num, size)):
        raise ValueError(
            f"circulant weights must have shape ({num},) or ({num}, {size}) "
            f"for {num} offsets and size {size}, got {w.shape}"
        )
    if not np.isfinite(w).all():
        bad = tuple(np.argwhere(~np.isfinite(w))[0])
        where = f" (agent {bad[1]})" if len(bad) == 2 else ""
        raise ValueError(f"circulant weight for offset {offs[bad[0]]}{where} is {w[bad]}")
    s = _float_array(self_weight, "self_weight")
    if s.shape not in ((), (size,)):
        raise ValueError(f"self_weight must be a scalar or have shape ({size},), got {s.shape}")
    if not np.isfinite(s).all():
        i = int(np.argwhere(~np.isfinite(s.reshape(-1)))[0][0])
        raise ValueError(f"self_weight of agent {i} is {s.reshape(-1)[i]}")
    w = w[order]
    if w.ndim == 2:
        keep = w.any(axis=1)
    else:
        keep = w != 0
    if not keep.all():
        reduced, w = reduced[keep], w[keep]
    return _normalised(reduced, w, s)


def _make_scalar_circulant(
    size: int, offsets: object, weights: object, self_weight: object
) -> CirculantForm | None:
    # Dynamic schedules build a circulant per step: for plain Python scalars skip numpy's
    # per-call overhead. Anything unusual (or invalid) takes the general path.
    scalar = (int, float)
    if not (
        isinstance(offsets, (list, tuple))
        and all(type(o) is int for o in offsets)
        and isinstance(weights, scalar)
        and isinstance(self_weight, scalar)
        and math.isfinite(weights)
        and math.isfinite(self_weight)
    ):
        return None
    return _scalar_circulant(size, tuple(offsets), float(weights), float(self_weight))


@functools.lru_cache(maxsize=256)
def _scalar_circulant(
    size: int, offsets: tuple[int, ...], weight: float, self_weight: float
) -> CirculantForm | None:
    reduced = sorted(o % size for o in offsets)
    if (reduced and reduced[0] == 0) or len(set(reduced)) != len(reduced):
        return None
    if weight == 0:
        reduced = []
    return CirculantForm(
        readonly(np.array(reduced, dtype=np.int64)),
        readonly(np.array([weight] * len(reduced), dtype=np.float64)),
        readonly(np.array(self_weight)),
    )


def _float_array(value: ArrayLike, name: str) -> np.ndarray:
    if np.iscomplexobj(value):
        raise TypeError(f"{name} must be real, got complex values")
    try:
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be real numbers: {exc}") from None


def _normalised(offsets: np.ndarray, weights: np.ndarray, self_weight: np.ndarray) -> CirculantForm:
    # Constant rows compress so that equal matrices always have equal forms.
    if weights.ndim == 2 and (weights.shape[1] == 0 or (weights == weights[:, :1]).all()):
        weights = weights[:, 0].copy() if weights.shape[1] else np.zeros(weights.shape[0])
    if self_weight.ndim == 1 and (self_weight == self_weight[0]).all():
        self_weight = np.array(self_weight[0])
    return CirculantForm(
        readonly(np.ascontiguousarray(offsets, dtype=np.int64)),
        readonly(np.ascontiguousarray(weights, dtype=np.float64)),
        readonly(np.array(self_weight, dtype=np.float64)),
    )


def row_weights(form: CirculantForm, size: int) -> np.ndarray:
    """Return the weights as a ``(K, size)`` array (a broadcast view when constant)."""
    if form.weights.ndim == 2:
        return form.weights
    return np.broadcast_to(form.weights[:, None], (form.num_offsets, size))


def has_partial_zeros(form: CirculantForm) -> bool:
    """Return whether some but not all rows have a zero weight for some offset."""
    return form.weights.ndim == 2 and not form.weights.all()


def expand_circulant(
    size: int, form: CirculantForm, diagonal: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return CSR ``(indptr, indices, data)`` of the form, columns ascending, zeros dropped.

    With ``diagonal`` the self weights are included, else only off-diagonal entries.
    """
    n = size
    if diagonal:
        pos = np.concatenate([[0], form.offsets])
        if form.weights.ndim == 2 or form.self_weight.ndim == 1:
            vals = np.vstack(
                [np.broadcast_to(form.self_weight, (n,))[None, :], row_weights(form, n)]
            )
        else:
            vals = np.concatenate([form.self_weight[None], form.weights])
    else:
        pos, vals = form.offsets, form.weights
    m = pos.shape[0]
    rows = np.arange(n, dtype=np.int64)
    # Row i lists (i + pos) % n; the wrapped tail (pos >= n - i) sorts first, so each row is
    # a rotation of pos and no per-row sort is needed.
    wrapped = m - np.searchsorted(pos, n - rows)
    idx = (np.arange(m)[None, :] + (m - wrapped)[:, None]) % m
    cols = rows[:, None] + pos[idx]
    cols[cols >= n] -= n
    data = vals[idx, rows[:, None]] if vals.ndim == 2 else vals[idx]
    cols, data = cols.reshape(-1), data.reshape(-1)
    nonzero = data != 0
    if nonzero.all():
        indptr = np.arange(n + 1, dtype=np.int64) * m
    else:
        counts = nonzero.reshape(n, m).sum(axis=1)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        cols, data = cols[nonzero], data[nonzero]
    return indptr, cols, np.ascontiguousarray(data, dtype=np.float64)


def detect_circulant(
    size: int, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray
) -> CirculantForm | None:
    """Return the circulant form of a canonical CSR matrix, or None if it is not circulant.

    Off-diagonal entries have offsets ``(j - i) % n``; the matrix is circulant when at most
    ``MAX_DETECTED_OFFSETS`` distinct offsets occur, each exactly ``n`` times.
    """
    n = size
    counts = np.diff(indptr)
    rows = np.repeat(np.arange(n, dtype=np.int64), counts)
    on_diag = indices == rows
    self_weight = np.zeros(n)
    self_weight[rows[on_diag]] = data[on_diag]
    off = ~on_diag
    num_off = int(indices.shape[0] - np.count_nonzero(on_diag))
    if num_off % n or num_off // n > MAX_DETECTED_OFFSETS:
        return None
    k_total = num_off // n
    if k_total == 0:
        return _normalised(np.zeros(0, np.int64), np.zeros(0), self_weight)
    off_rows = rows[off]
    offsets = (indices[off].astype(np.int64) - off_rows) % n
    seen = np.bincount(offsets, minlength=n)
    distinct = np.flatnonzero(seen)
    if distinct.shape[0] != k_total or (seen[distinct] != n).any():
        return None
    lookup = np.empty(n, dtype=np.int64)
    lookup[distinct] = np.arange(k_total)
    weights = np.empty((k_total, n))
    weights[lookup[offsets], off_rows] = data[off]
    return _normalised(distinct, weights, self_weight)
