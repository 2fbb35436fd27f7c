"""BlueFog's API on fogsim: change ``import bluefog.torch as bf`` to

    import fogsim.compat.bluefog as bf
    from fogsim.compat.bluefog import topology_util   # was: from bluefog.common import ...

and a BlueFog script runs on fogsim: ``bf.init``, ``bf.size``/``bf.rank``, the topology
functions (``bf.set_topology`` takes and ``bf.load_topology`` returns a ``networkx.DiGraph``),
``bf.neighbor_allreduce(tensor, self_weight, src_weights, dst_weights)`` and the other
collectives with their ``*_nonblocking`` twins and ``bf.synchronize``. The graph builders are
in :mod:`~fogsim.compat.bluefog.topology_util` and, as in the BlueFog paper's listings, also
here (``bf.ExponentialTwoGraph(bf.size())``).

These are per-agent (SPMD) functions: every process is one agent with an integer
``bf.rank()``. Run such scripts with ``fogrun`` (one MPI process per agent); running them
in one process, one thread per agent, is planned (fogsim's SPMD mode). Under the
simulator backend (one process holding all agents) the functions work too, but on stacked
values, as fogsim's own functions do: ``bf.rank()`` is ``arange(n)``, tensors carry a
leading agent axis, and per-agent weights are sequences of n dicts.

Not provided: windows (``win_*``), optimizers, ``hierarchical_neighbor_allreduce``, timeline
and machine-topology functions.
"""

from . import topology_util
from ._api import (
    allgather,
    allgather_nonblocking,
    allreduce,
    allreduce_,
    allreduce_nonblocking,
    allreduce_nonblocking_,
    barrier,
    broadcast,
    broadcast_,
    broadcast_nonblocking,
    broadcast_nonblocking_,
    in_neighbor_ranks,
    init,
    is_topo_weighted,
    load_topology,
    local_rank,
    local_size,
    neighbor_allgather,
    neighbor_allgather_nonblocking,
    neighbor_allreduce,
    neighbor_allreduce_nonblocking,
    out_neighbor_ranks,
    poll,
    rank,
    set_topology,
    shutdown,
    size,
    synchronize,
    wait,
)
from .topology_util import (
    ExponentialGraph,
    ExponentialTwoGraph,
    FullyConnectedGraph,
    MeshGrid2DGraph,
    RingGraph,
    StarGraph,
    SymmetricExponentialGraph,
)

__all__ = [
    "ExponentialGraph",
    "ExponentialTwoGraph",
    "FullyConnectedGraph",
    "MeshGrid2DGraph",
    "RingGraph",
    "StarGraph",
    "SymmetricExponentialGraph",
    "allgather",
    "allgather_nonblocking",
    "allreduce",
    "allreduce_",
    "allreduce_nonblocking",
    "allreduce_nonblocking_",
    "barrier",
    "broadcast",
    "broadcast_",
    "broadcast_nonblocking",
    "broadcast_nonblocking_",
    "in_neighbor_ranks",
    "init",
    "is_topo_weighted",
    "load_topology",
    "local_rank",
    "local_size",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "out_neighbor_ranks",
    "poll",
    "rank",
    "set_topology",
    "shutdown",
    "size",
    "synchronize",
    "topology_util",
    "wait",
]
