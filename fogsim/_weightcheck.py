"""Whether averaging weights are row- or column-stochastic: :class:`WeightWarning`.

A weight matrix ``W`` (``x <- W x``) whose every row sums to 1 averages (consensus is
preserved); one whose every column sums to 1 preserves the sum (push-sum, column-
stochastic schemes). Weights that are neither make values grow or vanish step after step,
usually by mistake. They are checked where the whole matrix is known, once:

* ``set_topology(W, is_weighted=True)`` and ``set_machine_topology(W, is_weighted=True)``,
  in every mode (every rank holds the whole topology), when it is set;
* per-call weights of ``neighbor_allreduce``: in the simulator (and SPMD) the step's whole
  effective matrix (``self_weight_i`` on the diagonal, ``src_weights_i[j] *
  dst_weights_j[i]`` off it); distributed, a ``src_weights`` matrix every rank holds, and
  otherwise this rank's own row only (``self_weight + sum(src_weights)``, when no
  ``dst_weights`` are given). Columns cannot be seen from one rank, so a row that fails
  there warns (never raises), saying so.

A sum counts as 1 when it is within :data:`TOLERANCE` of 1 (float64 round-off of sums of
many weights; weights computed in float32 can miss it). What happens is set by
``FOGSIM_CHECK_WEIGHTS`` (read by :mod:`fogsim._settings`): ``warn`` (default: a
:class:`WeightWarning` once per call site), ``error`` (a ValueError naming the same row
and column; raised on every rank alike, as the whole matrix is known there) or ``off``.
``check_weights=False`` on the call says the weights are meant (sums that are not kept on
purpose, tests of the arithmetic); SPMD agents should all pass the same (the agent whose
thread runs the op decides). The call sites warned about are forgotten at every
``init()``, which also reads the mode. The check costs a few microseconds per call with
per-call weights in the simulator (``W 1`` by the combine kernel; columns only when a row
fails), nothing for the static topology's weights (checked when set), and a
:class:`fogsim.topology.Topology` passed as ``src_weights`` again is not summed again.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ._callsite import user_frame, user_stacklevel

__all__ = [
    "TOLERANCE",
    "WeightWarning",
    "check_row",
    "check_sums",
    "check_topology",
    "checked",
    "checks",
    "circulant_sums",
    "configure",
    "csr_sums",
    "enabled",
    "unchecked",
]

#: How far from 1 a row or column sum may be and still count as 1.
TOLERANCE = 1e-9


class WeightWarning(UserWarning):
    """Weights that are neither row- nor column-stochastic.

    Warned once per call site, naming the first row and column whose sum is not 1 (within
    1e-9), for ``set_topology(W, is_weighted=True)``, ``set_machine_topology`` and the
    per-call weights of ``neighbor_allreduce``. ``check_weights=False`` on the call says
    such weights are meant; ``FOGSIM_CHECK_WEIGHTS=error`` raises a ``ValueError`` instead,
    ``off`` skips the checks (the user guide: "Topologies and the weight convention").
    """


_MODES = ("warn", "error", "off")
_mode = "warn"
_warned: set[tuple[str, int]] = set()  # call sites already warned about
_last_ok: list[Any] = [None]  # the last topology found stochastic (checked by identity)


class _Local(threading.local):
    off = False


_local = _Local()


def configure(mode: str) -> None:
    """Set the mode (``warn``, ``error`` or ``off``) and forget the sites warned about."""
    global _mode
    if mode not in _MODES:
        raise ValueError(f"FOGSIM_CHECK_WEIGHTS={mode!r} is not one of {', '.join(_MODES)}")
    _mode = mode
    _warned.clear()
    _last_ok[0] = None


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """Skip the checks in this thread for the block (``check_weights=False``)."""
    old, _local.off = _local.off, True
    try:
        yield
    finally:
        _local.off = old


def checks(check_weights: Any) -> contextlib.AbstractContextManager[None]:
    """Return the block's context for a ``check_weights=`` argument (False: unchecked)."""
    if not isinstance(check_weights, bool):
        raise TypeError(f"check_weights must be a bool, got {type(check_weights).__name__}")
    return contextlib.nullcontext() if check_weights else unchecked()


def enabled() -> bool:
    """Whether weights are checked here and now."""
    return _mode != "off" and not _local.off


def _first_bad(sums: np.ndarray) -> int | None:
    if sums.size and abs(sums.max() - 1.0) <= TOLERANCE and abs(sums.min() - 1.0) <= TOLERANCE:
        return None  # the common case, without temporaries
    bad = np.flatnonzero(~(np.abs(sums - 1.0) <= TOLERANCE))
    return int(bad[0]) if bad.size else None


def csr_sums(
    self_weight: Any, indptr: Any, indices: Any, data: Any, n: int
) -> tuple[np.ndarray, Callable[[], np.ndarray]]:
    """Return the row sums of the matrix given as its diagonal and off-diagonal CSR, and a
    function that returns its column sums (needed only when a row fails)."""
    sw = np.broadcast_to(np.asarray(self_weight, dtype=np.float64), (n,))
    data = np.asarray(data, dtype=np.float64)
    rows = sw + np.bincount(np.repeat(np.arange(n), np.diff(indptr)), data, minlength=n)
    return rows, lambda: sw + np.bincount(np.asarray(indices, dtype=np.int64), data, minlength=n)


def circulant_sums(form: Any, n: int) -> tuple[np.ndarray, np.ndarray]:  # (rows, columns)
    """Return the row and column sums of a :class:`fogsim.topology.CirculantForm`."""
    sw = np.broadcast_to(np.asarray(form.self_weight, dtype=np.float64), (n,))
    w = np.broadcast_to(np.asarray(form.weights, dtype=np.float64).T, (n, len(form.offsets))).T
    rows = sw + w.sum(axis=0)
    # W[i, (i + o) % n] = w[k, i]: column j holds w[k, (j - o) % n]
    cols = sw + sum(np.roll(w[k], int(o)) for k, o in enumerate(form.offsets))
    return rows, cols


def check_sums(
    op: str,
    rows: np.ndarray,
    cols: np.ndarray | Callable[[], np.ndarray],
    key: Any = None,
    strict: bool = True,
) -> bool:
    """Warn (or raise) unless every row or every column sums to 1 (``cols`` may be a
    function returning the column sums, called only when a row fails); return whether
    they do.

    ``key`` (e.g. a Topology) found fine is not summed again by :func:`check_topology`.
    ``strict=False``: warn even in ``error`` mode.
    """
    row = _first_bad(rows)
    if row is not None:
        col_sums = cols() if callable(cols) else cols
        col = _first_bad(col_sums)
        if col is not None:
            _report(
                f"{op}: the weights are neither row- nor column-stochastic: row {row} sums to "
                f"{rows[row]:.17g} and column {col} to {col_sums[col]:.17g} "
                f"(tolerance {TOLERANCE:g}); averaging with them neither keeps a consensus "
                "(rows) nor the sum (columns), so values grow or vanish step after step",
                strict,
            )
            return False
    if key is not None:
        _last_ok[0] = key
        if hasattr(key, "_weights_fine"):  # a Topology: immutable, so fine for good
            key._weights_fine = True
    return True


def checked(key: Any) -> bool:
    """Whether ``key`` was found fine: a Topology ever (it is immutable), another key
    when it was the last one."""
    return _last_ok[0] is key or getattr(key, "_weights_fine", False) is True


def check_topology(op: str, topo: Any, strict: bool = True) -> None:
    """Check a :class:`fogsim.topology.Topology`'s weights."""
    if checked(topo):
        return
    self_weight = topo.self_weights
    indptr, indices, data = topo.offdiag_csr()
    rows, cols = csr_sums(self_weight, indptr, indices, data, topo.size)
    check_sums(op, rows, cols, key=topo, strict=strict)


def check_row(op: str, rank: int, total: float) -> None:
    """Check one rank's own row sum (distributed per-call weights): warn only."""
    if abs(total - 1.0) <= TOLERANCE:
        return
    _report(
        f"{op}: the weights of rank {rank} (self_weight plus src_weights) sum to "
        f"{total:.17g}, so they are not row-stochastic (tolerance {TOLERANCE:g}); the "
        "columns cannot be checked on one rank: if they sum to 1 (push-sum style) the "
        "weights are fine",
        strict=False,
    )


def _report(message: str, strict: bool) -> None:
    message += (
        "; pass check_weights=False if this is intended (e.g. weights that scale on "
        "purpose), or set FOGSIM_CHECK_WEIGHTS=off"
    )
    if strict and _mode == "error":
        raise ValueError(message + " (FOGSIM_CHECK_WEIGHTS=error makes this an error)")
    frame = user_frame()
    site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("?", 0)
    if site in _warned:
        return
    _warned.add(site)
    warnings.warn(message, WeightWarning, stacklevel=user_stacklevel())
