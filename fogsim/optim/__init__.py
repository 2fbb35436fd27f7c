"""Decentralized training with torch: optimizer wrappers and the agent axis for models.

One training script runs simulated (all n agents in this process) and distributed (one
agent per process, under ``fogrun``)::

    import fogsim as fs
    from fogsim import optim as fo

    fs.init()
    model = fo.replicate(Net())                 # stacked replicas in simulation
    opt = fo.DistributedAdaptThenCombineOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                                  model)
    fo.broadcast_parameters(model.state_dict(), root_rank=0)
    for x, y in batches:                        # per-agent data, e.g. fs.local(...)
        loss = fo.per_agent(F.cross_entropy)(model(x), y)
        opt.zero_grad()
        loss.sum().backward()                   # sum over agents: each gets its own grad
        opt.step()

The wrapped optimizer must act elementwise (SGD with momentum or Nesterov, Adam, AdamW,
RMSprop, Adagrad, ...): in simulation it steps the stacked parameters of every agent at
once. Gradient clipping by norm would mix the agents; clip per agent instead.
"""

from ._agents import AgentModel, is_simulated, per_agent, replicate
from ._base import CommunicationType, DistributedOptimizer
from ._broadcast import broadcast_optimizer_state, broadcast_parameters
from ._window import DistributedPushSumOptimizer, DistributedWinPutOptimizer
from ._wrappers import (
    DistributedAdaptThenCombineOptimizer,
    DistributedAdaptWithCombineOptimizer,
    DistributedGradientAllreduceOptimizer,
)

__all__ = [
    "AgentModel",
    "CommunicationType",
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedGradientAllreduceOptimizer",
    "DistributedOptimizer",
    "DistributedPushSumOptimizer",
    "DistributedWinPutOptimizer",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "is_simulated",
    "per_agent",
    "replicate",
]
