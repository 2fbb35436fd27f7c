"""The runtime's :class:`~fogsim.backends._runtime.Transport` over torch.distributed.

The small collectives (the agreement's reduction, allgathers of JSON reports) run on a
CPU (gloo) group, so that metadata never has to visit a GPU; point-to-point messages go
through ``dist.isend``/``dist.irecv`` on the group given. Nothing received is unpickled
(no ``*_object`` collective): see :mod:`fogsim.backends._wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..._stall import Guard
from .._runtime.transport import Messages
from .._wire import dumps, loads

__all__ = ["TorchTransport"]


class _TorchRequest:
    """A torch ``Work`` as a :class:`~fogsim.backends._runtime.Request`."""

    __slots__ = ("work",)

    def __init__(self, work: Any) -> None:
        self.work = work

    def test(self) -> bool:
        return bool(self.work.is_completed())

    def wait(self) -> None:
        self.work.wait()


class _GatheredMax(_TorchRequest):
    """:meth:`TorchTransport.iallreduce_max` as an all-to-all of the flags and a local
    maximum, which :meth:`wait` (or a :meth:`test` that finds it complete) takes once."""

    __slots__ = ("_blocks", "_flags", "_taken")

    def __init__(self, work: Any, blocks: np.ndarray, flags: np.ndarray) -> None:
        super().__init__(work)
        self._blocks, self._flags, self._taken = blocks, flags, False

    def _take(self) -> None:
        if not self._taken:
            np.max(self._blocks, axis=0, out=self._flags)
            self._taken = True

    def test(self) -> bool:
        if not self.work.is_completed():
            return False
        self.wait()
        return True

    def wait(self) -> None:
        self.work.wait()
        self._take()


def _tensor(buf: np.ndarray) -> torch.Tensor:
    """``buf`` as a tensor sharing its memory (bytes where torch lacks the dtype)."""
    try:
        return torch.from_numpy(buf)
    except TypeError:
        return _bytes(buf)


def _bytes(buf: np.ndarray) -> torch.Tensor:
    """``buf``'s memory as a uint8 tensor (no copy; any dtype, numpy's float16 included)."""
    return torch.from_numpy(buf.reshape(-1).view(np.uint8))


def _wire(buf: Any) -> torch.Tensor:
    """What travels for ``buf``: a tensor as is (on its device), an array's bytes."""
    return buf if isinstance(buf, torch.Tensor) else _bytes(buf)


class _TorchBatch:
    """The works of one ``batch_isend_irecv`` as one :class:`~fogsim.backends._runtime.Request`."""

    __slots__ = ("works",)

    def __init__(self, works: list[Any]) -> None:
        self.works = works

    def test(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def wait(self) -> None:
        for w in self.works:
            w.wait()


class TorchTransport:
    """Point-to-point and small collectives among the ``size`` ranks of ``group``."""

    #: :meth:`exchange` moves tensors on their device (the sharded simulator's halo).
    takes_tensors = True

    def __init__(self, group: Any, size: int, rank: int) -> None:
        self.group, self.size, self.rank = group, size, rank
        self.guard: Guard | None = None  # set by the world (see Transport)
        self.repair: Callable[[], None] | None = None

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> _TorchRequest:
        return _TorchRequest(
            dist.isend(_bytes(buf), group=self.group, tag=tag, group_dst=int(dest))
        )

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _TorchRequest:
        return _TorchRequest(
            dist.irecv(_bytes(buf), group=self.group, tag=tag, group_src=int(source))
        )

    def exchange(self, sends: Messages, recvs: Messages, tag: int = 0) -> _TorchBatch:
        """One ``batch_isend_irecv`` (NCCL groups it; gloo runs the pairs as they come).

        Tensors travel as they are, on their device; numpy arrays as their bytes.
        """
        ops = [
            dist.P2POp(dist.irecv, _wire(buf), group=self.group, tag=tag, group_peer=int(src))
            for buf, src in recvs
        ]
        ops += [
            dist.P2POp(dist.isend, _wire(buf), group=self.group, tag=tag, group_peer=int(dst))
            for buf, dst in sends
        ]
        return _TorchBatch(dist.batch_isend_irecv(ops) if ops else [])

    def iallreduce_max(self, flags: np.ndarray) -> _TorchRequest:
        # Every rank sends its flags to every rank, and each takes the maximum itself:
        # gloo's ring allreduce of a few int64 costs several ring steps (ms on shared
        # cores), its all-to-all of the same bytes one exchange (BENCHMARKS.md).
        send = np.tile(flags, (self.size, 1))
        blocks = np.empty_like(send)
        work = dist.all_to_all_single(
            torch.from_numpy(blocks), torch.from_numpy(send), group=self.group, async_op=True
        )
        return _GatheredMax(work, blocks, flags)

    def allgather_json(self, value: Any) -> list[Any]:
        data = dumps(value)
        counts = torch.zeros((self.size, 1), dtype=torch.int64)
        mine = torch.tensor([len(data)], dtype=torch.int64)
        dist.all_gather(list(counts.unbind(0)), mine, group=self.group)
        lengths = counts.flatten().tolist()
        longest = max(lengths)
        padded = torch.zeros(longest, dtype=torch.uint8)  # gloo gathers equal sizes
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        rows = torch.empty((self.size, longest), dtype=torch.uint8)
        dist.all_gather(list(rows.unbind(0)), padded, group=self.group)
        return [
            loads(rows[r, : lengths[r]].numpy().tobytes(), f"rank {r}") for r in range(self.size)
        ]

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        dist.all_to_all_single(_tensor(recv), _tensor(send), group=self.group)

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def free(self) -> None:
        """Destroy the group (local: see ``_world.destroy_groups``); this transport is done."""
        from ._world import destroy_groups

        destroy_groups(self.group)
        self.group = None
