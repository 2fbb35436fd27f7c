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

The window ops (``bf.win_create``, ``bf.win_put``, ``bf.win_accumulate``, ``bf.win_get``,
``bf.win_update``, ``bf.win_update_then_collect``, ``bf.win_mutex``, ``bf.get_win_version``,
``bf.turn_on_win_ops_with_associated_p`` ...) are fogsim's window ops under BlueFog's names.

The machine level is there too: ``bf.machine_size``, ``bf.machine_rank``,
``bf.set_machine_topology``, ``bf.load_machine_topology``, ``bf.in_neighbor_machine_ranks``,
``bf.hierarchical_neighbor_allreduce`` and ``bf.allreduce(..., is_hierarchical_local=True)``.

Not provided: BlueFog's optimizers (use :mod:`fogsim.optim`) and its timeline.
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
    get_current_created_window_names,
    get_win_version,
    hierarchical_neighbor_allreduce,
    hierarchical_neighbor_allreduce_nonblocking,
    in_neighbor_machine_ranks,
    in_neighbor_ranks,
    init,
    is_machine_topo_weighted,
    is_topo_weighted,
    load_machine_topology,
    load_topology,
    local_rank,
    local_size,
    machine_rank,
    machine_size,
    neighbor_allgather,
    neighbor_allgather_nonblocking,
    neighbor_allreduce,
    neighbor_allreduce_nonblocking,
    out_neighbor_machine_ranks,
    out_neighbor_ranks,
    poll,
    rank,
    set_machine_topology,
    set_topology,
    shutdown,
    size,
    synchronize,
    turn_off_win_ops_with_associated_p,
    turn_on_win_ops_with_associated_p,
    wait,
    win_accumulate,
    win_accumulate_nonblocking,
    win_associated_p,
    win_create,
    win_free,
    win_get,
    win_get_nonblocking,
    win_mutex,
    win_poll,
    win_put,
    win_put_nonblocking,
    win_update,
    win_update_then_collect,
    win_wait,
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
    "get_current_created_window_names",
    "get_win_version",
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
    "in_neighbor_machine_ranks",
    "in_neighbor_ranks",
    "init",
    "is_machine_topo_weighted",
    "is_topo_weighted",
    "load_machine_topology",
    "load_topology",
    "local_rank",
    "local_size",
    "machine_rank",
    "machine_size",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "out_neighbor_machine_ranks",
    "out_neighbor_ranks",
    "poll",
    "rank",
    "set_machine_topology",
    "set_topology",
    "shutdown",
    "size",
    "synchronize",
    "topology_util",
    "turn_off_win_ops_with_associated_p",
    "turn_on_win_ops_with_associated_p",
    "wait",
    "win_accumulate",
    "win_accumulate_nonblocking",
    "win_associated_p",
    "win_create",
    "win_free",
    "win_get",
    "win_get_nonblocking",
    "win_mutex",
    "win_poll",
    "win_put",
    "win_put_nonblocking",
    "win_update",
    "win_update_then_collect",
    "win_wait",
]
