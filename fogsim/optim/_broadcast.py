"""Start every agent from the same parameters and optimizer state."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

import fogsim as fs

from ._agents import is_simulated

__all__ = ["broadcast_optimizer_state", "broadcast_parameters"]

#: What ``broadcast_parameters`` takes: a module, a state dict, or ``(name, tensor)`` pairs
#: (or bare tensors, named by position).
Params = nn.Module | Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor] | torch.Tensor]


def _tensors(params: Params) -> list[tuple[str, torch.Tensor]]:
    if isinstance(params, nn.Module):
        items: Iterable[Any] = params.state_dict(keep_vars=True).items()
    elif isinstance(params, Mapping):
        items = params.items()
    elif isinstance(params, torch.Tensor):
        raise TypeError(
            "broadcast_parameters: params must be a module, a state dict or (name, tensor) "
            "pairs, not one tensor: wrap it as [('name', tensor)]"
        )
    else:
        items = list(params)
    out = []
    for k, item in enumerate(items):
        name, value = item if isinstance(item, tuple) and len(item) == 2 else (f"[{k}]", item)
        if value is None:
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"broadcast_parameters: {name} is a {type(value).__name__}, not a tensor"
            )
        out.append((str(name), value))
    return out


def broadcast_parameters(params: Params, root_rank: int = 0) -> None:
    """Overwrite every agent's tensors in place with agent ``root_rank``'s.

    ``params``: a module (its ``state_dict``: parameters and buffers), a state dict, or
    ``(name, tensor)`` pairs such as ``model.named_parameters()``. In simulation the tensors
    are an :class:`~fogsim.optim.AgentModel`'s stacked ones and row ``root_rank`` is copied
    to every agent. Every agent must pass the same names, shapes and dtypes, in one order.
    """
    items = _tensors(params)
    handles = [
        fs.broadcast_nonblocking(t.detach(), root_rank, name=f"broadcast.{name}")
        for name, t in items
    ]
    with torch.no_grad():
        for (_, t), handle in zip(items, handles, strict=True):
            t.copy_(fs.wait(handle))


def broadcast_optimizer_state(optimizer: torch.optim.Optimizer, root_rank: int = 0) -> None:
    """Give every agent agent ``root_rank``'s optimizer state and hyperparameters.

    Works for any ``torch.optim.Optimizer`` (or fogsim wrapper), whatever its state holds:
    tensors, numbers, ``None`` (e.g. SGD's momentum buffer before the first step), or
    nothing yet. Distributed, the root's ``state_dict()`` is serialized and broadcast, and
    the others load it. In simulation one optimizer serves every agent, so its
    hyperparameters are shared already; per-agent state (tensors shaped like their
    stacked parameter) gets row ``root_rank`` copied to every agent.
    """
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError(
            "broadcast_optimizer_state: optimizer must be a torch optimizer, got "
            f"{type(optimizer).__name__}"
        )
    if is_simulated():
        _broadcast_stacked_state(inner, root_rank)
        return
    payload = np.zeros(0, dtype=np.uint8)
    if fs.rank() == root_rank:
        buffer = io.BytesIO()
        torch.save(inner.state_dict(), buffer)
        payload = np.frombuffer(buffer.getbuffer(), dtype=np.uint8).copy()
    length = fs.broadcast(np.array([payload.size], dtype=np.int64), root_rank)
    if fs.rank() != root_rank:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    payload = fs.broadcast(payload, root_rank)
    if fs.rank() != root_rank:
        state = torch.load(io.BytesIO(payload.tobytes()), weights_only=True)
        inner.load_state_dict(state)


def _broadcast_stacked_state(optimizer: torch.optim.Optimizer, root_rank: int) -> None:
    n = len(fs.rank())  # the agents stacked here: every one, or a sharded process's block
    fs.broadcast(np.zeros(n), root_rank)  # checks root_rank like the distributed path
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                for value in optimizer.state.get(p, {}).values():
                    if (
                        isinstance(value, torch.Tensor)
                        and value.dim() > 0
                        and value.shape == p.shape
                        and value.shape[0] == n
                    ):
                        value.copy_(fs.broadcast(value, root_rank))
