"""How the torch.distributed runtime's machine-level ops move values (see
``_runtime.machines``).

Inside a machine, and within a stage of the decomposed all-reduce, values move by
point-to-point transfers on the world's groups (gloo for CPU values, NCCL for CUDA
tensors): a stage's members are known from the factors, so no group is made per stage.
The machines' world runs on process groups of the local ranks 0, made on the first
hierarchical call. A local rank 0 tells its machine an error on the gloo group, whatever
the data's device: a length, then the message.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._base import Backend
from .._decomposed import digits
from .._runtime.machines import Report, sum_rows
from .._runtime.transport import Transport
from . import _world
from ._neighbor import _Transfer, as_bytes, p2p
from ._values import Value

__all__ = ["TorchMachineLink"]

_UNSET = object()  # the machines' groups are made on the first hierarchical call

#: ``p2p_ops(ops, cuda, blocking)``: start a list of ``dist.P2POp`` as one batch.
P2P = Callable[[list[Any], bool, bool], _Transfer]


class TorchMachineLink:
    """The :class:`~.._runtime.machines.MachineLink` of the torch runtime.

    Built from what it needs: the world's ``transport`` (the host names are gathered on
    it), ``local_size`` (None: by host name), the world's gloo ``group`` and ``nccl_group``
    (None without NCCL), ``p2p`` (the data path's batches) and ``new_world``, which makes
    the machines' world from ``(rank, size, gloo group, NCCL group)``. Its construction is
    collective.
    """

    def __init__(
        self,
        transport: Transport,
        local_size: int | None,
        group: Any,
        nccl_group: Any,
        p2p: P2P,
        new_world: Callable[[tuple[int, int, Any, Any]], Backend],
    ) -> None:
        self._transport, self._rank, self._n = transport, transport.rank, transport.size
        self.group, self.nccl_group, self._p2p = group, nccl_group, p2p
        self._new_world = new_world
        self.local_rank, self.local_size = self._layout(local_size)
        self._base = self._rank - self.local_rank  # local rank 0's rank
        self._roots_groups: Any = _UNSET  # (gloo, NCCL) of the local ranks 0; None elsewhere

    def _layout(self, local_size: int | None) -> tuple[int, int]:
        """Return (local rank, local size): by host name, or emulated blocks of local_size."""
        if local_size is not None:
            if self._n % local_size:
                raise ValueError(
                    f"local_size={local_size} does not divide the {self._n} processes: "
                    "emulated machines must all hold the same number of processes"
                )
            return self._rank % local_size, local_size
        hosts = self._transport.allgather_json(socket.gethostname())
        mine = [r for r, h in enumerate(hosts) if h == hosts[self._rank]]
        return mine.index(self._rank), len(mine)

    def close(self) -> None:
        """Destroy the local ranks 0's groups, unless the machines' world owns them."""
        groups, self._roots_groups = self._roots_groups, _UNSET
        self.group = self.nccl_group = None  # destroyed by the backend: let them go
        if groups is not _UNSET and groups is not None:
            _world.destroy_groups(*groups)

    def _group(self, value: Value) -> Any:
        return self.nccl_group if value.cuda else self.group

    def _run(self, ops: list[Any], cuda: bool) -> None:
        self._p2p(ops, cuda, True).Wait()

    # -- among machines -------------------------------------------------------------------
    def is_root(self) -> bool:
        if self._roots_groups is _UNSET:
            roots = list(range(0, self._n, self.local_size))
            self._roots_groups = _world.new_subgroups(roots, self.nccl_group is not None)
        return self.local_rank == 0

    def new_world(self) -> Backend:
        gloo, nccl = self._roots_groups
        rank, size = self._rank // self.local_size, self._n // self.local_size
        self._roots_groups = None  # owned by the machines' world
        return self._new_world((rank, size, gloo, nccl))

    # -- within a machine -----------------------------------------------------------------
    def gather(self, value: Value) -> Any:
        k, base, group = self.local_size, self._base, self._group(value)
        if self.local_rank == 0:
            buf, buf_arr = value.empty((k, *value.shape))
            buf[0].copy_(value.tensor)
            ops = [p2p(dist.irecv, as_bytes(buf[j]), base + j, group) for j in range(1, k)]
            self._run(ops if buf.numel() else [], value.cuda)
            return buf if buf_arr is None else buf_arr
        ops = [p2p(dist.isend, as_bytes(value.tensor), base, group)]
        self._run(ops if value.nbytes else [], value.cuda)
        return None

    def broadcast(self, value: Value, out: Any) -> Any:
        k, base, group = self.local_size, self._base, self._group(value)
        if self.local_rank == 0:
            tensor = out if value.arr is None else torch.from_numpy(np.ascontiguousarray(out))
            ops = [p2p(dist.isend, as_bytes(tensor), base + j, group) for j in range(1, k)]
            self._run(ops if value.nbytes else [], value.cuda)
            return out
        buf, buf_arr = value.empty(value.shape)
        self._run([p2p(dist.irecv, as_bytes(buf), base, group)] if value.nbytes else [], value.cuda)
        return buf if buf_arr is None else buf_arr

    def tell(self, report: Report | None) -> Report | None:
        k, base, group = self.local_size, self._base, self.group
        if self.local_rank == 0:
            text = b"" if report is None else "\n".join(report).encode()
            length = torch.tensor([len(text)], dtype=torch.int64)
            ops = [p2p(dist.isend, length, base + j, group) for j in range(1, k)]
            if text:
                payload = torch.frombuffer(bytearray(text), dtype=torch.uint8)
                ops += [p2p(dist.isend, payload, base + j, group) for j in range(1, k)]
            self._run(ops, False)
            return report
        length = torch.zeros(1, dtype=torch.int64)
        self._run([p2p(dist.irecv, length, base, group)], False)
        if not length.item():
            return None
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
        self._run([p2p(dist.irecv, payload, base, group)], False)
        kind, message = bytes(payload.numpy()).decode().split("\n", 1)
        return kind, message

    def local_sum(self, value: Value) -> Any:
        if self.local_size == 1:
            return value.tensor.clone() if value.arr is None else value.arr.copy()
        rows = self.gather(value)
        return self.broadcast(value, None if rows is None else sum_rows(rows, self.local_size))

    # -- the decomposed allreduce's stages --------------------------------------------------
    def flat(self, value: Value) -> tuple[Any, Any]:
        flat, flat_arr = value.empty((int(np.prod(value.shape, dtype=np.int64)),))
        flat.copy_(value.tensor.reshape(-1))
        return flat, flat if flat_arr is None else flat_arr

    def stages(self, factors: tuple[int, ...]) -> list[Any]:
        """The members of each stage: the ranks that differ only in that digit."""
        stages, stride = [], 1
        for p, d in zip(factors, digits(self._rank, factors), strict=True):
            stages.append([self._rank + (j - d) * stride for j in range(p)])
            stride *= p
        return stages

    def reduce_scatter(
        self, stage: Any, value: Value, flat: Any, bounds: np.ndarray, d: int
    ) -> Any:
        pieces = [flat[bounds[j] : bounds[j + 1]] for j in range(len(stage))]
        recv, recv_arr = value.empty((len(stage), pieces[d].numel()))
        recv[d].copy_(pieces[d])
        group = self._group(value)
        # every member knows every piece's length: empty ones do not move
        ops = [
            p2p(dist.irecv, as_bytes(recv[j]), peer, group)
            for j, peer in enumerate(stage)
            if j != d and recv.numel()
        ]
        ops += [
            p2p(dist.isend, as_bytes(pieces[j]), peer, group)
            for j, peer in enumerate(stage)
            if j != d and pieces[j].numel()
        ]
        self._run(ops, value.cuda)
        return recv if recv_arr is None else recv_arr

    def all_gather(self, stage: Any, value: Value, flat: Any, bounds: np.ndarray, d: int) -> None:
        pieces = [flat[bounds[j] : bounds[j + 1]] for j in range(len(stage))]
        group = self._group(value)
        ops = [
            p2p(dist.isend, as_bytes(pieces[d]), peer, group)
            for j, peer in enumerate(stage)
            if j != d and pieces[d].numel()
        ]
        ops += [
            p2p(dist.irecv, as_bytes(pieces[j]), peer, group)
            for j, peer in enumerate(stage)
            if j != d and pieces[j].numel()
        ]
        self._run(ops, value.cuda)
