"""A :class:`~.transport.Transport` between the threads of one process, for tests.

``InProcessWorld(n)`` holds the mailboxes and rendezvous of ``n`` ranks;
``world.transport(r)`` is rank ``r``'s end, to be used from one thread per rank. Messages
are copied when sent, so a send completes at once; a receive completes once a matching
message (same source, same tag, in send order) has arrived. The whole transport is this
module: the interface the distributed protocol needs is that small.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._stall import Guard
from .._wire import dumps, loads
from .transport import Messages

__all__ = ["InProcessWorld", "InProcessTransport"]


class _Done:
    """A request that completed when it was made (a send: its bytes were copied)."""

    __slots__ = ()

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        return None


class _Pending:
    """A request that completes once ``poll()`` (called under the world's lock) is true."""

    __slots__ = ("_world", "_poll", "_done")

    def __init__(self, world: InProcessWorld, poll: Callable[[], bool]) -> None:
        self._world, self._poll, self._done = world, poll, False

    def test(self) -> bool:
        with self._world.cond:
            if not self._done:
                self._done = self._poll()
            return self._done

    def wait(self) -> None:
        with self._world.cond:
            while not self._done:
                self._done = self._poll()
                if not self._done and not self._world.cond.wait(self._world.timeout):
                    raise TimeoutError("in-process transport: a peer never answered")


class InProcessWorld:
    """``size`` ranks that talk through memory; ``timeout`` (s) bounds every wait."""

    def __init__(self, size: int, timeout: float = 30.0) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.size, self.timeout = size, timeout
        self.cond = threading.Condition(threading.RLock())  # requests re-enter it
        self._boxes: dict[tuple[int, int, int], deque[bytes]] = defaultdict(deque)
        # (kind, call number) -> {rank: value}, and how many ranks have read the result
        self._calls: dict[tuple[str, int], dict[int, Any]] = defaultdict(dict)
        self._reads: dict[tuple[str, int], int] = defaultdict(int)
        self._barrier = threading.Barrier(size)

    def transport(self, rank: int) -> InProcessTransport:
        """Return rank ``rank``'s end of the world."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is out of range for {self.size} ranks")
        return InProcessTransport(self, rank)

    # -- used by the transports, under self.cond -------------------------------------------
    def post(self, src: int, dst: int, tag: int, data: bytes) -> None:
        with self.cond:
            self._boxes[(src, dst, tag)].append(data)
            self.cond.notify_all()

    def take(self, src: int, dst: int, tag: int, into: np.ndarray) -> bool:
        box = self._boxes.get((src, dst, tag))
        if not box:
            return False
        data = box.popleft()
        target = into.reshape(-1).view(np.uint8)
        if len(data) != target.size:
            raise ValueError(
                f"in-process transport: a {len(data)}-byte message from rank "
                f"{src} does not fit a {target.size}-byte buffer"
            )
        target[:] = np.frombuffer(data, np.uint8)
        return True

    def deposit(self, key: tuple[str, int], rank: int, value: Any) -> None:
        with self.cond:
            self._calls[key][rank] = value
            self.cond.notify_all()

    def complete(self, key: tuple[str, int]) -> bool:
        return len(self._calls[key]) == self.size

    def result(self, key: tuple[str, int]) -> list[Any]:
        with self.cond:
            values = [self._calls[key][r] for r in range(self.size)]
            self._reads[key] += 1
            if self._reads[key] == self.size:  # every rank has its copy
                del self._calls[key], self._reads[key]
            return values

    def barrier(self) -> None:
        self._barrier.wait(self.timeout)


class InProcessTransport:
    """Rank ``rank``'s end of an :class:`InProcessWorld`."""

    takes_tensors = False  # buffers are numpy arrays

    def __init__(self, world: InProcessWorld, rank: int) -> None:
        self.world, self.rank, self.size = world, rank, world.size
        self.guard: Guard | None = None  # set by the world (see Transport)
        self.repair: Callable[[], None] | None = None
        self._seq: dict[str, int] = defaultdict(int)  # collective calls made, by kind

    def _peer(self, rank: int, what: str) -> None:
        if not isinstance(rank, int | np.integer) or not 0 <= rank < self.size:
            raise ValueError(f"{what} rank {rank!r} is out of range for {self.size} ranks")

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> _Done:
        self._peer(dest, "destination")
        self.world.post(self.rank, int(dest), tag, np.ascontiguousarray(buf).tobytes())
        return _Done()

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _Pending:
        self._peer(source, "source")
        if not buf.flags.c_contiguous:
            raise ValueError("irecv needs a C-contiguous buffer to write into")
        return _Pending(self.world, lambda: self.world.take(int(source), self.rank, tag, buf))

    def exchange(self, sends: Messages, recvs: Messages, tag: int = 0) -> _Pending:
        for buf, dest in sends:
            self.isend(buf, dest, tag)
        pending = [self.irecv(buf, source, tag) for buf, source in recvs]
        return _Pending(self.world, lambda: all(q.test() for q in pending))

    def _start(self, kind: str, value: Any) -> tuple[str, int]:
        key = (kind, self._seq[kind])
        self._seq[kind] += 1
        self.world.deposit(key, self.rank, value)
        return key

    def iallreduce_max(self, flags: np.ndarray) -> _Pending:
        key = self._start("max", flags.copy())

        def poll() -> bool:
            if not self.world.complete(key):
                return False
            flags[...] = np.maximum.reduce(self.world.result(key))
            return True

        return _Pending(self.world, poll)

    def _allgather(self, kind: str, value: Any) -> list[Any]:
        key = self._start(kind, value)
        _Pending(self.world, lambda: self.world.complete(key)).wait()
        return self.world.result(key)

    def allgather_json(self, value: Any) -> list[Any]:
        # the bytes the other transports send, read back as they read them
        texts = self._allgather("json", dumps(value))
        return [loads(text, f"rank {r}") for r, text in enumerate(texts)]

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        if send.shape[0] != self.size or recv.shape[0] != self.size:
            raise ValueError(f"alltoall needs {self.size} blocks along the first axis")
        blocks = self._allgather("alltoall", np.array(send, copy=True))
        for k in range(self.size):
            recv[k] = blocks[k][self.rank]

    def barrier(self) -> None:
        self.world.barrier()
