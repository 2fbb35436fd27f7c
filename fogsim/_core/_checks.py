"""Argument checks shared by the compiled kernels and the numpy fallback.

Both implementations validate through these functions, so they accept the same inputs and
raise the same errors with the same messages. The value scans (``finite``, ``csr_structure``,
``offsets``) are what the fallback runs; the compiled module runs equivalent C scans and calls
them only to word the error once its scan found a problem.

The combine kernels check everything memory safety depends on (types, shapes, contiguity,
aliasing, every index and offset), and the finiteness of the weights whose size does not grow
with the number of agents: ``weighted_combine``'s ``self_weight`` and ``weights``,
``circulant_combine``'s shared ``weights`` and ``self_weight``. Weights with one entry per
agent or per nonzero (``csr_combine``'s ``data`` and ``self_weight``, per-agent circulant
weights) are not scanned at every call, which would add about half the kernel's own memory
traffic; ``assemble_csr`` checks weights when the matrix is built.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT32 = np.dtype(np.int32)
INT64 = np.dtype(np.int64)
# Column indices are int32, so the largest usable agent count is 2**31.
MAX_AGENTS = 2**31

__all__: list[str] = []

_Item = TypeVar("_Item")


def array(
    name: str, a: object, dtype: np.dtype[Any] | None, ndim: int | tuple[int, ...]
) -> np.ndarray:
    """Check that *a* is a C-contiguous ndarray of *dtype* (None: float32/float64)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}")
    if dtype is None:
        if a.dtype != FLOAT64 and a.dtype != FLOAT32:
            raise TypeError(f"{name} must have dtype float32 or float64, got {a.dtype}")
    elif a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype}, got {a.dtype}")
    ndims = ndim if isinstance(ndim, tuple) else (ndim,)
    if a.ndim not in ndims:
        wanted = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"{name} must be {wanted}, got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return a


def count(name: str, v: object) -> int:
    """Return the agent count *v* as an int in [1, MAX_AGENTS]."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    if not 1 <= int(v) <= MAX_AGENTS:
        raise ValueError(f"{name} must be in [1, {MAX_AGENTS}], got {v}")
    return int(v)


def shape(name: str, a: np.ndarray, *expected: tuple[int, ...]) -> None:
    """Check that *a* has one of the *expected* shapes."""
    if a.shape not in expected:
        wanted = " or ".join(str(s) for s in expected)
        raise ValueError(f"{name} must have shape {wanted}, got {a.shape}")


def output(out: np.ndarray, x: np.ndarray) -> None:
    """Check that *out* can receive a result shaped like *x* without aliasing it."""
    array("out", out, x.dtype, x.ndim)
    shape("out", out, x.shape)
    if not out.flags.writeable:
        raise ValueError("out is read-only")


def real(name: str, v: object) -> float:
    """Return the real number *v* as a finite float."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    w = float(v)
    if not math.isfinite(w):
        raise ValueError(f"{name} must be finite, got {w}")
    return w


def finite(name: str, a: np.ndarray) -> None:
    """Check that every entry of the float64 array *a* is finite."""
    ok = np.isfinite(a)
    if not ok.all():
        where = np.unravel_index(int(np.argmin(ok)), a.shape)
        index = f"[{', '.join(str(int(j)) for j in where)}]" if a.ndim else ""
        raise ValueError(f"{name}{index} must be finite, got {a[where]}")


# --- per-kernel structural checks (types, shapes, aliasing) ---------------------------------


def weighted_combine_args(
    out: np.ndarray, self_weight: float, x: np.ndarray, weights: np.ndarray, ys: np.ndarray
) -> float:
    """Check the arguments of ``weighted_combine`` and return ``self_weight`` as a float."""
    array("x", x, None, 1)
    output(out, x)
    sw = real("self_weight", self_weight)
    array("weights", weights, FLOAT64, 1)
    array("ys", ys, x.dtype, 2)
    shape("ys", ys, (weights.shape[0], x.shape[0]))
    if np.may_share_memory(out, ys):
        raise ValueError("out must not share memory with ys")
    # C-contiguous arrays of one shape that start at the same address are the same memory.
    if np.may_share_memory(out, x) and (
        out.__array_interface__["data"][0] != x.__array_interface__["data"][0]
    ):
        raise ValueError("out must be x itself or not share memory with x")
    return sw


def csr_combine_args(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> None:
    """Check the arguments of ``csr_combine``, except the values of indptr and indices."""
    array("x", x, None, 2)
    output(out, x)
    if np.may_share_memory(out, x):
        raise ValueError("out must not share memory with x")
    n = x.shape[0]
    array("indptr", indptr, INT64, 1)
    shape("indptr", indptr, (n + 1,))
    array("indices", indices, INT32, 1)
    array("data", data, FLOAT64, 1)
    shape("data", data, indices.shape)
    array("self_weight", self_weight, FLOAT64, 1)
    shape("self_weight", self_weight, (n,))


def row_range(start: int, stop: int, n: int) -> tuple[int, int]:
    """Return ``start, stop`` as ints, checking that ``0 <= start <= stop <= n``."""
    for name, v in (("start", start), ("stop", stop)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
    start, stop = int(start), int(stop)
    if not 0 <= start <= stop <= n:
        raise ValueError(
            f"rows [start, stop) = [{start}, {stop}) are not a range of the {n} rows:"
            " 0 <= start <= stop <= n is required"
        )
    return start, stop


def circulant_combine_args(
    offsets: np.ndarray,
    weights: np.ndarray,
    self_weight: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
) -> None:
    """Check the arguments of ``circulant_combine``, except the values of offsets."""
    array("x", x, None, 2)
    output(out, x)
    if np.may_share_memory(out, x):
        raise ValueError("out must not share memory with x")
    n = x.shape[0]
    array("offsets", offsets, INT64, 1)
    k = offsets.shape[0]
    array("weights", weights, FLOAT64, (1, 2))
    shape("weights", weights, (k,), (k, n))
    array("self_weight", self_weight, FLOAT64, (0, 1))
    shape("self_weight", self_weight, (), (1,), (n,))


# --- value scans -----------------------------------------------------------------------------


def csr_structure(indptr: np.ndarray, indices: np.ndarray, n: int) -> None:
    """Check that indptr delimits len(indices) entries and that every index is in [0, n)."""
    nnz = indices.shape[0]
    if indptr[0] != 0:
        raise ValueError(f"indptr[0] must be 0, got {indptr[0]}")
    down = np.flatnonzero(indptr[1:] < indptr[:-1])
    if down.size:
        i = int(down[0])
        raise ValueError(
            f"indptr must be non-decreasing, but indptr[{i + 1}] = {indptr[i + 1]}"
            f" < indptr[{i}] = {indptr[i]}"
        )
    if indptr[n] != nnz:
        raise ValueError(f"indptr[{n}] must equal len(indices) = {nnz}, got {indptr[n]}")
    bad = np.flatnonzero((indices < 0) | (indices >= n))
    if bad.size:
        p = int(bad[0])
        raise ValueError(f"indices[{p}] = {indices[p]} is out of range for {n} agents")


def csr_row_structure(
    indptr: np.ndarray, indices: np.ndarray, n: int, start: int, stop: int
) -> None:
    """``csr_structure`` for what rows ``[start, stop)`` read: ``indptr[start..stop]``
    within ``[0, len(indices)]`` and non-decreasing, and their entries' indices in range."""
    nnz = indices.shape[0]
    if indptr[0] != 0:
        raise ValueError(f"indptr[0] must be 0, got {indptr[0]}")
    if indptr[start] < 0:
        raise ValueError(f"indptr[{start}] must not be negative, got {indptr[start]}")
    part = indptr[start : stop + 1]
    down = np.flatnonzero(part[1:] < part[:-1])
    if down.size:
        i = start + int(down[0])
        raise ValueError(
            f"indptr must be non-decreasing, but indptr[{i + 1}] = {indptr[i + 1]}"
            f" < indptr[{i}] = {indptr[i]}"
        )
    if indptr[n] != nnz:
        raise ValueError(f"indptr[{n}] must equal len(indices) = {nnz}, got {indptr[n]}")
    if indptr[stop] > nnz:
        raise ValueError(f"indptr[{stop}] = {indptr[stop]} exceeds len(indices) = {nnz}")
    first = int(indptr[start])
    read = indices[first : int(indptr[stop])]
    bad = np.flatnonzero((read < 0) | (read >= n))
    if bad.size:
        p = first + int(bad[0])
        raise ValueError(f"indices[{p}] = {indices[p]} is out of range for {n} agents")


def offsets(offs: np.ndarray, n: int) -> None:
    """Check that the offsets are strictly ascending and each in [1, n - 1]."""
    bad = np.flatnonzero((offs < 1) | (offs > n - 1))
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"offsets[{k}] = {offs[k]} is out of range: offsets must be in [1, n - 1]"
            f" for n = {n} agents"
        )
    down = np.flatnonzero(offs[1:] <= offs[:-1])
    if down.size:
        k = int(down[0]) + 1
        raise ValueError(
            f"offsets must be strictly ascending, but offsets[{k}] = {offs[k]}"
            f" <= offsets[{k - 1}] = {offs[k - 1]}"
        )


# --- assemble_csr ----------------------------------------------------------------------------


def agent_count(n: object) -> int:
    """Return the agent count *n* as an int."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"n must be an integer, got {type(n).__name__}")
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    if n > MAX_AGENTS:
        raise ValueError(f"n = {n} is too large: column indices are int32")
    return n


def row_items(rows: Iterable[_Item], n: int, argname: str) -> Sequence[_Item]:
    """Return *rows* as a list or tuple of *n* items."""
    if not isinstance(rows, (list, tuple)):
        try:
            rows = list(rows)
        except TypeError:
            raise TypeError(
                f"{argname} must be a sequence of {n} items, got {type(rows).__name__}"
            ) from None
    if len(rows) != n:
        raise ValueError(f"{argname} has {len(rows)} items, expected {n} (one per agent)")
    return rows


def row_item(item: object, i: int, argname: str) -> dict[Any, Any] | list[Any] | tuple[Any, ...]:
    """Return agent *i*'s item as a dict, a list or a tuple of ranks."""
    if isinstance(item, (dict, list, tuple)):
        return item
    if item is None:
        return ()
    if isinstance(item, np.ndarray):
        if item.ndim != 1:
            raise TypeError(
                f"{argname}[{i}] must be 1-D when given as an array of ranks,"
                f" got shape {item.shape}"
            )
        ranks: list[Any] = item.tolist()
        return ranks
    raise TypeError(
        f"{argname}[{i}] must be a dict {{rank: weight}}, a sequence of ranks or None,"
        f" got {type(item).__name__}"
    )


def rank(key: object, n: int, i: int, argname: str, allow_self: bool) -> int:
    """Return *key* as a rank of agent *i*'s row."""
    if isinstance(key, bool) or not isinstance(key, numbers.Integral):
        raise TypeError(f"{argname}[{i}]: rank {key!r} is not an integer ({type(key).__name__})")
    r = int(key)
    if not 0 <= r < n:
        raise ValueError(f"{argname}[{i}]: rank {r} is out of range for {n} agents")
    if r == i and not allow_self:
        raise ValueError(f"{argname}[{i}] contains agent {i}'s own rank; give it as self_weight")
    return r


def weight(v: object, r: int, i: int, argname: str) -> float:
    """Return *v* as the finite weight of rank *r* in agent *i*'s row."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(
            f"{argname}[{i}]: weight {v!r} for rank {r} is not a real number ({type(v).__name__})"
        )
    try:
        w = float(v)
    except OverflowError:
        w = math.inf
    if not math.isfinite(w):
        raise ValueError(f"{argname}[{i}]: weight {v!r} for rank {r} is not finite")
    return w


def duplicate(r: int, i: int, argname: str) -> ValueError:
    """Return the error for rank *r* given twice in agent *i*'s row."""
    return ValueError(f"{argname}[{i}]: rank {r} appears more than once")
