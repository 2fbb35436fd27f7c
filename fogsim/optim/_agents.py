"""The agent axis for torch models: one module per agent, stacked in simulation.

Distributed, a process holds one agent and its model is an ordinary ``nn.Module``. In
simulation one process holds all n agents (a sharded one its block, ``fs.rank()``);
:func:`replicate` then returns an :class:`AgentModel` whose parameters are those replicas'
parameters stacked along a leading agent axis, and whose forward is
``torch.func.vmap(functional_call)`` over that axis. A torch optimizer over those stacked
parameters updates every replica at once: SGD, Adam and the other elementwise optimizers
give each replica exactly the step it would get alone.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, stack_module_state

import fogsim as fs

__all__ = ["AgentModel", "is_simulated", "per_agent", "replicate"]


def is_simulated() -> bool:
    """Return whether this process stacks agents on a leading axis (all of them, or its
    block of a sharded simulation)."""
    return np.ndim(fs.rank()) > 0


def stacked_ranks() -> list[int]:
    """Return the ranks of the agents stacked in this process (its block when sharded)."""
    return [int(r) for r in np.asarray(fs.rank())]


def replicate(model: nn.Module | Callable[[int], nn.Module]) -> nn.Module:
    """Return this process's model: an :class:`AgentModel` in simulation, else the module.

    The AgentModel stacks the agents this process holds: all of them, or the block
    ``fs.rank()`` of a sharded simulation (``model(r)`` is called for those ranks only).

    ``model`` is a module (every agent starts from a copy of it) or a function of the rank
    returning agent r's module (as :func:`fogsim.local` takes), e.g. to give each agent
    its own initialization. Distributed, the module itself (or ``model(rank())``) is
    returned, so one training script runs in both modes.
    """
    if isinstance(model, nn.Module):
        if not is_simulated():
            return model
        return AgentModel([model] * len(fs.rank()))
    if not callable(model):
        raise TypeError(
            "replicate(): model must be an nn.Module or a function of the rank, got "
            f"{type(model).__name__}"
        )
    if not is_simulated():
        return _checked_module(model(fs.rank()), "model(rank)")
    return AgentModel([_checked_module(model(r), f"model({r})") for r in stacked_ranks()])


def per_agent(
    fn: Callable[..., Any], in_dims: int | tuple[Any, ...] = 0, randomness: str = "error"
) -> Callable[..., Any]:
    """Return ``fn`` applied agent by agent: ``torch.func.vmap`` in simulation, else ``fn``.

    Use it for what each agent computes on its own outputs, e.g. the loss:
    ``loss = per_agent(F.cross_entropy)(model(x), y)`` is agent r's loss distributed and the
    n agents' losses (shape ``(n,)``) in simulation; ``loss.sum().backward()`` then gives
    every agent the gradient of its own loss in both modes. ``F.cross_entropy``,
    ``F.nll_loss``, ``F.mse_loss`` and ``F.l1_loss`` skip vmap in their common forms (mean
    or sum reduction, no class weights or smoothing): one call of the loss on the stacked
    samples, then a mean or sum per agent; other calls go through vmap.
    """
    if not callable(fn):
        raise TypeError(f"per_agent(): fn must be a function, got {type(fn).__name__}")
    if not is_simulated():
        return fn
    mapped = torch.func.vmap(fn, in_dims=in_dims, randomness=randomness)
    batched = _BATCHED_LOSSES.get(fn) if in_dims == 0 else None
    if batched is None:
        return mapped
    return _BatchedLoss(fn, batched, mapped)


# -- the common losses without vmap -------------------------------------------------------
#: A loss on stacked values, or None where it leaves the call to vmap.
_Loss = Callable[..., "torch.Tensor | None"]


# vmap runs a loss through torch's decompositions, op by op; these give each agent's loss
# from one call of the same loss on the stacked values (reduction "none", then a mean or a
# sum per agent): same values as vmap up to rounding, fewer and larger kernels.
def _per_agent_reduce(
    loss: torch.Tensor, reduction: str, count: torch.Tensor | None = None
) -> torch.Tensor:
    flat = loss.reshape(loss.shape[0], -1)
    if reduction == "sum":
        return flat.sum(1)
    return flat.sum(1) / count if count is not None else flat.mean(1)


def _class_axis_first(
    input: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked ``(n, C)`` / ``(n, B, C, ...)`` inputs as torch's ``(N, C, ...)`` layout."""
    if input.dim() == 2:  # one unbatched sample (C,) per agent: already (n, C)
        return input, target
    n = input.shape[0]
    return input.reshape(n * input.shape[1], *input.shape[2:]), target.reshape(
        n * target.shape[1], *target.shape[2:]
    )


def _batched_class_loss(fn: Callable[..., torch.Tensor]) -> _Loss:
    def loss(
        input: torch.Tensor,
        target: torch.Tensor,
        weight: torch.Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        **options: Any,
    ) -> torch.Tensor | None:
        if (
            weight is not None
            or reduction not in ("mean", "sum")
            or options.get("label_smoothing", 0.0)
            or target.dtype.is_floating_point
            or input.dim() < 2
        ):
            return None  # class weights, smoothing or probabilities: leave it to vmap
        n = input.shape[0]
        flat_in, flat_target = _class_axis_first(input, target)
        out = fn(flat_in, flat_target, ignore_index=ignore_index, reduction="none")
        out = out.reshape(n, -1)
        kept = (target.reshape(n, -1) != ignore_index).sum(1).to(out.dtype)
        return _per_agent_reduce(out, reduction, kept)

    return loss


def _batched_pointwise_loss(fn: Callable[..., torch.Tensor]) -> _Loss:
    def loss(
        input: torch.Tensor, target: torch.Tensor, reduction: str = "mean", **options: Any
    ) -> torch.Tensor | None:
        if reduction not in ("mean", "sum") or input.shape != target.shape or options:
            return None  # broadcasting or options: leave it to vmap
        return _per_agent_reduce(fn(input, target, reduction="none"), reduction)

    return loss


_BATCHED_LOSSES: dict[Callable[..., Any], _Loss] = {
    torch.nn.functional.cross_entropy: _batched_class_loss(torch.nn.functional.cross_entropy),
    torch.nn.functional.nll_loss: _batched_class_loss(torch.nn.functional.nll_loss),
    torch.nn.functional.mse_loss: _batched_pointwise_loss(torch.nn.functional.mse_loss),
    torch.nn.functional.l1_loss: _batched_pointwise_loss(torch.nn.functional.l1_loss),
}


class _BatchedLoss:
    """``per_agent(loss)`` for a loss in ``_BATCHED_LOSSES``: batched where it can, else vmap."""

    def __init__(self, fn: Callable[..., Any], batched: _Loss, mapped: Callable[..., Any]) -> None:
        self.__wrapped__, self._batched, self._mapped = fn, batched, mapped

    def __call__(self, input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and isinstance(input, torch.Tensor) and isinstance(target, torch.Tensor):
            out = self._batched(input, target, **kwargs)
            if out is not None:
                return out
        return self._mapped(input, target, *args, **kwargs)

    def __repr__(self) -> str:
        return f"per_agent({getattr(self.__wrapped__, '__name__', self.__wrapped__)!r})"


def _checked_module(value: Any, what: str) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{what} must return an nn.Module, got {type(value).__name__}")
    return value


def _set(root: nn.Module, name: str, value: torch.Tensor, buffer: bool) -> None:
    owner_name, _, leaf = name.rpartition(".")
    owner = root.get_submodule(owner_name)
    if buffer:
        owner.register_buffer(leaf, value, persistent=leaf not in owner._non_persistent_buffers_set)
    else:
        setattr(owner, leaf, value)


# Layers that act elementwise (or on trailing axes only), so a stacked input needs nothing.
_ELEMENTWISE = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.ELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.Hardtanh,
    nn.Dropout,
)


def _stacked_linear(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` for a weight ``(n, out, in)``: one batched matmul."""
    n = self.weight.shape[0]
    flat = x.reshape(n, -1, x.shape[-1])
    weight = self.weight.transpose(1, 2)
    if self.bias is None:
        out = torch.bmm(flat, weight)
    else:
        out = torch.baddbmm(self.bias.unsqueeze(1), flat, weight)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _stacked_flatten(self: nn.Flatten, x: torch.Tensor) -> torch.Tensor:
    """``nn.Flatten.forward`` with the agent axis in front."""
    start, end = self.start_dim, self.end_dim
    return x.flatten(start + 1 if start >= 0 else start, end + 1 if end >= 0 else end)


def _batchable(module: nn.Module) -> bool:
    """Whether ``module`` runs on stacked inputs once its layers are made stacked."""
    if type(module) is nn.Sequential:
        return all(_batchable(m) for m in module)
    return type(module) in (nn.Linear, nn.Flatten) or type(module) in _ELEMENTWISE


def _make_stacked(module: nn.Module) -> None:
    """Give the stacked copy's Linear and Flatten layers their stacked forwards."""
    # Replacing forward on the instance (not the class) keeps the caller's own layers as
    # they are; mypy forbids assigning to a method, which is the point here.
    for m in module.modules():
        if type(m) is nn.Linear:
            m.forward = types.MethodType(_stacked_linear, m)  # type: ignore[method-assign]
        elif type(m) is nn.Flatten:
            m.forward = types.MethodType(_stacked_flatten, m)  # type: ignore[method-assign]


class AgentModel(nn.Module):
    """n replicas of one architecture as one module, parameters stacked on axis 0.

    Its parameters and buffers have the names of the replicated module's and shape
    ``(n, *shape)`` (so ``state_dict()`` keys are those of the module distributed);
    ``forward(*args, **kwargs)`` runs every replica on its own slice of each positional
    argument (stacked along the agent axis, e.g. built with :func:`fogsim.local`) and passes
    keyword arguments whole to every replica. That is ``torch.func.vmap`` of
    ``functional_call``; an ``nn.Sequential`` of Linear, Flatten, Dropout and activation
    layers runs directly on the stacked tensors instead (batched matmuls, no vmap), which
    is faster and gives the same numbers to rounding. Hooks on the submodules fire as
    usual, with stacked inputs. Random layers (dropout) draw independently per replica.
    BatchNorm's running statistics are not supported (use ``track_running_stats=False``,
    GroupNorm or LayerNorm).
    """

    _template: nn.Module  # set with object.__setattr__: not a registered submodule

    def __init__(self, modules: list[nn.Module], randomness: str = "different") -> None:
        super().__init__()
        if not modules:
            raise ValueError("AgentModel needs at least one module")
        for i, m in enumerate(modules):
            _checked_module(m, f"modules[{i}]")
        try:
            params, buffers = stack_module_state(list(modules))
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"the agents' modules differ in structure: {exc}") from exc
        template = modules[0]
        grads = {name: p.requires_grad for name, p in template.named_parameters()}
        stacked = copy.deepcopy(template)
        for name, value in params.items():
            param = nn.Parameter(value.detach().clone(), requires_grad=grads[name])
            _set(stacked, name, param, buffer=False)
        for name, value in buffers.items():
            _set(stacked, name, value.detach().clone(), buffer=True)
        # The stacked copy runs the forward; this module shares its children, parameters
        # and buffers (so the names match the module's) without registering the copy.
        # The pristine copy is what agent(i) returns, filled with agent i's values.
        object.__setattr__(self, "_template", copy.deepcopy(template))
        object.__setattr__(self, "_stacked", stacked)
        for name, child in stacked.named_children():
            self._share(name)
            self.add_module(name, child)
        for name, param in stacked.named_parameters(recurse=False):
            self._share(name)
            self.register_parameter(name, param)
        for name, buf in stacked.named_buffers(recurse=False):
            self._share(name)
            self.register_buffer(name, buf, name not in stacked._non_persistent_buffers_set)
        self.num_agents = len(modules)
        self.randomness = randomness
        self.batched = _batchable(stacked)
        if self.batched:
            _make_stacked(stacked)
        self._vmapped: tuple[str, Any] | None = None
        self.training = stacked.training

    def _share(self, name: str) -> None:
        if hasattr(type(self), name) or name in self.__dict__:
            raise ValueError(
                f"AgentModel cannot hold a module whose attribute {name!r} clashes with its own"
            )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        for k, a in enumerate(args):
            if isinstance(a, torch.Tensor) and (a.dim() == 0 or a.shape[0] != self.num_agents):
                raise ValueError(
                    f"AgentModel: positional argument {k} has shape {tuple(a.shape)}; every "
                    f"positional argument is per agent, stacked along a leading axis of "
                    f"{self.num_agents} (build it with fogsim.local)"
                )
        if self.batched:
            return self._stacked(*args, **kwargs)
        if self._vmapped is None or self._vmapped[0] != self.randomness:
            self._vmapped = (
                self.randomness,
                torch.func.vmap(self._one, randomness=self.randomness),
            )
        stacked = self._stacked
        return self._vmapped[1](
            dict(stacked.named_parameters()), dict(stacked.named_buffers()), *args, **kwargs
        )

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or "_vmapped" not in self.__dict__:
                raise  # private, or still in __init__ (registering the shared children)
            return getattr(self.__dict__["_stacked"], name)  # e.g. a model's own settings

    def __getitem__(self, index: Any) -> Any:
        return self._stacked[index]  # nn.Sequential indexing, on the stacked layers

    def __len__(self) -> int:
        return len(self._stacked)

    def __iter__(self) -> Any:
        return iter(self._stacked)

    def _one(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """One replica's forward (``params`` and ``buffers`` are its slices)."""
        return functional_call(self._stacked, (params, buffers), args, kwargs)

    def train(self, mode: bool = True) -> AgentModel:
        super().train(mode)
        self._stacked.training = mode
        return self

    def _apply(
        self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> AgentModel:
        # torch leaves Module._apply unannotated
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        stacked = self._stacked  # its own parameters and buffers may have been replaced
        for name in stacked._parameters:
            stacked._parameters[name] = self._parameters[name]
        for name in stacked._buffers:
            stacked._buffers[name] = self._buffers[name]
        return self

    def agent(self, i: int) -> nn.Module:
        """Return agent ``i``'s model as an ordinary module (a copy).

        ``i`` counts the replicas stacked here: row ``i``, which is agent ``fs.rank()[i]``
        in a sharded simulation.
        """
        if (
            isinstance(i, bool)
            or not isinstance(i, int | np.integer)
            or not 0 <= i < self.num_agents
        ):
            raise ValueError(f"agent index must be in 0..{self.num_agents - 1}, got {i!r}")
        one = copy.deepcopy(self._template)
        with torch.no_grad():
            for name, p in self._stacked.named_parameters():
                _set(one, name, nn.Parameter(p[i].clone(), requires_grad=p.requires_grad), False)
            for name, b in self._stacked.named_buffers():
                _set(one, name, b[i].clone(), buffer=True)
        return one

    def extra_repr(self) -> str:
        return f"agents={self.num_agents}"
