"""Decentralized SGD wrappers: adapt-then-combine, adapt-with-combine, gradient allreduce.

Distributed, each one overlaps its communication with the backward (or forward) pass:
hooks start nonblocking ops as soon as a parameter is ready, and ``step()`` waits for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ._base import CommunicationType, DistributedOptimizer

if TYPE_CHECKING:
    from fogsim.compress import Compressor

__all__ = [
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedGradientAllreduceOptimizer",
]


def _copy_into(p: torch.Tensor, value: torch.Tensor) -> None:
    p.copy_(value)


def _copy_into_grad(p: torch.Tensor, value: torch.Tensor) -> None:
    grad = p.grad
    assert grad is not None  # only parameters with a gradient were sent
    grad.copy_(value)


class _BackwardHooked(DistributedOptimizer):
    """A wrapper acting on each parameter once its gradient of the round is accumulated.

    A pass is a backward pass: a hook on each parameter counts the gradients accumulated
    into it. With overlap, the J-th one (J = ``num_steps_per_communication``) calls
    ``_on_ready([p])``; ``step()`` calls it for the parameters no hook saw. Subclasses
    define ``_on_ready(params)`` (act on ``params``; ``_communicating()`` says whether this
    step communicates) and ``_complete()`` (the rest of the step).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        communication_type: CommunicationType | str | None = None,
        num_steps_per_communication: int = 1,
        *,
        overlap: bool | None = None,
        global_average_every: int | None = None,
        compressor: Compressor | None = None,
        gamma: float | None = None,
    ) -> None:
        super().__init__(
            optimizer,
            model,
            communication_type,
            num_steps_per_communication,
            overlap,
            global_average_every,
            compressor,
            gamma,
        )
        self._ready: set[torch.Tensor] = set()
        # gradients accumulated into each parameter since the last communicating step
        self._passes: dict[torch.Tensor, int] = dict.fromkeys(self._params(), 0)
        self._backward_seen = False
        for p in self._params():
            if p.requires_grad:
                # torch leaves register_post_accumulate_grad_hook unannotated
                hook = p.register_post_accumulate_grad_hook
                self._hooks.append(hook(self._on_grad))  # type: ignore[no-untyped-call]

    def _on_grad(self, p: torch.Tensor) -> None:
        self._backward_seen = True
        self._passes[p] += 1
        if not self.overlap:
            return  # step() does the work
        count, limit = self._passes[p], self._num_steps_per_communication
        if count > limit:
            self._abandon()
            self._ready.clear()
            self._passes = dict.fromkeys(self._passes, 0)
            raise RuntimeError(
                f"{type(self).__name__}: the gradient of {self._names[p]!r} was computed "
                f"{count} times before step(), with num_steps_per_communication={limit}; "
                f"call step() after at most {limit} backward pass(es)"
            )
        if count == limit:
            self._ready.add(p)
            self._on_ready([p])

    def _round_due(self) -> bool:
        return max(self._passes.values(), default=0) >= self._num_steps_per_communication

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def _complete(self) -> None:
        raise NotImplementedError

    def _end_step(self, communicated: bool) -> None:
        """Start counting the passes of the next round after a communicating step."""
        if communicated:
            self._passes = dict.fromkeys(self._passes, 0)
            self._rounds += 1

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Finish the step: act on the parameters no hook saw, then combine."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._pending_flops:
            self._charge_compute()
        if not self._backward_seen:  # no backward pass since the last step: count one
            self._passes = {p: k + 1 for p, k in self._passes.items()}
        self._backward_seen = False
        due = self._round_due()
        rest = [p for p in self._params() if p not in self._ready]
        self._ready.clear()
        if rest:
            self._on_ready(rest)
        self._complete()
        self._end_step(due)
        return loss


class _ForwardCounted(DistributedOptimizer):
    """A wrapper whose passes are the model's forward calls (training, gradients enabled).

    With overlap, forward hooks on the modules call ``_start_params(params)`` during the
    J-th forward call of the round; ``step()`` starts the parameters not started yet, calls
    ``_complete(communicating)`` and then runs the wrapped optimizer.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        communication_type: CommunicationType | str | None = None,
        num_steps_per_communication: int = 1,
        *,
        overlap: bool | None = None,
        global_average_every: int | None = None,
        compressor: Compressor | None = None,
        gamma: float | None = None,
    ) -> None:
        super().__init__(
            optimizer,
            model,
            communication_type,
            num_steps_per_communication,
            overlap,
            global_average_every,
            compressor,
            gamma,
        )
        self._forwards = 0  # training forward calls since the last communicating step
        self._forward_seen = False
        # Counted once per call of the whole model: a layer used twice is one pass.
        self._hooks.append(model.register_forward_pre_hook(self._count_forward))
        if self.overlap:
            for module in model.modules():
                own = [p for p in module.parameters(recurse=False) if p in self._group_of]
                if own:
                    self._hooks.append(module.register_forward_hook(self._forward_hook(own)))

    def _count_forward(self, module: nn.Module, inputs: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self._forwards += 1
            self._forward_seen = True

    def _round_due(self) -> bool:
        return self._forwards >= self._num_steps_per_communication

    def _forward_hook(
        self, params: Sequence[torch.Tensor]
    ) -> Callable[[nn.Module, Any, Any], None]:
        # The hook closes over the Parameter objects: under an AgentModel's vmap the
        # module's attributes are the replicas' slices while it runs.
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            if module.training and torch.is_grad_enabled() and self._communicating():
                todo = [p for p in params if not self._started(p)]
                if todo:
                    self._start_params(todo)

        return hook

    def _start_params(self, params: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def _complete(self, communicating: bool) -> None:
        raise NotImplementedError

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Finish the round's communication if this step has one, then run the optimizer."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._pending_flops:
            self._charge_compute()
        if not self._forward_seen:  # no forward pass since the last step: count one
            self._forwards += 1
        self._forward_seen = False
        communicating = self._communicating()
        if communicating:
            rest = [p for p in self._params() if not self._started(p)]
            if rest:
                self._start_params(rest)
        self._complete(communicating)
        if communicating:
            self._rounds += 1
        if self._round_due():
            self._forwards = 0
        self.optimizer.step()
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

    With ``num_steps_per_communication = J``, the J-th backward pass of a round takes the
    local step with the gradient accumulated over the round's passes and mixes; a
    ``step()`` before that takes a local step only.
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
    wrapped optimizer, so every agent takes the same step (``communication_type='empty'``:
    no averaging). Every ``step()`` averages, as BlueFog's and Horovod's do;
    ``num_steps_per_communication = J`` is the number of backward passes expected before
    it: the hooks start averaging the accumulated gradients at the J-th one.
    """

    _allowed = (CommunicationType.allreduce, CommunicationType.empty)

    def _round_due(self) -> bool:
        return True

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        if self._communicating():
            self._start_all([(p, p.grad.detach()) for p in params if p.grad is not None])

    def _complete(self) -> None:
        self._finish(_copy_into_grad)
        self.optimizer.step()


class DistributedAdaptWithCombineOptimizer(_ForwardCounted):
    """Adapt with combine (AWC): mix the parameters while computing the gradient.

    ``x_i <- sum_j w_ij x_j + u_i``, where ``u_i`` is agent i's local update computed at its
    own ``x_i`` (``x <- W x - lr grad(x)`` for plain SGD). Distributed, each module's
    parameters start their nonblocking ``neighbor_allreduce`` from a forward hook once the
    module has run (training mode, gradients enabled), overlapping communication with the
    rest of the forward and the backward pass; ``step()`` waits, writes ``W x`` and runs
    the wrapped optimizer with the gradients computed at ``x``. With
    ``num_steps_per_communication = J`` the parameters are sent during the J-th forward call
    of the round; every ``step()`` runs the wrapped optimizer.
    """

    def _start_params(self, params: list[torch.Tensor]) -> None:
        self._start_all([(p, p.detach()) for p in params])

    def _complete(self, communicating: bool) -> None:
        self._finish(_copy_into)
