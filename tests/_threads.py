"""The sharded simulator's blocks as threads of the test's process (an in-process transport)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from fogsim.backends._runtime.inprocess import InProcessWorld
from fogsim.backends.sim._sharded import ShardedSimBackend


def sharded(
    n: int, parts: int, work: Callable[[Any], Any], cls: Any = ShardedSimBackend, **options: Any
) -> list:
    """Run ``work(backend)`` on each of ``parts`` blocks of ``n`` agents in threads (each a
    ``cls`` on its end of an :class:`InProcessWorld`); return the results, by block. An
    error in any block is raised here."""
    world = InProcessWorld(parts, timeout=20)
    results: list = [None] * parts
    errors: list = []

    def block(rank: int) -> None:
        try:
            backend = cls(size=n, transport=world.transport(rank), **options)
            results[rank] = work(backend)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=block, args=(r,)) for r in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
