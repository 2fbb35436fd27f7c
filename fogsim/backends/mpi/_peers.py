"""The MPI side channel of stall reports (see `fogsim._stall`).

Questions and answers travel on a duplicate of the world communicator, so they never
match a data message; both are JSON text (:mod:`fogsim.backends._wire`), sent with the
buffer calls (``Isend``, and ``Recv`` sized by ``Get_count``), never pickled. A question
is the asking rank's number for it; an answer is ``[number, op, name, seconds waited]``,
and stale answers to earlier questions are dropped, as is anything that is neither
(a peer cannot make a rank run code through this channel, nor stop it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._stall import State
from .._wire import BadMessage, dumps, loads

__all__ = ["MPIPeers"]

_QUESTION, _ANSWER = 71, 72


def _question(value: Any) -> int | None:
    """The question number ``value`` holds, or None if it is not one."""
    return value if type(value) is int else None


def _answer(value: Any) -> tuple[int, State] | None:
    """``(question number, state)`` from an answer, or None if it is not one."""
    if not (isinstance(value, list) and len(value) == 4):
        return None
    about, op, name, waited = value
    if (
        type(about) is not int
        or not isinstance(op, str)
        or not (name is None or isinstance(name, str))
        or type(waited) not in (int, float)
    ):
        return None
    return about, (op, name, float(waited))


class MPIPeers:
    """Ask and answer "where are you?" over ``comm`` (owned: freed by :meth:`close`)."""

    def __init__(self, comm: Any, mpi: Any) -> None:
        self.comm, self._mpi = comm, mpi
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._asked = 0
        # our sends not known to be complete, with the buffers they read
        self._pending: list[tuple[Any, np.ndarray]] = []

    def _receive(self, status: Any) -> Any:
        """Receive the message ``status`` (of a probe) describes; its value, or None."""
        source, tag = status.Get_source(), status.Get_tag()
        buf = np.empty(status.Get_count(self._mpi.BYTE), np.uint8)
        self.comm.Recv([buf, self._mpi.BYTE], source=source, tag=tag)
        try:
            return loads(buf.tobytes(), f"rank {source}")
        except BadMessage:
            return None  # not ours to read: dropped

    def serve(self, state: Callable[[], State]) -> None:
        status = self._mpi.Status()
        while self.comm.Iprobe(source=self._mpi.ANY_SOURCE, tag=_QUESTION, status=status):
            source = status.Get_source()
            question = _question(self._receive(status))
            if question is not None:
                self._send([question, *state()], source, _ANSWER)
        self._pending = [(req, buf) for req, buf in self._pending if not req.Test()]

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
                answer = _answer(self._receive(status))
                if answer is not None and answer[0] == question:
                    answers[source] = answer[1]
            time.sleep(0.002)
        return answers

    def _send(self, value: Any, dest: int, tag: int) -> None:
        buf = np.frombuffer(dumps(value), np.uint8)
        self._pending.append((self.comm.Isend([buf, self._mpi.BYTE], dest=dest, tag=tag), buf))

    def close(self) -> None:
        self._pending = []  # small eager sends: complete, or moot once the world ends
        self.comm.Free()
