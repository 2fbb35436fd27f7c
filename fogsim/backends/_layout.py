"""Which processes form a machine, checked once so every rank gives the same answer."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["layout_error"]


def layout_error(layout: Sequence[tuple[int, int]]) -> str | None:
    """Return why the machine-level ops cannot run on ``layout``, or None.

    ``layout[r]`` is rank r's ``(local_size, local_rank)``. The machine-level ops need
    machines alike, rank ``r`` being local rank ``r % local_size`` of machine
    ``r // local_size``.
    """
    sizes = sorted({k for k, _ in layout})
    if len(sizes) > 1:
        counts = [k for k, lr in layout if lr == 0]
        return (
            f"the machines hold different numbers of processes ({counts}); the "
            "machine-level ops need machines alike"
        )
    k = sizes[0]
    stray = [r for r, (_, lr) in enumerate(layout) if lr != r % k]
    if stray:
        r = stray[0]
        return (
            f"the processes of a machine are not consecutive ranks (rank {r} is local "
            f"rank {layout[r][1]} of {k}); place the ranks by machine, e.g. mpiexec "
            "-ppn / --map-by core"
        )
    return None
