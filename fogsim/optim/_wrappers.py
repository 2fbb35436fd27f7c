"""Decentralized SGD wrappers: adapt-then-combine, adapt-with-combine, gradient allreduce.

Distributed, each one overlaps its communication with the backward (or forward) pass:
hooks start nonblocking ops as soon as a parameter is ready, and ``step()`` waits for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ._base import CommunicationType, DistributedOptimizer

__all__ = [
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedGradientAllreduceOptimizer",
]


def _copy_into(p: torch.Tensor, value: torch.Tensor) -> None:
    p.copy_(value)


class _BackwardHooked(DistributedOptimizer):
    """A wrapper acting on each parameter as soon as its gradient is accumulated.

    Subclasses define ``_on_ready(params)`` (called from the hook for one parameter, or
    from ``step()`` for all those no hook saw) and ``_complete()`` (the rest of the step).
    """

    def __init__(self, optimizer, model, communication_type=None,
                 num_steps_per_communication=1, *, overlap=None) -> None:  # fmt: skip
        super().__init__(optimizer, model, communication_type, num_steps_per_communication,
                         overlap)  # fmt: skip
        self._ready: set[torch.Tensor] = set()
        if self.overlap:
            for p in self._params():
                if p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))

    def _on_grad(self, p: torch.Tensor) -> None:
        if p in self._ready:
            self._abandon()
            self._ready.clear()
            raise RuntimeError(
                f"{type(self).__name__}: the gradient of {self._names[p]!r} was computed "
                "twice before step(); call step() after each backward pass"
            )
        self._ready.add(p)
        self._on_ready([p])

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def _complete(self) -> None:
        raise NotImplementedError

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Finish the step: act on the parameters no hook saw, then combine."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rest = [p for p in self._params() if p not in self._ready]
        self._ready.clear()
        if rest:
            self._on_ready(rest)
        self._complete()
        self._steps += 1
        return loss


class DistributedAdaptThenCombineOptimizer(_BackwardHooked):
    """Adapt then combine (ATC): a local step, then mix parameters with the neighbors.

    ``x_i <- sum_j w_ij (x_j + u_j)``, where ``u_j`` is the update the wrapped optimizer
    computes on agent j (``-lr * grad`` for plain SGD): ``x <- W (x - lr grad)``.
    Distributed, each parameter's local step and the start of its nonblocking
    ``neighbor_allreduce`` run in a hook as soon as its gradient is accumulated, so
    communication overlaps the rest of the backward pass; ``step()`` waits and writes the
    combined values.

    ``communication_type``: ``neighbor_allreduce`` (default; weights from ``self_weight``,
    ``src_weights``, ``dst_weights``), ``allreduce`` (exact average), ``empty`` (local
    step only), or ``hierarchical_neighbor_allreduce``.
    """

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        self._local_step(params)
        if self._communicating():
            self._start_all([(p, p.detach()) for p in params])

    def _complete(self) -> None:
        self._finish(_copy_into)


class DistributedGradientAllreduceOptimizer(_BackwardHooked):
    """Average the gradients over all agents, then step (Horovod-style data parallelism).

    ``g <- (1/n) sum_j g_j`` with :func:`fogsim.allreduce` (distributed: started per
    parameter as soon as its gradient is accumulated); ``step()`` waits and runs the
    wrapped optimizer, so every agent takes the same step. With
    ``num_steps_per_communication = k`` gradients are averaged at every k-th step only
    (``communication_type='empty'``: never).
    """

    _allowed = (CommunicationType.allreduce, CommunicationType.empty)

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        if self._communicating():
            self._start_all([(p, p.grad.detach()) for p in params if p.grad is not None])

    def _complete(self) -> None:
        self._finish(lambda p, g: p.grad.copy_(g))
        self.optimizer.step()


class DistributedAdaptWithCombineOptimizer(DistributedOptimizer):
    """Adapt with combine (AWC): mix the parameters while computing the gradient.

    ``x_i <- sum_j w_ij x_j + u_i``, where ``u_i`` is agent i's local update computed at its
    own ``x_i`` (``x <- W x - lr grad(x)`` for plain SGD). Distributed, each module's
    parameters start their nonblocking ``neighbor_allreduce`` from a forward hook once the
    module has run (training mode, gradients enabled), overlapping communication with the
    rest of the forward and the backward pass; ``step()`` waits, writes ``W x`` and runs
    the wrapped optimizer with the gradients computed at ``x``.
    """

    def __init__(self, optimizer, model, communication_type=None,
                 num_steps_per_communication=1, *, overlap=None) -> None:  # fmt: skip
        super().__init__(optimizer, model, communication_type, num_steps_per_communication,
                         overlap)  # fmt: skip
        if self.overlap:
            for module in model.modules():
                own = [p for p in module.parameters(recurse=False) if p in self._group_of]
                if own:
                    self._hooks.append(module.register_forward_hook(self._forward_hook(own)))

    def _forward_hook(self, params: list[torch.Tensor]):
        # The hook closes over the Parameter objects: under an AgentModel's vmap the
        # module's attributes are the replicas' slices while it runs.
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            if module.training and torch.is_grad_enabled() and self._communicating():
                for p in params:
                    if not self._started(p):
                        self._start(p, p.detach())

        return hook

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Wait for the mixed parameters, write them, then run the wrapped optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._communicating():
            self._start_all([(p, p.detach()) for p in self._params() if not self._started(p)])
        self._finish(_copy_into)
        self.optimizer.step()
        self._steps += 1
        return loss
