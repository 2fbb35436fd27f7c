"""Exceptions of SPMD mode and the wording that names agents in messages."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

__all__ = [
    "SpmdAborted",
    "SpmdError",
    "SpmdTimeout",
    "agents",
    "disagreement",
    "groups",
]


class SpmdError(RuntimeError):
    """An SPMD run cannot go on: agents stopped meeting at the same ops."""


class SpmdAborted(SpmdError):
    """Raised in the other agents when one agent of the run failed.

    ``rank`` is the agent that failed first; the run re-raises that agent's exception.
    """

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


class SpmdTimeout(SpmdError, TimeoutError):
    """An agent waited longer than the run's ``timeout`` for the others at an op."""


def agents(ranks: Iterable[int]) -> str:
    """Return ``"agent 3"`` or ``"agents 0, 1, 2"``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"agent {ranks[0]}"
    return "agents " + ", ".join(str(r) for r in ranks)


def groups(values: Sequence[Hashable]) -> list[tuple[Hashable, list[int]]]:
    """Group the ranks by their value, in order of each value's lowest rank."""
    found: dict[Hashable, list[int]] = {}
    for rank, value in enumerate(values):
        found.setdefault(value, []).append(rank)
    return list(found.items())


def disagreement(
    values: Sequence[Hashable], verb: str, describe: Callable[[Any], str] = str
) -> str | None:
    """Return ``"agents 0, 2 <verb> a but agent 1 <verb> b"`` when the values differ, else None.

    With more than two groups they are joined by ``"; "``.
    """
    found = groups(values)
    if len(found) == 1:
        return None
    parts = [f"{agents(ranks)} {verb} {describe(value)}" for value, ranks in found]
    return " but ".join(parts) if len(parts) == 2 else "; ".join(parts)
