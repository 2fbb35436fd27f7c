"""The decomposed (BlueConnect) all-reduce: shared rules of the simulator and the runtimes.

For ``P = p_0 * p_1 * ... * p_k`` processes, rank ``r`` has mixed-radix digits
``d_i = (r // (p_0 ... p_{i-1})) % p_i`` (``d_0`` varies fastest, so the processes of one
machine, consecutive ranks, differ in ``d_0``). Stage ``i`` groups the ``p_i`` processes
that differ only in ``d_i``:

* reduce-scatter stages ``i = 0 .. k``: each group splits its current chunk of the vector
  into ``p_i`` pieces; member ``d_i`` receives piece ``d_i`` from every member and sums
  them in member order, so its chunk shrinks by ``p_i`` (every process busy at every stage);
* all-gather stages ``i = k .. 0``: each group concatenates its members' chunks back.

Every element is thus summed as ``sum_{d_k} ( ... sum_{d_1} ( sum_{d_0} x ) ... )``, each
sum in ascending member order, whatever process computes it: :func:`staged_sum` does the
same additions on stacked values, so the simulator and the runtimes give the same bits.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_factors", "default_factors", "digits", "piece_bounds", "staged_sum"]


def check_factors(factors: Any, size: int) -> tuple[int, ...]:
    """Return ``factors`` as a tuple of ints >= 1 whose product is ``size``, or raise."""
    if isinstance(factors, str | bytes) or not isinstance(factors, Sequence):
        raise TypeError(
            f"factors must be a sequence of integers such as (3, 2, 2), got "
            f"{type(factors).__name__}"
        )
    out = []
    for k, p in enumerate(factors):
        if isinstance(p, bool) or not isinstance(p, numbers.Integral):
            raise TypeError(f"factors[{k}] must be an integer, got {type(p).__name__}")
        if p < 1:
            raise ValueError(f"factors[{k}] = {p}; every factor must be >= 1")
        out.append(int(p))
    if not out:
        raise ValueError("factors is empty; give at least one factor, e.g. (size,)")
    if math.prod(out) != size:
        raise ValueError(
            f"factors {tuple(out)} multiply to {math.prod(out)}, but there are {size} "
            "processes; their product must equal the number of processes"
        )
    return tuple(out)


def default_factors(size: int, local_size: int) -> tuple[int, ...]:
    """Return the machine hierarchy's factorization: (processes per machine, machines)."""
    if local_size < 1 or size % local_size:
        raise ValueError(
            f"machines of {local_size} processes do not divide {size} processes: give "
            "factors= explicitly"
        )
    factors = tuple(p for p in (local_size, size // local_size) if p > 1)
    return factors or (1,)


def digits(rank: int, factors: tuple[int, ...]) -> list[int]:
    """Return the mixed-radix digits ``d_0 .. d_k`` of ``rank`` (``d_0`` fastest)."""
    out = []
    for p in factors:
        rank, d = divmod(rank, p)
        out.append(d)
    return out


def piece_bounds(lo: int, hi: int, parts: int) -> np.ndarray:
    """Return the ``parts + 1`` bounds splitting ``[lo, hi)`` into nearly equal pieces.

    The first ``(hi - lo) % parts`` pieces are one element longer (as ``np.array_split``).
    """
    base, extra = divmod(hi - lo, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return lo + np.concatenate([[0], np.cumsum(sizes)])


def staged_sum(stacked: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    """Return the decomposed all-reduce's sum of ``stacked`` (agents on axis 0).

    Same additions, in the same order, as the runtimes' reduce-scatter stages.
    """
    n = stacked.shape[0]
    rest = stacked.shape[1:]
    # rank = d_0 + p_0 d_1 + ...: in C order the last of the reversed factors is d_0
    grid = stacked.reshape(*reversed(factors), *rest)
    for axis in range(len(factors) - 1, -1, -1):  # d_0 first, the fastest digit
        acc = np.take(grid, 0, axis=axis).copy()
        for j in range(1, grid.shape[axis]):
            acc += np.take(grid, j, axis=axis)
        grid = acc
    assert grid.shape == rest, (grid.shape, rest, n)
    return grid
