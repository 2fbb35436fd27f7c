"""The torch backend's side channel of stall reports (see `fogsim._stall`): the store.

torch.distributed's key-value store (the rendezvous's TCPStore) carries the questions and
answers, so no collective is needed while a collective hangs. A question is one increment
of a counter; every waiting rank that sees the counter move writes where it is, tagged
with the count it saw, and the asking rank reads the answers tagged with its count or a
later one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..._stall import State

__all__ = ["StorePeers", "default_store"]


def default_store() -> Any:
    """Return the default process group's store, or None if torch does not expose it."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except (AttributeError, ImportError, RuntimeError, ValueError):
        return None


class StorePeers:
    """Ask and answer "where are you?" through ``store`` under the key prefix ``prefix``."""

    def __init__(self, store: Any, rank: int, size: int, prefix: str) -> None:
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self._seen = 0

    def serve(self, state: Callable[[], State]) -> None:
        asked = int(self.store.add(self.prefix + "asked", 0))
        if asked != self._seen:
            self._seen = asked
            self.store.set(f"{self.prefix}at/{self.rank}", json.dumps([asked, *state()]))

    def ask(self, state: Callable[[], State], seconds: float) -> dict[int, State]:
        question = int(self.store.add(self.prefix + "asked", 1))
        answers: dict[int, State] = {}
        end = time.monotonic() + seconds
        while len(answers) < self.size - 1 and time.monotonic() < end:
            self.serve(state)
            for r in range(self.size):
                key = f"{self.prefix}at/{r}"
                if r == self.rank or r in answers or not self.store.check([key]):
                    continue
                about, op, name, waited = json.loads(self.store.get(key))
                if about >= question:
                    answers[r] = (op, name, waited)
            time.sleep(0.02)
        return answers
