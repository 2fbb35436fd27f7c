"""The collectives of the torch.distributed runtime: their torch namesakes on the world's
groups (gloo for CPU values, NCCL for CUDA tensors), each after the agreement of
:class:`~.._runtime.collectives.RuntimeCollectives`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ... import timeline as _timeline
from ..._handles import Handle, HandleTable
from ..._stall import Guard
from .._runtime.collectives import RuntimeCollectives
from .._runtime.transport import Transport
from ._neighbor import as_bytes
from ._values import Value, as_value

__all__ = ["TorchCollectives", "TorchValues"]


class TorchValues:
    """The torch runtime's conversion of ``x`` to a :class:`Value` (checked for dtype and
    device): a CUDA tensor needs NCCL on every rank (``nccl``)."""

    def __init__(self, nccl: bool) -> None:
        self.nccl = nccl

    def __call__(self, x: Any, op: str, averaging: bool, adds: bool = False) -> Value:
        value = as_value(x, op, averaging, adds)
        if value.cuda and not self.nccl:
            raise TypeError(
                f"{op}: x is a CUDA tensor, but not every rank has CUDA and NCCL; pass CPU "
                "tensors or numpy arrays, or run every rank on a GPU"
            )
        return value


class TorchCollectives(RuntimeCollectives[Value]):
    """``allreduce``, ``allgather``, ``broadcast`` and ``barrier`` on the gloo ``group``
    and (CUDA tensors) the ``nccl_group``, of values converted by ``values``; the rest as
    :class:`RuntimeCollectives` takes it."""

    def __init__(
        self,
        group: Any,
        nccl_group: Any,
        transport: Transport,
        handles: HandleTable,
        flush: Callable[[], None],
        stall: Guard,
        values: TorchValues,
    ) -> None:
        super().__init__(transport, handles, flush, stall, values)
        self.group, self.nccl_group = group, nccl_group

    def close(self) -> None:
        """Let the groups go (the backend destroys them)."""
        self.group = self.nccl_group = None

    def _data_group(self, value: Value) -> Any:
        return self.nccl_group if value.cuda else self.group

    def _start(self, op: str, work: Any, finish: Callable[[], Any], name: str | None) -> Handle:
        """Return a handle completing ``work`` (None: nothing moved) with ``finish``."""
        if work is None:
            return Handle.completed(op, finish(), name)

        def complete() -> Any:
            with _timeline.phase("COMMUNICATE"):
                work.wait()
            return finish()

        return self.handles.start(op, complete, work.is_completed, name)

    def start_allreduce(self, value: Value, average: bool, name: str | None) -> Handle:
        out, out_arr = value.empty(value.shape)
        out.copy_(value.tensor)
        work = None
        if out.numel():
            work = dist.all_reduce(
                out, op=dist.ReduceOp.SUM, group=self._data_group(value), async_op=True
            )
        n = self.size

        def finish() -> Any:
            if average:
                if out_arr is not None:
                    np.divide(out_arr, n, out=out_arr)
                else:
                    out.div_(n)
            return value.wrap(out if out_arr is None else out_arr)

        return self._start("allreduce", work, finish, name)

    def start_broadcast(self, value: Value, root: int, name: str | None) -> Handle:
        out, out_arr = value.empty(value.shape)
        out.copy_(value.tensor)
        work = None
        if out.numel():
            work = dist.broadcast(
                as_bytes(out), group=self._data_group(value), async_op=True, group_src=root
            )
        result = out if out_arr is None else out_arr
        return self._start("broadcast", work, lambda: value.wrap(result), name)

    def start_allgather(self, value: Value, name: str | None) -> Handle:
        if value.shape == ():
            value = value.reshaped((1,))
        n = self.size
        rows = self._all_rows(value.shape[0])
        most, trailing = int(rows.max()), value.shape[1:]
        # gloo gathers equal sizes only: every rank sends `most` rows, padded if shorter.
        buf, buf_arr = value.empty((n, most, *trailing))
        send = value.tensor
        if rows[self.rank] < most:
            send = buf[self.rank].clone()
            send[: value.shape[0]] = value.tensor
        work = None
        if buf.numel():
            outs = [as_bytes(part) for part in buf.unbind(0)]
            work = dist.all_gather(
                outs, as_bytes(send), group=self._data_group(value), async_op=True
            )

        def finish() -> Any:
            if np.all(rows == most):
                out = (
                    buf.reshape(-1, *trailing)
                    if buf_arr is None
                    else buf_arr.reshape(-1, *trailing)
                )
            elif buf_arr is not None:
                out = np.concatenate([buf_arr[r, : rows[r]] for r in range(n)])
            else:
                out = torch.cat([buf[r, : rows[r]] for r in range(n)])
            return value.wrap(out)

        return self._start("allgather", work, finish, name)

    def _all_rows(self, mine: int) -> np.ndarray:
        """Return every rank's first-dimension length (blocking, on the gloo group)."""
        rows = torch.empty(self.size, dtype=torch.int64)
        parts = [rows[r : r + 1] for r in range(self.size)]
        dist.all_gather(parts, torch.tensor([mine], dtype=torch.int64), group=self.group)
        out: np.ndarray = rows.numpy()
        return out

    def start_barrier(self) -> tuple[Callable[[], bool], Callable[[], Any]]:
        work = dist.barrier(group=self.group, async_op=True)
        return work.is_completed, work.wait

    def barrier_nonblocking(self) -> Handle:
        self.flush()
        work = dist.barrier(group=self.group, async_op=True)
        return self._start("barrier", work, lambda: None, None)
