"""The FLOPs of one training pass of a model (forward and backward), as torch counts them.

The wrappers charge these to the agents' clocks (:mod:`fogsim.clock`). The count runs
the model's forward and then a backward from its outputs under
``torch.utils.flop_counter.FlopCounterMode``, on a copy of the model whose
parameters, buffers and inputs are ``meta`` tensors (shapes and dtypes, no data, no
arithmetic): the backward is counted as torch runs it (e.g. a first layer whose input
needs no gradient computes only its weight's gradient), not guessed as twice the forward.
A model the meta device cannot run (a branch on the data) is counted on a copy holding
the real values. Nothing of the real model is touched: not its parameters, gradients,
buffers or hooks, nor the random number generators.

For an :class:`~fogsim.optim.AgentModel` the count is one agent's: its pristine module
with one agent's parameter shapes and one agent's slice of each positional input, so a
simulated agent is charged what the same agent computes alone under MPI.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ._agents import AgentModel

__all__ = ["pass_flops", "signature"]


def signature(args: Any, kwargs: Any, training: bool) -> Hashable:
    """What a pass's FLOPs may depend on: the inputs' shapes, dtypes and devices."""
    return training, _signature(args), _signature(kwargs)


def _signature(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, value.device, value.requires_grad)
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _signature(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return ("unhashable", type(value).__name__)
    out: Hashable = value
    return out


def _map(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``fn`` applied to every tensor inside lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list | tuple):
        mapped = [_map(v, fn) for v in value]
        return mapped if isinstance(value, list) else type(value)(mapped)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _leaf(like: torch.Tensor, meta: bool, row: bool) -> torch.Tensor:
    """A fresh leaf like ``like`` (its first row when ``row``): empty on meta, else a copy."""
    source = like[0] if row else like
    if meta:
        out = torch.empty(source.shape, dtype=source.dtype, device="meta")
    else:
        out = source.detach().clone()
    if like.requires_grad:
        out.requires_grad_(True)
    return out


def _copy(model: nn.Module, meta: bool) -> tuple[nn.Module, bool]:
    """A copy of ``model`` without hooks, its tensors fresh leaves (see :func:`_leaf`);
    and whether it is one agent's module of an AgentModel (inputs then lose a row)."""
    per_agent = isinstance(model, AgentModel)
    source, stacked = model, model
    if isinstance(model, AgentModel):
        source, stacked = model._template, model.__dict__["_stacked"]
    memo: dict[int, Any] = {}
    for module in source.modules():  # the copy gets no hooks (they act on the real model)
        for name, value in vars(module).items():
            if "hooks" in name and isinstance(value, dict):
                memo[id(value)] = type(value)()
    # the source's tensors are replaced (deepcopy reads the memo first); an AgentModel's
    # template takes the stacked tensors' rows of the same names
    params = dict(stacked.named_parameters(remove_duplicate=False))
    for name, p in source.named_parameters(remove_duplicate=False):
        live = params.get(name, p)
        if id(p) not in memo:
            memo[id(p)] = nn.Parameter(_leaf(live.detach(), meta, per_agent), live.requires_grad)
    buffers = dict(stacked.named_buffers(remove_duplicate=False))
    for name, b in source.named_buffers(remove_duplicate=False):
        if id(b) not in memo:
            memo[id(b)] = _leaf(buffers.get(name, b), meta, per_agent)
    clone = copy.deepcopy(source, memo)
    clone.train(model.training)
    return clone, per_agent


def _count(model: nn.Module, args: Any, kwargs: Any, meta: bool) -> float:
    clone, per_agent = _copy(model, meta)
    args = _map(args, lambda t: _leaf(t, meta, per_agent))
    kwargs = _map(kwargs, lambda t: _leaf(t, meta, False))
    devices = sorted({t.device.index or 0 for t in _tensors((args, kwargs)) if t.is_cuda})
    with torch.random.fork_rng(devices=devices), FlopCounterMode(display=False) as counter:
        out = [t for t in _tensors(clone(*args, **kwargs)) if t.requires_grad]
        if out:
            torch.autograd.backward(out, [torch.ones_like(t) for t in out])
    return float(counter.get_total_flops())


def pass_flops(model: nn.Module, args: Any, kwargs: Any, agents: int = 1) -> float:
    """One agent's FLOPs for a forward and backward pass of ``model`` on these inputs.

    ``agents``: how many agents a plain (not AgentModel) module's pass computes for at
    once (its stacked agents in simulation): the count is divided among them.
    """
    try:
        flops = _count(model, args, kwargs, meta=True)
    except Exception as meta_error:  # e.g. a branch on the data: count on the real values
        try:
            flops = _count(model, args, kwargs, meta=False)
        except Exception as exc:
            raise RuntimeError(
                f"fogsim.optim could not count the FLOPs of {type(model).__name__}'s training "
                f"pass for the clock ({exc}); set the optimizer's count_flops = False and "
                "charge computation with fogsim.clock.compute()"
            ) from meta_error
    return flops if isinstance(model, AgentModel) else flops / agents
