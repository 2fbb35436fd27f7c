"""A neighbor exchange of :class:`fogsim.clock.Clock` in compiled code (numba); private.

Imported only once a clock has visited enough messages to pay for numba (see
``fogsim.clock._clock``), so small runs never import numba. The numbers are those of the
numpy passes, bit for bit: every arrival is one addition and the rest is max and min.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["exchange", "exchange_csr"]


@njit(nogil=True, cache=True, inline="always")
def _later(done: np.ndarray, sent: np.ndarray, a: float) -> None:
    """``done = max(done, sent + a)``, one message time for all."""
    for i in range(done.shape[0]):
        v = sent[i] + a
        if v > done[i]:
            done[i] = v


@njit(nogil=True, cache=True, inline="always")
def _later_each(done: np.ndarray, sent: np.ndarray, seconds: np.ndarray) -> None:
    """``done = max(done, sent + seconds)``, a message time each."""
    for i in range(done.shape[0]):
        v = sent[i] + seconds[i]
        if v > done[i]:
            done[i] = v


@njit(nogil=True, cache=True)
def exchange(  # noqa: PLR0913 - the kernel's arrays, one argument each
    ext: np.ndarray,
    out_time: np.ndarray,
    own_time: np.ndarray,
    shifts: np.ndarray,
    index: np.ndarray,
    rows: np.ndarray,
    seconds: np.ndarray,
    second_rows: np.ndarray,
    alike: np.ndarray,
    done: np.ndarray,
    communicating: np.ndarray,
) -> None:
    """Agent i's finishing time, ``done[i] = max(ext[i] + out_time[i], max over columns c of
    ext[sender_c(i)] + seconds_c(i))``; column c's sender is ``i + shifts[c]`` (mod n) when
    ``shifts[c] >= 0``, else ``index[rows[c], i]`` (n: a padding, whose clock is -inf), and
    its seconds ``seconds[second_rows[c], i]``, or ``alike[c]`` when ``second_rows[c] < 0``;
    then ``communicating += min(done - ext, own_time)``. One pass per column over contiguous
    slices (vectorized; passes over tiles of receivers measured slower)."""
    n = ext.shape[0] - 1
    for i in range(n):
        done[i] = ext[i] + out_time[i]
    arrival = np.empty(n) if np.any(shifts < 0) else ext[:0]  # a gathered column's clocks
    for c in range(shifts.shape[0]):
        s = shifts[c]
        r = second_rows[c]
        if s < 0:  # gathered senders (padded with n)
            senders = index[rows[c]]
            for i in range(n):
                arrival[i] = ext[senders[i]]
            if r < 0:
                _later(done[:n], arrival, alike[c])
            else:
                _later_each(done[:n], arrival, seconds[r])
        elif r < 0:  # senders i + s, then i + s - n past the end
            _later(done[: n - s], ext[s:n], alike[c])
            _later(done[n - s : n], ext[:s], alike[c])
        else:
            _later_each(done[: n - s], ext[s:n], seconds[r, : n - s])
            _later_each(done[n - s : n], ext[:s], seconds[r, n - s :])
    for i in range(n):
        communicating[i] += min(done[i] - ext[i], own_time[i])


@njit(nogil=True, cache=True)
def exchange_csr(  # noqa: PLR0913 - the kernel's arrays, one argument each
    start: np.ndarray,
    ext: np.ndarray,
    where: np.ndarray,
    times: np.ndarray,
    indptr: np.ndarray,
    out_time: np.ndarray,
    own_time: np.ndarray,
    done: np.ndarray,
    communicating: np.ndarray,
) -> None:
    """``done[i] = max(start[i] + out_time[i], max over e in row i of ext[where[e]] +
    times[e])`` for the rows of ``indptr`` (CSR by receiver; row i's edges from
    ``indptr[i] - indptr[0]``), then ``communicating += min(done - start, own_time)``:
    any in-degrees, a message at a time."""
    base = indptr[0]
    for i in range(start.shape[0]):
        d = start[i] + out_time[i]
        for e in range(indptr[i] - base, indptr[i + 1] - base):
            v = ext[where[e]] + times[e]
            if v > d:
                d = v
        done[i] = d
        communicating[i] += min(d - start[i], own_time[i])
