"""The sharded simulator's neighbor averaging of tensors on a device (see ``_sharded``).

The block and its halo are combined in torch on the tensor's device (``_torchops``): no
copy of the block to the host. The halo travels as device tensors over a transport that
takes them (torch.distributed: NCCL for CUDA); over MPI only the halo rows are staged
through host memory.
"""

from __future__ import annotations

from typing import Any

from ... import timeline as _timeline
from .._runtime.transport import Transport
from . import _torchops
from ._plan import CsrPlan, Plan, plan_messages
from ._shardcomm import CACHED_SHARDS, ShardComm
from ._shards import TAG_NEIGHBOR, ShardPlan
from ._state import SimState

__all__ = ["device_combine"]


def device_combine(state: SimState, comm: ShardComm, plan: Plan, t: Any, dtype: Any) -> Any:
    """``neighbor_allreduce`` of a tensor on its own device (CUDA: no copy of the block
    to the host). The halo travels as device tensors over torch.distributed (NCCL for
    CUDA); over MPI, only the halo rows are staged through host memory."""
    import torch

    b = state.rows
    flat = t.reshape(b, -1)
    shard = comm.shard(plan)
    halo = flat.new_empty((len(shard.halo), flat.shape[1]))
    if flat.shape[1]:
        _move_halo(comm.transport, flat, halo, shard)
    steps = comm.device_steps
    entry = steps.get(id(shard))
    if entry is None or entry[0] is not shard:
        step = CsrPlan(shard.self_weight, shard.indptr, shard.indices, shard.data)
        entry = steps[id(shard)] = (shard, step)
        if len(steps) > CACHED_SHARDS:
            del steps[next(iter(steps))]
    with _timeline.phase("COMPUTE_AVERAGE"):
        out = _torchops.combine(state.device_plans, entry[1], torch.cat([flat, halo]))[:b]
    if state.cost is not None:
        info = {"topology": plan_messages(plan, state.n)}
        _torchops._charge(state, "neighbor_allreduce", t, **info)
    return _torchops._out(out, dtype).reshape(t.shape)


def _move_halo(transport: Transport, flat: Any, halo: Any, shard: ShardPlan) -> None:
    """Exchange the halo rows of the device tensor ``flat`` into ``halo``."""
    import torch

    if transport.takes_tensors:
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
