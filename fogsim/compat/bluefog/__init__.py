"""BlueFog's API on fogsim. Existing BlueFog code runs unchanged with

    fogrun --bluefog -np 4 python script.py      # or --spmd, or:
    python -m fogsim.compat.bluefog script.py    # (under mpiexec: python -m mpi4py -m ...)

which make ``import bluefog.torch as bf`` and ``from bluefog.common import topology_util``
import this module (:func:`install` registers the aliases; it never shadows a real BlueFog
unless ``install(force=True)``). Or change the import line to

    import fogsim.compat.bluefog.torch as bf     # the same as fogsim.compat.bluefog
    from fogsim.compat.bluefog import topology_util   # was: from bluefog.common import ...

and a BlueFog script runs on fogsim: ``bf.init``, ``bf.size``/``bf.rank``, the topology
functions (``bf.set_topology`` takes and ``bf.load_topology`` returns a ``networkx.DiGraph``),
``bf.neighbor_allreduce(tensor, self_weight, src_weights, dst_weights)`` and the other
collectives with their ``*_nonblocking`` twins and ``bf.synchronize``. The graph builders are
in :mod:`~fogsim.compat.bluefog.topology_util` and, as in the BlueFog paper's listings, also
here (``bf.ExponentialTwoGraph(bf.size())``).

These are per-agent (SPMD) functions: every agent has an integer ``bf.rank()``. Run such
scripts with ``fogrun -np N python script.py`` (one MPI process per agent) or in one
process, one thread per agent, with :func:`fogsim.spmd.run_path` (``fogrun --spmd``).
Under the simulator backend (one process holding all agents) the functions work too, but
on stacked values, as fogsim's own functions do: ``bf.rank()`` is ``arange(n)``, tensors
carry a leading agent axis, and per-agent weights are sequences of n dicts.

The window ops (``bf.win_create``, ``bf.win_put``, ``bf.win_accumulate``, ``bf.win_get``,
``bf.win_update``, ``bf.win_update_then_collect``, ``bf.win_mutex``, ``bf.get_win_version``,
``bf.turn_on_win_ops_with_associated_p`` ...) are fogsim's window ops under BlueFog's names;
a tensor registered with ``bf.win_create`` is updated in place. ``bf.win_sync`` and
``bf.win_sync_then_collect`` are BlueFog's earlier names of ``win_update`` and
``win_update_then_collect``.

The machine level is there too: ``bf.machine_size``, ``bf.machine_rank``,
``bf.set_machine_topology``, ``bf.load_machine_topology``, ``bf.in_neighbor_machine_ranks``,
``bf.hierarchical_neighbor_allreduce`` and ``bf.allreduce(..., is_hierarchical_local=True)``.

BlueFog's earlier keywords of ``neighbor_allreduce`` (``neighbor_weights`` for
``src_weights``, ``send_neighbors`` for ``dst_weights``) are accepted with a
``DeprecationWarning``. The optimizer wrappers are :mod:`fogsim.optim`'s, under the same
names (``bf.DistributedAdaptThenCombineOptimizer``, ``bf.CommunicationType`` ...), imported
on first use because they need torch; their ``self_weights`` is BlueFog's spelling of
``self_weight``. BlueFog's timeline calls are :mod:`fogsim.timeline`'s;
``nccl_built``, ``is_homogeneous``, ``suspend``/``resume``, the negotiate-stage flag and
``win_lock`` are in ``_extra`` (fogsim's fixed answers or mappings, see each).
BlueFog's environment variables (``BLUEFOG_TIMELINE``, ``BLUEFOG_FUSION_THRESHOLD`` ...),
read by ``bf.init``, and what each does in fogsim are listed in ``_environ``. Where
BlueFog raises (a tensor type it lacks, integer averages, weights of a wrong form, an
unknown window, a name still in flight), this layer raises what BlueFog's callers expect,
on every rank before any communication; ``_errors`` has the table.
"""

import typing as _typing  # private: dir() lists BlueFog's names and these modules only

from ...run._bluefog import install as install  # fogsim's, not BlueFog's
from ...run._bluefog import uninstall as uninstall
from . import _extra, topology_util
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
    wait,
)
from ._extra import *  # noqa: F403 - basics, timeline, win_lock: _extra.__all__
from ._windows import (
    get_current_created_window_names,
    get_win_version,
    turn_off_win_ops_with_associated_p,
    turn_on_win_ops_with_associated_p,
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
    win_sync,
    win_sync_then_collect,
    win_update,
    win_update_then_collect,
    win_wait,
)
from .topology_util import (  # bluefog.torch exports these of topology_util too
    ExponentialGraph,
    ExponentialTwoGraph,
    FullyConnectedGraph,
    InferDestinationFromSourceRanks,
    InferSourceFromDestinationRanks,
    IsTopologyEquivalent,
    MeshGrid2DGraph,
    RingGraph,
    StarGraph,
    SymmetricExponentialGraph,
)

#: fogsim.optim's names that ``bluefog.torch`` exports too, imported on first use: they need
#: torch, and ``import fogsim.compat.bluefog`` imports neither torch nor mpi4py.
_OPTIM = (
    "CommunicationType",
    "broadcast_optimizer_state",
    "broadcast_parameters",
)
#: BlueFog's optimizer factories with BlueFog's signatures (``_optim``), also on first use.
_FACTORIES = (
    "DistributedAdaptThenCombineOptimizer",
    "DistributedAdaptWithCombineOptimizer",
    "DistributedAllreduceOptimizer",
    "DistributedGradientAllreduceOptimizer",
    "DistributedHierarchicalNeighborAllreduceOptimizer",
    "DistributedNeighborAllreduceOptimizer",
    "DistributedPullGetOptimizer",
    "DistributedPushSumOptimizer",
    "DistributedWinPutOptimizer",
)

__all__ = [
    "ExponentialGraph",
    "ExponentialTwoGraph",
    "FullyConnectedGraph",
    "InferDestinationFromSourceRanks",
    "InferSourceFromDestinationRanks",
    "IsTopologyEquivalent",
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
    "win_sync",
    "win_sync_then_collect",
    "win_wait",
]
__all__ += [name for name in _extra.__all__ if name not in __all__]  # basics, timeline ...
__all__ += _OPTIM + _FACTORIES


def __getattr__(name: str) -> _typing.Any:
    if name in _OPTIM or name in _FACTORIES:
        # torch's import happens here, on the first use
        if name in _OPTIM:
            from ... import optim

            value = getattr(optim, name)
        else:
            from . import _optim

            value = getattr(_optim, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_OPTIM) | set(_FACTORIES))
