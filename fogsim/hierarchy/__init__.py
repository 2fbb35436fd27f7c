"""The machine hierarchy: what communication costs on a cluster of machines.

* :mod:`fogsim.hierarchy.cost`: the alpha-beta models of the BlueConnect paper (ring,
  halving/doubling, one-level, two-level and decomposed all-reduce on fat trees and tori)
  and of neighbor exchanges over a topology; :func:`attach_cost_model` makes a simulated
  run report its modelled communication time per op and per iteration.
* The machine-level ops themselves are fogsim's public functions:
  :func:`fogsim.hierarchical_neighbor_allreduce`, ``fogsim.allreduce(...,
  is_hierarchical_local=True)`` and ``fogsim.allreduce(..., algorithm="decomposed")``.
"""

from ._scaling import plot_allreduce_scaling, scaling_table
from .cost import (
    INFINIBAND_100G,
    NVLINK,
    CostMeter,
    CostModel,
    Level,
    Network,
    allreduce_time,
    attach_cost_model,
    best_time,
    broadcast_time,
    decomposed_allreduce_time,
    detach_cost_model,
    halving_doubling_time,
    hierarchical_neighbor_allreduce_time,
    neighbor_allreduce_time,
    one_level_allreduce_time,
    reduce_time,
    ring_time,
    schedule_time,
    two_level_allreduce_time,
)

__all__ = [
    "INFINIBAND_100G",
    "NVLINK",
    "CostMeter",
    "CostModel",
    "Level",
    "Network",
    "allreduce_time",
    "attach_cost_model",
    "best_time",
    "broadcast_time",
    "decomposed_allreduce_time",
    "detach_cost_model",
    "halving_doubling_time",
    "hierarchical_neighbor_allreduce_time",
    "neighbor_allreduce_time",
    "one_level_allreduce_time",
    "plot_allreduce_scaling",
    "reduce_time",
    "ring_time",
    "scaling_table",
    "schedule_time",
    "two_level_allreduce_time",
]
