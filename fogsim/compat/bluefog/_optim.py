"""BlueFog's optimizer factories, with BlueFog's signatures, on :mod:`fogsim.optim`.

Imported on first use (they need torch). BlueFog's older names map to the wrapper and
communication type its own source says they are.
"""

from __future__ import annotations

from typing import Any

from ... import optim as _optim
from ...optim import CommunicationType

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
    optimizer: Any,
    model: Any,
    communication_type: Any = CommunicationType.neighbor_allreduce,
    num_steps_per_communication: int = 1,
) -> Any:
    """Adapt then combine: :class:`fogsim.optim.DistributedAdaptThenCombineOptimizer`."""
    return _optim.DistributedAdaptThenCombineOptimizer(
        optimizer, model, communication_type, num_steps_per_communication
    )


def DistributedAdaptWithCombineOptimizer(
    optimizer: Any,
    model: Any,
    communication_type: Any = CommunicationType.neighbor_allreduce,
    num_steps_per_communication: int = 1,
) -> Any:
    """Adapt with combine: :class:`fogsim.optim.DistributedAdaptWithCombineOptimizer`."""
    return _optim.DistributedAdaptWithCombineOptimizer(
        optimizer, model, communication_type, num_steps_per_communication
    )


def DistributedAllreduceOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """BlueFog's older name: adapt with combine over ``allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer, model, CommunicationType.allreduce, num_steps_per_communication
    )


def DistributedNeighborAllreduceOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """BlueFog's older name: adapt with combine over ``neighbor_allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer, model, CommunicationType.neighbor_allreduce, num_steps_per_communication
    )


def DistributedHierarchicalNeighborAllreduceOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """BlueFog's older name: adapt with combine over ``hierarchical_neighbor_allreduce``."""
    return DistributedAdaptWithCombineOptimizer(
        optimizer,
        model,
        CommunicationType.hierarchical_neighbor_allreduce,
        num_steps_per_communication,
    )


def DistributedGradientAllreduceOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """Average the gradients over all agents (Horovod style): fogsim.optim's wrapper."""
    return _optim.DistributedGradientAllreduceOptimizer(
        optimizer, model, None, num_steps_per_communication
    )


def DistributedPushSumOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """Push-sum over window accumulates: :class:`fogsim.optim.DistributedPushSumOptimizer`."""
    return _optim.DistributedPushSumOptimizer(optimizer, model, None, num_steps_per_communication)


def DistributedWinPutOptimizer(
    optimizer: Any,
    model: Any,
    num_steps_per_communication: int = 1,
    window_prefix: str | None = None,
) -> Any:
    """Average over ``win_put`` windows: :class:`fogsim.optim.DistributedWinPutOptimizer`."""
    if window_prefix is None:
        return _optim.DistributedWinPutOptimizer(
            optimizer, model, None, num_steps_per_communication
        )
    return _optim.DistributedWinPutOptimizer(
        optimizer, model, None, num_steps_per_communication, window_prefix=window_prefix
    )


def DistributedPullGetOptimizer(
    optimizer: Any, model: Any, num_steps_per_communication: int = 1
) -> Any:
    """BlueFog pulls the neighbors' parameters with ``win_get``; fogsim has no pull-get
    wrapper and uses :func:`DistributedWinPutOptimizer` (the same neighbor average, the
    values pushed by their owners instead of fetched)."""
    return DistributedWinPutOptimizer(optimizer, model, num_steps_per_communication)
