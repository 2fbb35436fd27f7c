"""Measure the host's network as fogsim's ops see it: a Platform for the clock."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ._platform import Platform

__all__ = ["calibrate"]


def calibrate(sizes: Sequence[int] = (8, 1 << 20), repeats: int = 15) -> Platform:
    """Time ``neighbor_allreduce`` on a ring of this world's processes and return the
    :class:`Platform` of one switch whose latency and bandwidth fit those times.

    Run it under MPI or torch.distributed (``fogrun -np N``, N >= 2), every rank at once: each
    size (bytes per rank) is exchanged ``repeats`` times, the fastest of each rank's calls
    kept and the slowest rank's taken; ``latency`` and ``bandwidth`` are the least-squares
    fit of ``alpha + c N / w`` (``c``: the messages each rank sends at once: 1 on two ranks,
    2 on a ring of more). Every rank gets the same platform. What it measures is what
    fogsim's own ops cost here, their agreement and bookkeeping included. A host's transport
    changes protocol with the message size (a line fits it only piecewise), so give the
    sizes the run sends: with two sizes the line passes through both.
    """
    from .. import _api as fs
    from .. import _api_topology, _context
    from .. import topology as T

    ctx = _context.current()
    if ctx.is_simulated or ctx.backend.name == "spmd":
        raise ValueError(
            "calibrate() measures real processes: run it under fogrun -np N (N >= 2), "
            "MPI or torch.distributed"
        )
    n = fs.size()
    if n < 2:
        raise ValueError("calibrate() needs two processes or more, got 1")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if len(sizes) < 2 or any(not isinstance(s, int) or s < 8 for s in sizes):
        raise ValueError("sizes must hold two sizes or more, each an int >= 8 (bytes)")
    before = _api_topology.load_topology()
    _api_topology.set_topology(T.ring_graph(n))
    try:
        measured = []
        for size in sizes:
            x = np.ones(size // 8)
            fs.neighbor_allreduce(x)  # warm
            best = np.inf
            for _ in range(repeats):
                fs.barrier()
                t = time.perf_counter()
                fs.neighbor_allreduce(x)
                best = min(best, time.perf_counter() - t)
            worst = np.max(fs.allgather(np.array([best])))  # the slowest rank's best
            measured.append(float(worst))
    finally:
        _api_topology.set_topology(before)
    per_link = 1 if n == 2 else 2
    nbytes = np.array([s // 8 * 8 for s in sizes], dtype=np.float64)
    a = np.stack([np.ones_like(nbytes), per_link * nbytes], axis=1)
    (alpha, inverse_w), *_ = np.linalg.lstsq(a, np.array(measured), rcond=None)
    alpha = max(float(alpha), 1e-9)
    bandwidth = 1.0 / max(float(inverse_w), 1e-15)
    return Platform.uniform(n, latency=alpha, bandwidth=bandwidth)
