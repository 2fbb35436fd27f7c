"""The noisy links of :mod:`fogsim.faults` in compiled code (numba); private.

Imported only for steps large enough to pay for numba (see ``fogsim.faults``), so
``import fogsim`` does not import numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["add_noise"]


@njit(nogil=True, cache=True)
def _add_noise(out, rows, weights, eps, sigma):  # type: ignore[no-untyped-def]
    for k in range(rows.shape[0]):
        i, w = rows[k], weights[k]
        for j in range(out.shape[1]):
            out[i, j] += w * (eps[k, j] * sigma)


def add_noise(
    out: np.ndarray, rows: np.ndarray, weights: np.ndarray, eps: np.ndarray, sigma: float
) -> None:
    """Add ``weights[k] * (sigma * eps[k])`` to ``out[rows[k]]`` for each message ``k`` in turn.

    The order and the roundings of ``np.add.at(out, rows, weights[:, None] * (eps * sigma))``,
    without its two temporaries and its slow indexed loop.
    """
    _add_noise(out, rows, weights, eps, sigma)
