"""Wrappers for asynchronous and directed communication: window put, push-sum."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

import fogsim as fs
from fogsim import algorithms as A

from ._agents import is_simulated
from ._base import CommunicationType
from ._wrappers import _BackwardHooked, _ForwardCounted

if TYPE_CHECKING:
    from fogsim._types import SelfWeight, Weights
    from fogsim.topology import Topology

__all__ = ["DistributedPushSumOptimizer", "DistributedWinPutOptimizer"]


class DistributedWinPutOptimizer(_ForwardCounted):
    """Put the parameters into the out-neighbors' windows, combine what arrived, adapt.

    BlueFog's window-put optimizer. Each parameter gets a window (:func:`fogsim.win_create`,
    collective, at construction). During the forward pass (distributed: a hook once the
    module has run) :func:`fogsim.win_put_nonblocking` writes ``dst_weights[j] * x_i`` into
    agent i's buffer at each out-neighbor ``j`` (default: every out-neighbor, weight 1);
    ``step()`` waits for the puts, sets ``x_i <- self_weight * x_i + sum_j src_weights[j] *
    buffer_j`` with :func:`fogsim.win_update` (default: the topology's weights; the buffers
    are not reset) and then runs the wrapped optimizer with the gradients computed at the
    old ``x_i``. The neighbors do not take part: under MPI a buffer holds whatever the
    neighbor put last, so agents run asynchronously. In simulation (lock-step by default,
    see :func:`fogsim.set_asynchrony`) with every out-neighbor written, a step equals
    adapt-with-combine: ``x <- W x - lr grad(x)``.

    With ``num_steps_per_communication = J`` the parameters are put during the J-th forward
    call of a round (training mode, gradients enabled) and combined at the next ``step()``;
    every ``step()`` runs the wrapped optimizer.

    ``communication_type``: ``neighbor_allreduce`` (put and combine; the default) or
    ``empty``. Call :meth:`free_windows` (BlueFog: ``unregister_window``) before changing
    the topology.
    """

    _allowed = (CommunicationType.neighbor_allreduce, CommunicationType.empty)

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        communication_type: CommunicationType | str | None = None,
        num_steps_per_communication: int = 1,
        *,
        window_prefix: str = "fogsim.optim.win_put",
        require_mutex: bool = False,
        overlap: bool | None = None,
    ) -> None:
        super().__init__(
            optimizer, model, communication_type, num_steps_per_communication, overlap=overlap
        )
        if not isinstance(window_prefix, str) or not window_prefix:
            raise TypeError(f"window_prefix must be a non-empty str, got {window_prefix!r}")
        self.require_mutex = require_mutex
        self._windows: dict[torch.Tensor, str] = {}
        try:
            for p in self._params():
                name = f"{window_prefix}.{self._names[p]}"
                fs.win_create(p.detach(), name)
                self._windows[p] = name
        except BaseException:
            self.free_windows()
            raise

    def _start_params(self, params: list[torch.Tensor]) -> None:
        if not self._windows:
            raise ValueError(f"{type(self).__name__}: the windows were freed")
        if self._pending_flops:  # charged before the step's communication
            self._charge_compute()
        for p in params:
            handle = fs.win_put_nonblocking(
                p.detach(),
                self._windows[p],
                dst_weights=self.dst_weights,
                require_mutex=self.require_mutex,
            )
            self._handles.append(([p], handle))

    def _complete(self, communicating: bool) -> None:
        self._finish(lambda p, done: None)
        if communicating:
            with torch.no_grad():
                for p, name in self._windows.items():
                    out = fs.win_update(
                        name, self.self_weight, self.src_weights, require_mutex=self.require_mutex
                    )
                    if out.data_ptr() != p.data_ptr():
                        p.copy_(out)

    def free_windows(self) -> None:
        """Free this optimizer's windows (collective) and remove its hooks."""
        for name in self._windows.values():
            fs.win_free(name)
        self._windows.clear()
        self.remove_hooks()

    def unregister_window(self) -> None:
        """BlueFog's name for :meth:`free_windows`."""
        self.free_windows()


class DistributedPushSumOptimizer(_BackwardHooked):
    """Stochastic gradient push: push-sum mixing for directed (column-stochastic) graphs.

    Every agent holds a numerator ``x_i`` and a weight ``w_i`` (1 at the start); its model
    parameters are ``z_i = x_i / w_i``. A step computes the wrapped optimizer's update
    ``u_i`` at ``z_i`` and mixes with a column-stochastic ``P``:
    ``x <- P (x + u)``, ``w <- P w``, ``z = x / w`` (Assran et al., 2019). ``P`` defaults to
    :func:`fogsim.algorithms.push_weights` of the current topology (each agent keeps and
    sends equal shares); set ``src_weights`` to a column-stochastic matrix per step (e.g.
    a push schedule) or give ``self_weight``, ``src_weights``, ``dst_weights`` in
    BlueFog's push form. The parameters are the de-biased ``z``; ``w`` is kept by the
    wrapper (``push_sum_weight``).

    ``communication_type``: ``neighbor_allreduce`` (default), ``allreduce`` or ``empty``.
    """

    _allowed = (
        CommunicationType.neighbor_allreduce,
        CommunicationType.allreduce,
        CommunicationType.empty,
    )

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: nn.Module,
        communication_type: CommunicationType | str | None = None,
        num_steps_per_communication: int = 1,
        *,
        overlap: bool | None = None,
    ) -> None:
        super().__init__(
            optimizer, model, communication_type, num_steps_per_communication, overlap=overlap
        )
        first = next(iter(self._params()))
        shape = (len(fs.rank()), 1) if is_simulated() else (1,)
        self._w = torch.ones(shape, dtype=first.dtype)
        self._half: dict[torch.Tensor, torch.Tensor] = {}
        self._push_matrix: tuple[Topology | None, Topology | None] = (None, None)

    @property
    def push_sum_weight(self) -> torch.Tensor:
        """The push-sum weight ``w`` (stacked ``(rows, 1)`` in simulation, the rows being
        every agent or a sharded process's block; else ``(1,)``)."""
        return self._w

    def _weights(self) -> tuple[SelfWeight, Weights, Weights]:
        if self.self_weight is None and self.src_weights is None and self.dst_weights is None:
            topology = fs.load_topology()
            if self._push_matrix[0] is not topology:
                self._push_matrix = (topology, A.push_weights(topology))
            return None, self._push_matrix[1], None
        return super()._weights()

    def _scale(self, p: torch.Tensor) -> torch.Tensor:
        """Return ``w`` shaped to multiply ``p`` agent by agent."""
        if is_simulated():
            return self._w.reshape(self._w.shape[0], *([1] * (p.dim() - 1)))
        return self._w.reshape(())

    def _on_ready(self, params: list[torch.Tensor]) -> None:
        communicating = self._communicating()
        pairs = []
        if communicating and not self._started(self._w):
            pairs.append((self._w, self._w))
        before = {p: p.detach().clone() for p in params}
        self._local_step(params)
        with torch.no_grad():
            for p in params:
                z = before[p]
                half = z * self._scale(p) + (p.detach() - z)  # x + u
                if communicating:
                    pairs.append((p, half))
                else:
                    self._half[p] = half
        self._start_all(pairs)

    def _complete(self) -> None:
        results, self._half = self._half, {}
        self._finish(results.__setitem__)
        with torch.no_grad():
            if self._w in results:
                self._w = results.pop(self._w).clone()
            for p, x in results.items():
                p.copy_(x / self._scale(p))
