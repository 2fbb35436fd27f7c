"""What every optimizer wrapper shares: the wrapped optimizer, per-step settings, handles.

A wrapper *is* a ``torch.optim.Optimizer`` (learning-rate schedulers accept it) sharing
``param_groups`` and ``state`` with the optimizer it wraps; it adds communication around
the wrapped optimizer's local update. In simulation the parameters are the stacked ones of
an :class:`~fogsim.optim.AgentModel`, so one wrapped ``step()`` steps every agent.
"""

from __future__ import annotations

import enum
import numbers
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

import fogsim as fs
from fogsim import _context, _settings
from fogsim import clock as _clock
from fogsim import timeline as _timeline

from . import _flops
from ._agents import is_simulated

if TYPE_CHECKING:
    from fogsim._types import SelfWeight, Weights
    from fogsim.compress import Compressor

__all__ = ["CommunicationType", "DistributedOptimizer"]


class CommunicationType(str, enum.Enum):
    """How a wrapper mixes parameters (or gradients) with other agents at a step."""

    neighbor_allreduce = "neighbor_allreduce"
    hierarchical_neighbor_allreduce = "hierarchical_neighbor_allreduce"
    allreduce = "allreduce"
    empty = "empty"


_ALIASES = {"hierarchical": CommunicationType.hierarchical_neighbor_allreduce}


def _communication_type(value: Any, allowed: tuple[CommunicationType, ...]) -> CommunicationType:
    if isinstance(value, str) and not isinstance(value, CommunicationType):
        value = _ALIASES.get(value, value)
    try:
        kind = CommunicationType(value)
    except ValueError:
        names = ", ".join(repr(c.value) for c in CommunicationType)
        raise ValueError(f"communication_type must be one of {names}, got {value!r}") from None
    if kind not in allowed:
        names = ", ".join(repr(c.value) for c in allowed)
        raise ValueError(f"this optimizer supports communication_type {names}, got {kind.value!r}")
    return kind


def _positive_int(value: Any, argname: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{argname} must be >= 1, got {value}")
    return int(value)


def _compression(compressor: object, gamma: object) -> tuple[Compressor | None, float | None]:
    """Check the ``compressor``/``gamma`` pair of a wrapper."""
    if compressor is None:
        if gamma is not None:
            raise ValueError("gamma is CHOCO's consensus step size: it needs a compressor=")
        return None, None
    from fogsim.compress import Compressor
    from fogsim.compress._gossip import check_gamma

    if not isinstance(compressor, Compressor):
        raise TypeError(
            "compressor must be a fogsim.compress compressor (e.g. fogsim.compress.top_k(0.1)),"
            f" got {type(compressor).__name__}"
        )
    if gamma is None:
        raise ValueError("compressor= needs gamma, CHOCO's consensus step size in (0, 1]")
    return compressor, check_gamma(gamma)


def _in_one_process() -> bool:
    """Whether the simulator runs this step's ops: in simulation, or as an SPMD agent.

    Also true in a run the mode checker records (``fogrun --check-modes``), so that an MPI
    run makes the ops an SPMD run makes, one fused message per dtype, from ``step()``.
    """
    return is_simulated() or _context.spmd_agent() is not None or _settings.checking_modes()


class DistributedOptimizer(torch.optim.Optimizer):
    """Base of the wrappers (see the module docstring); not used directly.

    Per-step attributes, read when the step's communication starts (set them before the
    forward pass): ``self_weight``, ``src_weights``, ``dst_weights`` and
    ``enable_topo_check`` (passed to :func:`fogsim.neighbor_allreduce`; None: the
    topology's weights), ``src_machine_weights`` and ``dst_machine_weights`` (with
    ``self_weight``, passed to :func:`fogsim.hierarchical_neighbor_allreduce`),
    ``communication_type`` (a :class:`CommunicationType` or its
    name) and ``num_steps_per_communication``.

    ``num_steps_per_communication = J`` (BlueFog's meaning): communication happens once per
    J training passes, so J forward/backward passes may run before one ``step()`` (their
    gradients accumulate: a larger batch), or J ``step()`` calls may each follow one pass
    (J - 1 local steps, then one that communicates), or anything in between. A pass is a
    forward call of the model in training mode with gradients enabled (adapt-with-combine,
    window put) or a backward pass reaching the parameters (adapt-then-combine,
    push-sum, gradient allreduce); a ``step()`` with no pass since the previous one (e.g.
    gradients set by hand) counts as one. The step that follows the J-th pass
    communicates, then the count starts again.

    ``global_average_every = K`` (periodic global averaging, Gossip-PGA, Chen et al.
    2021): every K-th communicating step averages over all agents (``allreduce``) instead
    of with the neighbors; the others gossip as ``communication_type`` says. With
    ``num_steps_per_communication = H`` it makes local SGD with periodic global averaging.
    None (default): never.

    ``compressor`` (a :mod:`fogsim.compress` compressor) with ``gamma`` (the consensus step
    size in (0, 1]): the neighbor mixing becomes CHOCO-gossip (Koloskova et al. 2019), one
    :class:`fogsim.compress.CompressedGossip` per parameter, so adapt-then-combine is
    CHOCO-SGD and adapt-with-combine steps from ``x``'s CHOCO mix with the gradient at
    ``x``; only compressed differences travel, with the static topology's weights
    (per-step weight arguments are refused). Each parameter is its own message then, in
    every mode, so all modes compress the same vectors.

    ``overlap``: start communication from hooks during the forward/backward pass
    (default when distributed). In simulation nonblocking ops complete at once, so by
    default the whole step runs in ``step()`` with one fused message per dtype; the
    numbers are the same either way.

    Simulated time: while a :mod:`fogsim.clock` runs on a platform with a
    :class:`~fogsim.clock.Device`, every training pass (a forward call in training mode
    with gradients enabled, and its backward) is charged to the agents' clocks with
    :func:`fogsim.clock.compute`, ``flops=`` the FLOPs that
    ``torch.utils.flop_counter.FlopCounterMode`` counts for the model's forward and
    backward, counted once per input shape on a meta copy of the model (one agent's module
    and inputs for an :class:`~fogsim.optim.AgentModel`; the loss is not counted). The
    passes of a step are charged together, once per step, before the step's first
    communication (at ``step()``, or in the hook that starts it), so each agent's speed and
    straggler draw scale its step's computation; under MPI or torch.distributed the rank
    sleeps that long (see :class:`fogsim.clock.WallClock`). The numbers trained are the
    same with and without a clock. :meth:`time` reads the clocks for a training loop's log;
    ``last_step_flops`` is the FLOPs (per agent) charged at the last step; set
    ``count_flops = False`` to charge computation by hand instead. Without a clock nothing
    is counted.
    """

    #: communication types a subclass supports, the first being its default
    _allowed: tuple[CommunicationType, ...] = (
        CommunicationType.neighbor_allreduce,
        CommunicationType.hierarchical_neighbor_allreduce,
        CommunicationType.allreduce,
        CommunicationType.empty,
    )

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        communication_type: CommunicationType | str | None = None,
        num_steps_per_communication: int = 1,
        overlap: bool | None = None,
        global_average_every: int | None = None,
        compressor: Compressor | None = None,
        gamma: float | None = None,
    ) -> None:
        if isinstance(optimizer, DistributedOptimizer):
            raise TypeError(f"optimizer is already wrapped by {type(optimizer).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        # torch.optim.Optimizer's own state is the wrapped optimizer's (see the properties
        # below); its __init__ would copy the param groups instead.
        self.optimizer = optimizer
        for attr in (
            "step_pre",
            "step_post",
            "state_dict_pre",
            "state_dict_post",
            "load_state_dict_pre",
            "load_state_dict_post",
        ):
            setattr(self, f"_optimizer_{attr}_hooks", OrderedDict())
        self._patch_step_function()

        self.model = model
        names = {p: name for name, p in model.named_parameters()}
        self._names: dict[torch.Tensor, str] = {}
        for g, group in enumerate(self.param_groups):
            for k, p in enumerate(group["params"]):
                self._names[p] = names.get(p, f"group{g}.param{k}")
        self._group_of = {
            p: g for g, group in enumerate(self.param_groups) for p in group["params"]
        }
        if not any(p in self._group_of for p in model.parameters()):
            raise ValueError(
                "none of model's parameters is optimized by optimizer; pass the model whose "
                "parameters the optimizer was built on (the AgentModel in simulation)"
            )

        self.self_weight: SelfWeight = None
        self.src_weights: Weights = None
        self.dst_weights: Weights = None
        self.src_machine_weights: Weights = None
        self.dst_machine_weights: Weights = None
        self.enable_topo_check = True
        self.communication_type = (
            self._allowed[0] if communication_type is None else communication_type
        )
        self.num_steps_per_communication = num_steps_per_communication
        self.global_average_every = global_average_every
        self._rounds = 0  # communicating steps done
        self.compressor, self.gamma = _compression(compressor, gamma)
        if compressor is not None and CommunicationType.neighbor_allreduce not in self._allowed:
            raise ValueError(f"{type(self).__name__} does not gossip: compressor= is not for it")
        self._gossips: dict[str, Any] = {}  # one CHOCO state per parameter
        if overlap is not None and not isinstance(overlap, bool):
            raise TypeError(f"overlap must be a bool or None, got {type(overlap).__name__}")
        # Simulated nonblocking ops complete at once, so hooks could not overlap anything:
        # by default the simulator (and an SPMD agent, whose ops the simulator runs) does the
        # whole step in step(), with fused messages: the same ops in both, op by op.
        self.overlap = (not _in_one_process()) if overlap is None else overlap
        self._handles: list[tuple[list[torch.Tensor], Any]] = []
        self._hooks: list[Any] = []
        self._trace_phases(model)
        # simulated time: each training pass's FLOPs, charged at the step (see the docstring)
        self.count_flops = True
        self.last_step_flops = 0.0
        self._pending_flops = 0.0
        self._flops_of: dict[Any, float] = {}  # per input signature
        self._stacked_agents = len(fs.rank()) if is_simulated() else 1
        self._clock_hook = model.register_forward_pre_hook(self._flops_hook, with_kwargs=True)

    # -- the wrapped optimizer's state, always (load_state_dict replaces its objects) -----
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    # -- settings -------------------------------------------------------------------------
    @property
    def communication_type(self) -> CommunicationType:
        """How the next communicating step mixes values (see :class:`CommunicationType`)."""
        return self._communication_type

    @communication_type.setter
    def communication_type(self, value: CommunicationType | str) -> None:
        self._communication_type = _communication_type(value, self._allowed)

    @property
    def self_weights(self) -> SelfWeight:
        """BlueFog's spelling of ``self_weight`` (the paper's Listing 4 sets this one)."""
        return self.self_weight

    @self_weights.setter
    def self_weights(self, value: SelfWeight) -> None:
        self.self_weight = value

    @property
    def num_steps_per_communication(self) -> int:
        """Training passes per communication (see the class docstring)."""
        return self._num_steps_per_communication

    @num_steps_per_communication.setter
    def num_steps_per_communication(self, value: int) -> None:
        self._num_steps_per_communication = _positive_int(value, "num_steps_per_communication")

    @property
    def global_average_every(self) -> int | None:
        """Communicating steps per global average (see the class docstring); None: never."""
        return self._global_average_every

    @global_average_every.setter
    def global_average_every(self, value: int | None) -> None:
        self._global_average_every = (
            None if value is None else _positive_int(value, "global_average_every")
        )

    def _global_round(self) -> bool:
        """Whether the current communicating step averages over every agent (Gossip-PGA)."""
        k = self._global_average_every
        return k is not None and (self._rounds + 1) % k == 0

    def _round_due(self) -> bool:
        """Whether enough passes ran for the current step to communicate."""
        raise NotImplementedError

    def _communicating(self) -> bool:
        """Whether the current step communicates."""
        return self._communication_type is not CommunicationType.empty and self._round_due()

    # -- the wrapped optimizer ------------------------------------------------------------
    def _params(self) -> Iterable[torch.Tensor]:
        for group in self.param_groups:
            yield from group["params"]

    def _local_step(self, params: list[torch.Tensor]) -> None:
        """Run the wrapped optimizer's step on ``params`` only (the others are untouched)."""
        if len(params) == len(self._group_of):
            self.optimizer.step()  # every parameter: no need to hide any
            return
        saved = [group["params"] for group in self.param_groups]
        wanted = set(params)
        try:
            for group in self.param_groups:
                group["params"] = [p for p in group["params"] if p in wanted]
            self.optimizer.step()
        finally:
            for group, ps in zip(self.param_groups, saved, strict=True):
                group["params"] = ps

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients (the wrapped optimizer's ``zero_grad``)."""
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped optimizer's state dict."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the wrapped optimizer's state dict."""
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}: add the parameter group to the optimizer before wrapping it"
        )

    # -- simulated time -------------------------------------------------------------------
    def time(self) -> Any:
        """The clock now (:func:`fogsim.clock.now`: each agent's, stacked, in simulation;
        this rank's under MPI or torch.distributed), or None when no clock runs."""
        return _clock.now() if _clock.running() else None

    def _flops_hook(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        """Forward pre-hook: add a training pass's FLOPs to the step's, if a clock runs."""
        if not (self.count_flops and module.training and torch.is_grad_enabled()):
            return
        if not _clock.running():
            return
        platform = _clock.current().platform
        if platform is None or platform.device is None:
            return  # FLOPs need a device to take time on
        key = _flops.signature(args, kwargs, module.training)
        flops = self._flops_of.get(key)
        if flops is None:
            if len(self._flops_of) >= 64:
                self._flops_of.clear()
            flops = _flops.pass_flops(module, args, kwargs, self._stacked_agents)
            self._flops_of[key] = flops
        self._pending_flops += flops

    def _charge_compute(self) -> None:
        """Charge the step's training passes to the clock (before its communication)."""
        flops, self._pending_flops = self._pending_flops, 0.0
        if flops and _clock.running():
            _clock.compute(flops=flops)
            self.last_step_flops = flops

    # -- communication --------------------------------------------------------------------
    def _weights(self) -> tuple[SelfWeight, Weights, Weights]:
        """Return ``(self_weight, src_weights, dst_weights)`` for this step's neighbor op."""
        return self.self_weight, self.src_weights, self.dst_weights

    def _start(self, p: torch.Tensor, value: torch.Tensor, key: str | None = None) -> None:
        """Start mixing ``value`` (``p``'s parameter or gradient) with the other agents."""
        self._handles.append(([p], self._op(value, key or self._names.get(p, "param"))))

    def _start_all(self, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Start mixing several ``(p, value)``; in simulation (and as an SPMD agent) one
        message per dtype.

        Distributed, each value gets its own op (the runtime fuses small ones).
        """
        if self._pending_flops:  # a hook starts the step's communication
            self._charge_compute()
        if not _in_one_process() or len(pairs) < 2 or self.compressor is not None:
            for p, value in pairs:
                self._start(p, value)
            return
        stacked = is_simulated()
        by_dtype: dict[torch.dtype, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for p, value in pairs:
            by_dtype.setdefault(value.dtype, []).append((p, value))
        for group in by_dtype.values():
            flat = torch.cat(
                [
                    value.reshape(value.shape[0], -1) if stacked else value.reshape(-1)
                    for _, value in group
                ],
                dim=-1,
            )
            self._handles.append(([p for p, _ in group], self._op(flat, "fused")))

    def _op(self, value: torch.Tensor, key: str) -> Any:
        name = f"{type(self).__name__}.{key}"
        kind = self._communication_type
        if kind is CommunicationType.allreduce or self._global_round():
            return fs.allreduce_nonblocking(value, name=name)
        if kind is CommunicationType.hierarchical_neighbor_allreduce:
            return fs.hierarchical_neighbor_allreduce_nonblocking(
                value,
                self.self_weight,
                self.src_machine_weights,
                self.dst_machine_weights,
                self.enable_topo_check,
                name=name,
            )
        if self.compressor is not None:
            return self._compressed(value, key, name)
        return fs.neighbor_allreduce_nonblocking(
            value, *self._weights(), self.enable_topo_check, name=name
        )

    def _compressed(self, value: torch.Tensor, key: str, name: str) -> Any:
        """One CHOCO-gossip step of ``value`` (the parameter ``key``), as a done handle."""
        from fogsim.compress import CompressedGossip

        if any(w is not None for w in self._weights()):
            raise ValueError(
                f"{type(self).__name__}: compressor= gossips with the static topology's "
                "weights; per-step self_weight/src_weights/dst_weights cannot go with it"
            )
        gossip = self._gossips.get(key)
        if gossip is None:
            assert self.compressor is not None and self.gamma is not None  # set together
            gossip = self._gossips[key] = CompressedGossip(self.compressor, self.gamma)
        return fs.Handle.completed("neighbor_allreduce", gossip.step(value), name)

    def _started(self, p: torch.Tensor) -> bool:
        return any(q is p for targets, _ in self._handles for q in targets)

    def _finish(self, store: Callable[[torch.Tensor, torch.Tensor], None]) -> None:
        """Wait for every started communication, in start order; ``store(p, result)``."""
        handles, self._handles = self._handles, []
        with torch.no_grad():
            for targets, handle in handles:
                result = fs.wait(handle)
                if len(targets) == 1:
                    store(targets[0], result)
                    continue
                offset = 0
                for p in targets:
                    if result.dim() == 1:  # an SPMD agent's fused message: its own values
                        size = p.numel()
                        store(p, result[offset : offset + size].view(p.shape))
                        offset += size
                        continue
                    size = p[0].numel()
                    part = result[:, offset : offset + size]
                    # a view where p's layout allows it (no copy before store copies)
                    store(p, part.view(p.shape) if p.dim() == 2 else part.unflatten(1, p.shape[1:]))
                    offset += size

    def _abandon(self) -> None:
        """Wait for (and drop) communications still running, e.g. after an error."""
        handles, self._handles = self._handles, []
        for _, handle in handles:
            fs.wait(handle)

    def _trace_phases(self, model: nn.Module) -> None:
        """Record FORWARD, BACKWARD and STEP on a running timeline (track ``"training"``).

        BACKWARD runs from the first gradient reaching the model's output to ``step()``.
        """
        track = "training"

        def forward(*_: Any) -> None:
            _timeline.begin_activity(track, "FORWARD")

        def backward(grad: torch.Tensor) -> None:
            _timeline.begin_activity(track, "BACKWARD")

        def forward_done(module: nn.Module, args: Any, output: Any) -> None:
            _timeline.end_activity(track, "FORWARD")
            if (
                _timeline.active is not None
                and isinstance(output, torch.Tensor)
                and (output.requires_grad)
            ):  # the gradient reaching the output starts the backward pass
                # torch leaves Tensor.register_hook unannotated
                output.register_hook(backward)  # type: ignore[no-untyped-call]

        def step(*_: Any) -> None:
            _timeline.end_activity(track, "BACKWARD")
            _timeline.begin_activity(track, "STEP")

        self._trace_hooks = [
            model.register_forward_pre_hook(forward),
            model.register_forward_hook(forward_done),
            self.register_step_pre_hook(step),
            self.register_step_post_hook(lambda *_: _timeline.end_activity(track, "STEP")),
        ]

    def remove_hooks(self) -> None:
        """Remove the hooks this wrapper registered on the model and the parameters."""
        for hook in self._hooks + self._trace_hooks:
            hook.remove()
        self._clock_hook.remove()
        self._hooks.clear()
        self._trace_hooks.clear()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.optimizer).__name__}, communication_type="
            f"{self._communication_type.value!r}, num_steps_per_communication="
            f"{self._num_steps_per_communication})"
        )
