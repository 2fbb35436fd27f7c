"""The sharded simulator's neighbor averaging of tensors on a device (see ``_sharded``).

The block and its halo are combined in torch on the tensor's device (``_torchops``): no
copy of the block to the host. The halo travels as device tensors over a transport that
takes them (torch.distributed: NCCL for CUDA); over MPI only the halo rows are staged
through host memory.
"""

from __future__ import annotations

from typing import Any

from ... import timeline as _timeline
from . import _torchops
from ._plan import CsrPlan, Plan, plan_messages
from ._shards import TAG_NEIGHBOR, ShardPlan

__all__ = ["device_combine"]

#: Device plans remembered (as many as the sharded simulator's splits).
_CACHED_SHARDS = 32


def device_combine(backend: Any, plan: Plan, t: Any, dtype: Any) -> Any:
    """``neighbor_allreduce`` of a tensor on its own device (CUDA: no copy of the block
    to the host). The halo travels as device tensors over torch.distributed (NCCL for
    CUDA); over MPI, only the halo rows are staged through host memory."""
    import torch

    b = backend._rows
    flat = t.reshape(b, -1)
    shard = backend._shard(plan)
    halo = flat.new_empty((len(shard.halo), flat.shape[1]))
    if flat.shape[1]:
        _move_halo(backend._t, flat, halo, shard)
    entry = backend._device_plans_of.get(id(shard))
    if entry is None or entry[0] is not shard:
        steps = CsrPlan(shard.self_weight, shard.indptr, shard.indices, shard.data)
        entry = backend._device_plans_of[id(shard)] = (shard, steps)
        if len(backend._device_plans_of) > _CACHED_SHARDS:
            del backend._device_plans_of[next(iter(backend._device_plans_of))]
    with _timeline.phase("COMPUTE_AVERAGE"):
        out = _torchops.combine(backend._device_plans, entry[1], torch.cat([flat, halo]))[:b]
    if backend._cost is not None:
        info = {"topology": plan_messages(plan, backend._n)}
        _torchops._charge(backend, "neighbor_allreduce", t, **info)
    return _torchops._out(out, dtype).reshape(t.shape)


def _move_halo(transport: Any, flat: Any, halo: Any, shard: ShardPlan) -> None:
    """Exchange the halo rows of the device tensor ``flat`` into ``halo``."""
    import torch

    if getattr(transport, "takes_tensors", False):
        sends = [
            (flat[torch.as_tensor(rows, device=flat.device)].contiguous(), q)
            for q, rows in shard.send.items()
        ]
        recvs = [(halo[a:z], q) for q, (a, z) in shard.recv.items()]
        transport.exchange(sends, recvs, TAG_NEIGHBOR).wait()
        return
    staged = torch.empty(tuple(halo.shape), dtype=halo.dtype).numpy()
    sends = [
        (flat[torch.as_tensor(rows, device=flat.device)].cpu().numpy(), q)
        for q, rows in shard.send.items()
    ]
    recvs = [(staged[a:z], q) for q, (a, z) in shard.recv.items()]
    transport.exchange(sends, recvs, TAG_NEIGHBOR).wait()
    halo.copy_(torch.from_numpy(staged))
