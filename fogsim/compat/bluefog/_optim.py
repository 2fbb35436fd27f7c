"""BlueFog's optimizer factories, with BlueFog's signatures, on :mod:`fogsim.optim`.

Imported on first use (they need torch). BlueFog's older names map to the wrapper and
communication type its own source says they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import optim as _optim
from ...optim import CommunicationType

if TYPE_CHECKING:
    import torch
    from torch import nn

    import fogsim.optim  # the wrappers' public names, for the results' annotations

__all__ = [
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedAllreduceOptimizer",
    "DistributedGradientAllreduceOptimizer",
    "DistributedHierarchicalNeighborAllreduceOptimizer",
    "DistributedNeighborAllreduceOptimizer",
    "DistributedPullGetOptimizer",
    "DistributedPushSumOptimizer",
    "DistributedWinPutOptimizer",
]


def DistributedAdaptThenCombineOptimizer(
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    communication_type: CommunicationType | str | None = CommunicationType.neighbor_allreduce,
    num_steps_per_communication: int = 1,
) -> fogsim.optim.DistributedAdaptThenCombineOptimizer:
    """Adapt then combine: :class:`fogsim.optim.DistributedAdaptThenCombineOptimizer`."""
    return _optim.DistributedAdaptThenCombineOptimizer(
        optimizer, model, communication_type, num_steps_per_communication
    )


def DistributedAdaptWithCombineOptimizer(
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    communication_type: CommunicationType | str | None = CommunicationType.neighbor_allreduce,
    num_steps_per_communication: int = 1,
) -> fogsim.optim.DistributedAdaptWithCombineOptimizer:
    """Adapt with combine: :class:`fogsim.optim.DistributedAdaptWithCombineOptimizer`."""
    return _optim.DistributedAdaptWithCombineOptimizer(
        optimizer, model, communication_type, num_steps_per_communication
    )


def DistributedAllreduceOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedAdaptWithCombineOptimizer:
    """BlueFog's older name: adapt with combine over ``allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer, model, CommunicationType.allreduce, num_steps_per_communication
    )


def DistributedNeighborAllreduceOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedAdaptWithCombineOptimizer:
    """BlueFog's older name: adapt with combine over ``neighbor_allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer, model, CommunicationType.neighbor_allreduce, num_steps_per_communication
    )


def DistributedHierarchicalNeighborAllreduceOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedAdaptWithCombineOptimizer:
    """BlueFog's older name: adapt with combine over ``hierarchical_neighbor_allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer,
        model,
        CommunicationType.hierarchical_neighbor_allreduce,
        num_steps_per_communication,
    )


def DistributedGradientAllreduceOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedGradientAllreduceOptimizer:
    """Average the gradients over all agents (Horovod style): fogsim.optim's wrapper."""
    return _optim.DistributedGradientAllreduceOptimizer(
        optimizer, model, None, num_steps_per_communication
    )


def DistributedPushSumOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedPushSumOptimizer:
    """Push-sum over window accumulates: :class:`fogsim.optim.DistributedPushSumOptimizer`."""
    return _optim.DistributedPushSumOptimizer(optimizer, model, None, num_steps_per_communication)


def DistributedWinPutOptimizer(
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    num_steps_per_communication: int = 1,
    window_prefix: str | None = None,
) -> fogsim.optim.DistributedWinPutOptimizer:
    """Average over ``win_put`` windows: :class:`fogsim.optim.DistributedWinPutOptimizer`."""
    if window_prefix is None:
        return _optim.DistributedWinPutOptimizer(
            optimizer, model, None, num_steps_per_communication
        )
    return _optim.DistributedWinPutOptimizer(
        optimizer, model, None, num_steps_per_communication, window_prefix=window_prefix
    )


def DistributedPullGetOptimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, num_steps_per_communication: int = 1
) -> fogsim.optim.DistributedWinPutOptimizer:
    """BlueFog pulls the neighbors' parameters with ``win_get``; fogsim has no pull-get
    wrapper and uses :func:`DistributedWinPutOptimizer` (the same neighbor average, the
    values pushed by their owners instead of fetched)."""
    return DistributedWinPutOptimizer(optimizer, model, num_steps_per_communication)
