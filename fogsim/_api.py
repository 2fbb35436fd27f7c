"""The public functions; each dispatches to the backend of the current context.

Every function here has the same signature on every backend. In simulation, agent-local
values are stacked along a leading axis of length ``size()`` and per-agent arguments are
stacked too (arrays of n, sequences of n dicts, or one n x n matrix for the step).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import _context
from ._context import Context
from ._handles import Handle
from .topology import Topology

__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "size",
    "rank",
    "local_size",
    "local_rank",
    "local",
    "vmap",
    "is_main_process",
    "global_view",
    "set_topology",
    "load_topology",
    "is_topology_weighted",
    "in_neighbor_ranks",
    "out_neighbor_ranks",
    "allreduce",
    "allreduce_nonblocking",
    "allgather",
    "allgather_nonblocking",
    "broadcast",
    "broadcast_nonblocking",
    "neighbor_allreduce",
    "neighbor_allreduce_nonblocking",
    "neighbor_allgather",
    "neighbor_allgather_nonblocking",
    "barrier",
    "barrier_nonblocking",
    "wait",
    "poll",
]


def _backend():
    return _context.current().backend


# -- world --------------------------------------------------------------------------------
def init(
    backend: str | None = None,
    size: int | None = None,
    topology: Any = None,
    seed: int | None = None,
) -> Context:
    """Start fogsim and return the new current :class:`Context`.

    ``backend`` is ``"sim"`` (n agents stacked in this process), ``"mpi"`` or ``"torch"``;
    by default ``"mpi"`` when an MPI launcher started more than one process, else
    ``"sim"`` (``FOGSIM_BACKEND`` overrides). ``size`` sets the number of simulated agents
    (default ``FOGSIM_SIZE``, else 16). ``topology`` is anything :func:`set_topology`
    takes, or a builder called with the size; default: the exponential-2 graph.
    Calling ``init`` again replaces the current context (the old one is shut down).
    """
    old = _context.peek()
    ctx = Context(backend=backend, size=size, topology=topology, seed=seed)
    if old is not None and old is not ctx:
        old.close()
    _context.set_current(ctx)
    return ctx


def shutdown() -> None:
    """Shut the current context down; ``init()`` may be called again afterwards."""
    ctx = _context.peek()
    if ctx is not None:
        ctx.close()
    _context.set_current(None)


def is_initialized() -> bool:
    """Return whether a context is current (``init()`` ran and ``shutdown()`` did not)."""
    return _context.peek() is not None


def size() -> int:
    """Return the number of agents."""
    return _backend().size()


def rank() -> Any:
    """Return this agent's rank; in simulation the stacked ranks ``arange(size())``."""
    return _backend().rank()


def local_size() -> int:
    """Return the number of agents on this machine."""
    return _backend().local_size()


def local_rank() -> Any:
    """Return the rank within this machine (stacked in simulation)."""
    return _backend().local_rank()


def local(fn: Callable[[int], Any]) -> Any:
    """Return the agent-local value ``fn(rank)``.

    In simulation ``fn(r)`` is called for every agent and the results are stacked: arrays
    and numbers of one shape into one array (tensors into one tensor) with a leading agent
    axis, anything else (dicts, ragged arrays) into a list of n. Distributed, it is
    ``fn(rank())``. Per-agent data and weights are thus written once, e.g.
    ``src_weights=fs.local(lambda r: {(r - 1) % n: 0.5})``.
    """
    return _backend().local(fn)


def vmap(fn: Callable[..., Any], in_axes: int | None | Sequence[int | None] = 0):
    """Return ``fn`` applied agent by agent.

    In simulation the returned function splits each argument with ``in_axes`` 0 along the
    agent axis (``None``: passed whole to every agent), calls ``fn`` once per agent and
    stacks the results as :func:`local` does. Distributed, it returns ``fn`` itself. Code
    written with batch-friendly operations (``A @ x``, reductions over trailing axes)
    needs no ``vmap``.
    """
    return _backend().vmap(fn, in_axes)


def is_main_process() -> bool:
    """Return whether this process should print and write files for the job.

    True in simulation (one process holds every agent); rank 0 when distributed.
    """
    return _backend().is_main_process()


def global_view(x: Any) -> Any:
    """Return every agent's ``x`` stacked along a new leading axis, the same on every agent.

    In simulation that is ``x`` itself (copied); distributed, ``allgather(x[None])``. Use it
    for metrics, plots and files that need all agents' values at once.
    """
    return _backend().global_view(x)


# -- topology -----------------------------------------------------------------------------
def set_topology(topology: Any, is_weighted: bool = False) -> None:
    """Use ``topology`` for the neighbor ops from now on.

    ``topology`` is a :class:`fogsim.topology.Topology`, a networkx graph (edge j -> i
    carrying ``weight`` W[i, j]), a dense or scipy.sparse ``n x n`` matrix (``W[i, j]`` is
    the weight agent i applies to agent j's value), or a builder called with the size.
    With ``is_weighted=False`` only its edges count and every agent averages uniformly,
    ``1/(in-degree + 1)``; with ``True`` its weights are used as given.
    """
    _backend().set_topology(topology, is_weighted)


def load_topology() -> Topology:
    """Return the topology in use."""
    return _backend().load_topology()


def is_topology_weighted() -> bool:
    """Return whether the neighbor ops use the topology's own weights."""
    return _backend().is_topology_weighted()


def in_neighbor_ranks() -> Any:
    """Return the ranks this agent receives from (a list per agent in simulation)."""
    return _backend().in_neighbor_ranks()


def out_neighbor_ranks() -> Any:
    """Return the ranks this agent sends to (a list per agent in simulation)."""
    return _backend().out_neighbor_ranks()


# -- collective ops -----------------------------------------------------------------------
def allreduce(x: Any, average: bool = True, name: str | None = None) -> Any:
    """Return the average (or with ``average=False`` the sum) of ``x`` over all agents.

    ``x_i <- (1/n) sum_j x_j``. Averaging needs float32/float64; sums take integers too.
    """
    return _backend().allreduce(x, average, name)


def allgather(x: Any, name: str | None = None) -> Any:
    """Return every agent's ``x`` concatenated along the first dimension in rank order.

    The first dimension may differ between agents (in simulation pass a list of n arrays).
    """
    return _backend().allgather(x, name)


def broadcast(x: Any, root_rank: int, name: str | None = None) -> Any:
    """Return agent ``root_rank``'s ``x`` on every agent."""
    return _backend().broadcast(x, root_rank, name)


def neighbor_allreduce(
    x: Any,
    self_weight: Any = None,
    src_weights: Any = None,
    dst_weights: Any = None,
    enable_topo_check: bool = True,
    name: str | None = None,
) -> Any:
    """Return the weighted average of own and in-neighbors' values.

    ``x_i <- self_weight_i x_i + sum_j src_weights_i[j] dst_weights_j[i] x_j``

    * No weights: the topology's weights if it was set with ``is_weighted=True``, else
      ``1/(in-degree + 1)`` for self and for each in-neighbor.
    * ``self_weight`` and ``src_weights`` (a dict ``{rank: weight}`` per agent): the
      senders are the topology's; the keys must be in-neighbors.
    * ``dst_weights`` given (dict ``{rank: weight}``, or a list of ranks meaning 1.0 each):
      dynamic mode for this call; ``self_weight`` and ``src_weights`` are required, and
      every agent j sending to i must be listed by i. ``enable_topo_check`` verifies that
      before any data moves (distributed backends; the simulator always checks).
    * ``src_weights`` may also be one ``n x n`` matrix (or Topology) for the whole step:
      ``x <- W x``, self weights from its diagonal unless ``self_weight`` is given.

    In simulation per-agent arguments are stacked: ``self_weight`` a number or an array
    of n, ``src_weights``/``dst_weights`` sequences of n dicts (see :func:`local`).
    """
    return _backend().neighbor_allreduce(
        x, self_weight, src_weights, dst_weights, enable_topo_check, name
    )


def neighbor_allgather(
    x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
) -> Any:
    """Return the in-neighbors' ``x`` concatenated along the first dimension, by rank.

    With ``src_ranks`` and ``dst_ranks`` (both, per agent) the call uses those neighbors
    instead of the topology's. In simulation the result is one array when every agent has
    the same number of in-neighbors, else a list of n arrays.
    """
    return _backend().neighbor_allgather(x, src_ranks, dst_ranks, name)


def barrier() -> None:
    """Block until every agent has reached the barrier."""
    _backend().barrier()


# -- nonblocking twins --------------------------------------------------------------------
def allreduce_nonblocking(x: Any, average: bool = True, name: str | None = None) -> Handle:
    """Start :func:`allreduce` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().allreduce_nonblocking(x, average, name)


def allgather_nonblocking(x: Any, name: str | None = None) -> Handle:
    """Start :func:`allgather` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().allgather_nonblocking(x, name)


def broadcast_nonblocking(x: Any, root_rank: int, name: str | None = None) -> Handle:
    """Start :func:`broadcast` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().broadcast_nonblocking(x, root_rank, name)


def neighbor_allreduce_nonblocking(
    x: Any,
    self_weight: Any = None,
    src_weights: Any = None,
    dst_weights: Any = None,
    enable_topo_check: bool = True,
    name: str | None = None,
) -> Handle:
    """Start :func:`neighbor_allreduce` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().neighbor_allreduce_nonblocking(
        x, self_weight, src_weights, dst_weights, enable_topo_check, name
    )


def neighbor_allgather_nonblocking(
    x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
) -> Handle:
    """Start :func:`neighbor_allgather` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().neighbor_allgather_nonblocking(x, src_ranks, dst_ranks, name)


def barrier_nonblocking() -> Handle:
    """Start :func:`barrier` and return a handle for :func:`wait` / :func:`poll`."""
    return _backend().barrier_nonblocking()


def wait(handle: Handle) -> Any:
    """Block until the operation behind ``handle`` finishes; return its result."""
    if not isinstance(handle, Handle):
        raise TypeError(
            f"wait() takes a handle from a *_nonblocking op, got {type(handle).__name__}"
        )
    return handle.wait()


def poll(handle: Handle) -> bool:
    """Return whether :func:`wait` on ``handle`` would return without blocking."""
    if not isinstance(handle, Handle):
        raise TypeError(
            f"poll() takes a handle from a *_nonblocking op, got {type(handle).__name__}"
        )
    return handle.poll()
