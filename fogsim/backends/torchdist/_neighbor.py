"""The torch runtime's data path for the neighbor ops (see ``_runtime.neighbor``).

Every call posts its receives and sends in one ``batch_isend_irecv`` (NCCL runs them as
one group; gloo one by one): CPU values over the gloo group's transport, CUDA tensors
over the NCCL group's. The combine is the simulator's: self first, then ascending source
rank, one rounded product of the float64 weight and the value added per neighbor, summed
in float64 (a float32 result rounded once), so the bits match; CPU values run the compiled
``combine_rows``, CUDA tensors the same steps in torch (:func:`_combine_cuda`). Small
nonblocking static calls are fused only in worlds without CUDA; with CUDA every call is
agreed on (devices included) on its own, so mixing devices across ranks raises instead
of hanging.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from .._runtime.datapath import DataPath, Value
from .._runtime.plan import RankPlan
from .._runtime.transport import Messages, Request
from ._transport import TorchTransport, _TorchBatch

__all__ = ["TorchDataPath", "as_bytes", "p2p"]


def as_bytes(tensor: Any) -> Any:
    """Return a contiguous tensor's bytes as a flat uint8 view (gloo moves any dtype so)."""
    if not tensor.numel():  # torch will not view every empty layout as bytes
        return torch.empty(0, dtype=torch.uint8, device=tensor.device)
    flat = tensor.reshape(-1)
    if flat.stride(0) != 1:  # one value broadcast (stride 0), which torch calls contiguous
        flat = torch.empty(flat.shape, dtype=flat.dtype, device=flat.device).copy_(flat)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def p2p(op: Any, tensor: Any, peer: int, group: Any) -> Any:
    """Return one transfer with ``peer``, a rank of ``group`` (not of the whole job)."""
    return dist.P2POp(op, tensor, group=group, group_peer=int(peer))


class _Transfer:
    """One batch of point-to-point transfers, waited on once (both request spellings:
    ``wait``/``test`` of the runtime, ``Wait``/``Test`` of ``_core.FusedBatch``).

    gloo's send/recv Works report completion only from their own ``wait()``, so a transfer
    that may be polled is waited on by the data path's waiter thread (``waiter``), and
    ``test`` asks that thread; NCCL's Works and blocking calls need no thread.
    """

    __slots__ = ("_req", "_future")

    def __init__(self, req: Request, waiter: ThreadPoolExecutor | None = None) -> None:
        self._req = req
        self._future: Future[None] | None = None if waiter is None else waiter.submit(req.wait)

    def wait(self) -> None:
        if self._future is not None:
            self._future.result()
        else:
            self._req.wait()

    def test(self) -> bool:
        if self._future is not None:
            return self._future.done()
        return self._req.test()

    Wait, Test = wait, test


def _combine_cuda(
    value: Value, plan: RankPlan, recv: Any, weights: np.ndarray, select: np.ndarray | None
) -> Any:
    """``self_weight * x + sum_k w_k * y_k`` in combine_rows' order and roundings, in torch:
    summed in float64, a float32 result rounded once at the end."""
    tensor = value.data
    w = torch.from_numpy(np.concatenate([[plan.self_weight], weights]).astype(np.float64))
    w = w.to(tensor.device)
    out = tensor.to(torch.float64) * w[0]
    rows = range(len(weights)) if select is None else select.tolist()
    for k, row in enumerate(rows):
        out += w[k + 1] * recv[row].to(torch.float64)  # the product is rounded first: no FMA
    return out.to(tensor.dtype)


def _wire(buf: Any) -> Any:
    """A tensor's bytes (gloo and NCCL move any dtype so); an array as it is."""
    return buf if isinstance(buf, np.ndarray) else as_bytes(buf)


class TorchDataPath(DataPath):
    """CPU values over ``transport`` (the gloo group's), CUDA tensors over the NCCL group's.

    ``to_value(x, op, averaging)`` is the runtime's conversion to a
    :class:`~fogsim.backends.torchdist._values.Value`.
    """

    def __init__(
        self,
        transport: TorchTransport,
        nccl_group: Any,
        to_value: Callable[[Any, str, bool], Value],
    ) -> None:
        super().__init__(transport, None, None)
        self._to_value = to_value
        self.nccl = (
            None
            if nccl_group is None
            else TorchTransport(nccl_group, transport.size, transport.rank)
        )
        self.fuses = nccl_group is None  # with CUDA every call agrees on its devices
        self._nccl_ready = False
        self._waiter: ThreadPoolExecutor | None = None

    def value(self, x: Any, op: str, averaging: bool) -> Value:
        return self._to_value(x, op, averaging)

    def start(self, sends: Messages, recvs: Messages, device: bool, blocking: bool) -> _Transfer:
        """Start one batch (every rank calls this, even with nothing to move: every rank
        knows what moves, since the sizes agree, and empty buffers stay home)."""
        if device:
            self._ready_nccl()
        transport = self.nccl if device and self.nccl is not None else self.p2p
        sent = [(_wire(b), j) for b, j in sends if b.nbytes]
        received = [(_wire(b), j) for b, j in recvs if b.nbytes]
        req = transport.exchange(sent, received)
        return self._transfer(req, device, blocking or not (sent or received))

    #: CUDA tensors combine in torch, in ``combine_rows``' order and roundings.
    combine_device = staticmethod(_combine_cuda)

    def p2p_ops(self, ops: list[Any], cuda: bool, blocking: bool) -> _Transfer:
        """Start the ``dist.P2POp`` list ``ops`` as one batch (every rank calls this, even
        with no ops)."""
        if cuda:
            self._ready_nccl()
        req = _TorchBatch(dist.batch_isend_irecv(ops) if ops else [])
        return self._transfer(req, cuda, blocking or not ops)

    def _transfer(self, req: Request, cuda: bool, blocking: bool) -> _Transfer:
        if blocking or cuda:
            return _Transfer(req)
        if self._waiter is None:
            self._waiter = ThreadPoolExecutor(1, thread_name_prefix="fogsim-torch-waiter")
        return _Transfer(req, self._waiter)

    def _ready_nccl(self) -> None:
        if not self._nccl_ready:
            # NCCL wants its first call on a group to involve every rank: a tiny collective.
            assert self.nccl is not None
            dist.all_reduce(torch.zeros(1, device="cuda"), group=self.nccl.group)
            self._nccl_ready = True

    def close(self) -> None:
        self.nccl = None  # its group is destroyed with the world's
        if self._waiter is not None:
            self._waiter.shutdown(wait=True)
            self._waiter = None
