"""The MPI side channel of stall reports (see `fogsim._stall`).

Questions and answers travel on a duplicate of the world communicator, so they never
match a data message; both are small Python objects (never arrays). A question carries
the asking rank's number for it, and stale answers to earlier questions are dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._stall import State

__all__ = ["MPIPeers"]

_QUESTION, _ANSWER = 71, 72


class MPIPeers:
    """Ask and answer "where are you?" over ``comm`` (owned: freed by :meth:`close`)."""

    def __init__(self, comm: Any, mpi: Any) -> None:
        self.comm, self._mpi = comm, mpi
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._asked = 0
        self._pending: list[Any] = []  # our sends not known to be complete

    def serve(self, state: Callable[[], State]) -> None:
        status = self._mpi.Status()
        while self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=_QUESTION, status=status):
            source = status.Get_source()
            question = self.comm.recv(source=source, tag=_QUESTION)
            self._send((question, state()), source, _ANSWER)
        self._pending = [req for req in self._pending if not req.Test()]

    def ask(self, state: Callable[[], State], seconds: float) -> dict[int, State]:
        self._asked += 1
        question = self._asked
        for r in range(self.size):
            if r != self.rank:
                self._send(question, r, _QUESTION)
        answers: dict[int, State] = {}
        status = self._mpi.Status()
        end = time.monotonic() + seconds
        while len(answers) < self.size - 1 and time.monotonic() < end:
            self.serve(state)  # two stalled ranks asking each other both get answers
            while self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=_ANSWER, status=status):
                source = status.Get_source()
                about, answer = self.comm.recv(source=source, tag=_ANSWER)
                if about == question:
                    answers[source] = answer
            time.sleep(0.002)
        return answers

    def _send(self, obj: Any, dest: int, tag: int) -> None:
        self._pending.append(self.comm.isend(obj, dest=dest, tag=tag))

    def close(self) -> None:
        self._pending = []  # small eager sends: complete, or moot once the world ends
        self.comm.Free()
