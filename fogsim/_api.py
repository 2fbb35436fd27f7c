"""The public functions; each dispatches to the backend of the current context.

Every function here has the same signature on every backend. In simulation, agent-local
values are stacked along a leading axis of length ``size()`` and per-agent arguments are
stacked too (arrays of n, sequences of n dicts, or one n x n matrix for the step).

A value an op takes (``x``) may be a numpy array, a torch tensor, a Python number or a plain
list or tuple of numbers. A number and a list of numbers are one value, ``np.asarray(x)``,
the same on every agent, in every mode: distributed it is this agent's value; in
simulation every agent holds it. One value per agent is made with :func:`local`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import _context, _weightcheck
from . import timeline as _timeline
from ._context import Context
from ._handles import Handle
from ._routing import Runner, public_op
from ._types import (
    ArrayLike,
    CompressorLike,
    PerAgent,
    Ranks,
    SelfWeight,
    TopologyLike,
    Value,
    Weights,
)
from .backends import Backend

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
    "hierarchical_neighbor_allreduce",
    "hierarchical_neighbor_allreduce_nonblocking",
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

#: ``neighbor_allreduce(x, compressor=...)``'s implementation, set by :mod:`fogsim.compress`
#: when it is imported (it is built on this API, and every compressor comes from it).
_compressed_gossip: Callable[..., Any] | None = None


def set_compressed_gossip(fn: Callable[..., Any]) -> None:
    """Run ``neighbor_allreduce(x, compressor=...)`` with ``fn`` (`fogsim.compress`'s)."""
    global _compressed_gossip
    _compressed_gossip = fn


def _backend() -> Backend:
    return _context.current().backend


# -- world --------------------------------------------------------------------------------
def init(
    backend: str | None = None,
    size: int | None = None,
    topology: TopologyLike | None = None,
    seed: int | None = None,
    local_size: int | None = None,
    shards: int | None = None,
) -> Context:
    """Start fogsim and return the new current :class:`Context`.

    ``backend`` is ``"sim"`` (n agents stacked in this process), ``"mpi"`` or ``"torch"``;
    by default ``"torch"`` under torchrun, ``"mpi"`` when an MPI launcher started more than
    one process, else ``"sim"`` (``FOGSIM_BACKEND`` overrides). ``size`` sets the number
    of simulated agents (default ``FOGSIM_SIZE``, else 16); under a launcher (``fogrun -np
    N``, torchrun, ``fogrun --spmd``) the launcher's count wins: a different ``size`` is
    ignored with a one-line notice from rank 0, so ``init(size=8)`` simulates 8 agents and
    runs unchanged as N processes. ``topology`` is anything
    :func:`set_topology` takes, or a builder called with the size; default: the
    exponential-2 graph. ``local_size`` groups the agents into machines of that many
    consecutive ranks (simulation, or emulated machines on one host; default
    ``FOGSIM_LOCAL_SIZE``, else: simulated, one machine; distributed, the real hosts).
    ``shards`` splits a simulation (``backend="sim"``) over that many launched processes,
    each holding a contiguous block of the ``size`` agents (``rank()`` is the block's
    ranks; see the user guide, docs/guide/running.md); by default ``FOGSIM_SHARDS``, else the
    number of processes a launcher started, so ``init(backend="sim", size=N)`` under
    ``mpiexec -n P`` or ``fogrun --sim --shards P -np N`` is sharded over P processes.
    Calling ``init`` again replaces the current context (the old one is shut down).
    """
    agent = _context.spmd_agent()
    if agent is not None:  # fogsim.spmd: an agent thread (re)starts its own view of the run
        return agent.init(backend, size, topology, seed, local_size)
    old = _context.peek()
    ctx = Context(
        backend=backend,
        size=size,
        topology=topology,
        seed=seed,
        local_size=local_size,
        shards="auto" if shards is None else shards,
    )
    if old is not None and old is not ctx:
        _timeline.stop()
        old.close()
    _context.set_current(ctx)
    if ctx.settings.timeline:  # FOGSIM_TIMELINE / fogrun --timeline-filename
        _timeline.start(ctx.settings.timeline)
    return ctx


def shutdown() -> None:
    """Shut the current context down; ``init()`` may be called again afterwards."""
    agent = _context.spmd_agent()
    if agent is not None:  # fogsim.spmd: an agent thread closes its own view only
        return agent.shutdown()
    _timeline.stop()
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


def rank() -> PerAgent:
    """Return this agent's rank; in simulation the stacked ranks ``arange(size())``."""
    return _backend().rank()


def local_size() -> int:
    """Return the number of agents on this machine."""
    return _backend().local_size()


def local_rank() -> PerAgent:
    """Return the rank within this machine (stacked in simulation)."""
    return _backend().local_rank()


def local(fn: Callable[[int], Any], *, jit: bool = False) -> Any:
    """Return the agent-local value ``fn(rank)``.

    In simulation ``fn(r)`` is called for every agent and the results are stacked: arrays
    and numbers of one shape into one array (tensors into one tensor) with a leading agent
    axis, a tuple of those into a tuple of stacked values (``A, b = fs.local(data)`` reads
    as it does for one agent), anything else (dicts, lists, ragged arrays) into a list of
    n, which the ops read as the agents' values (a plain list of numbers written in the
    script is one value for every agent instead). Distributed, it is ``fn(rank())``.
    Per-agent data and weights are thus written once, e.g.
    ``src_weights=fs.local(lambda r: {(r - 1) % n: 0.5})``.

    ``jit=True`` compiles ``fn`` with numba and, in simulation, runs the loop over agents
    in compiled code too (see :func:`vmap`); ``fn`` then returns numbers, arrays or a tuple
    of them.
    """
    return _backend().local(fn, jit=jit)


def vmap(
    fn: Callable[..., Any], in_axes: int | None | Sequence[int | None] = 0, *, jit: bool = False
) -> Callable[..., Any]:
    """Return ``fn`` applied agent by agent.

    In simulation the returned function splits each argument with ``in_axes`` 0 along the
    agent axis (``None``: passed whole to every agent), calls ``fn`` once per agent and
    stacks the results as :func:`local` does. Distributed, it returns ``fn`` itself. Code
    written with batch-friendly operations (``A @ x``, reductions over trailing axes)
    needs no ``vmap``.

    ``jit=True`` compiles ``fn`` with numba (``njit``, cached on disk where numba can find
    its source) on the first call. In simulation the loop over agents runs compiled as
    well, a ``prange`` loop shared by ``NUMBA_NUM_THREADS`` threads, writing into stacked
    outputs allocated once; distributed and in SPMD mode the compiled ``fn`` runs on the
    agent's own values. ``fn`` must then return numbers, arrays or a tuple of them, every
    agent's of the same shapes and dtypes. numpy arrays and CPU tensors go in (tensors as
    zero-copy views, results back as tensors, without autograd); CUDA tensors raise a
    TypeError naming ``.cpu()``. When numba cannot compile ``fn``, the call raises a
    TypeError with numba's reason in one line; ``jit=False`` runs it uncompiled, with the
    same numbers to round-off::

        def newton_sqrt(a):             # a data-dependent loop, one agent's scalar
            x = a
            while abs(x * x - a) > 1e-12 * a:
                x = 0.5 * (x + a / x)
            return x

        roots = fs.vmap(newton_sqrt, jit=True)(values)   # values: one number per agent
    """
    mapped: Callable[..., Any] = _backend().vmap(fn, in_axes, jit=jit)
    return mapped


def is_main_process() -> bool:
    """Return whether this process should print and write files for the job.

    True in simulation (one process holds every agent); rank 0 when distributed.
    """
    return _backend().is_main_process()


def global_view(x: ArrayLike) -> Value:
    """Return every agent's ``x`` stacked along a new leading axis, the same on every agent.

    In simulation that is ``x`` itself (copied); distributed, ``allgather(x[None])``. Use it
    for metrics, plots and files that need all agents' values at once.
    """
    return _backend().global_view(x)


# -- collective ops -----------------------------------------------------------------------
_ALGORITHMS = (None, "flat", "decomposed")


def _allreduce_variant(is_hierarchical_local: Any, algorithm: Any, factors: Any) -> str | None:
    """Return None (the backend's allreduce), "local" or "decomposed"; check the options."""
    if not isinstance(is_hierarchical_local, bool):
        raise TypeError(
            f"is_hierarchical_local must be a bool, got {type(is_hierarchical_local).__name__}"
        )
    if algorithm not in _ALGORITHMS:
        raise ValueError(f"algorithm must be None, 'flat' or 'decomposed', got {algorithm!r}")
    if factors is not None and algorithm == "flat":
        raise ValueError("factors= is for algorithm='decomposed', not 'flat'")
    decomposed = algorithm == "decomposed" or factors is not None
    if is_hierarchical_local:
        if decomposed:
            raise ValueError(
                "is_hierarchical_local=True reduces within each machine; it does not take "
                "algorithm='decomposed' or factors="
            )
        return "local"
    return "decomposed" if decomposed else None


@public_op(
    "ALLREDUCE",
    route=lambda world: world.collectives.allreduce,
    twin=lambda world: world.collectives.allreduce_nonblocking,
    twin_doc="""Start :func:`allreduce` and return a handle for :func:`wait` / :func:`poll`.

    The machine-local and decomposed variants run when called (the handle is complete).
    """,
    twin_track="allreduce",
)
def allreduce(
    run: Runner[Value],
    x: ArrayLike,
    average: bool = True,
    name: str | None = None,
    *,
    is_hierarchical_local: bool = False,
    algorithm: str | None = None,
    factors: Sequence[int] | None = None,
) -> Value:
    """Return the average (or with ``average=False`` the sum) of ``x`` over all agents.

    ``x_i <- (1/n) sum_j x_j``. Averaging needs float32/float64; sums take integers too,
    but not booleans, in any mode (numpy would count them, MPI has no sum of them and
    torch.distributed ors them): ``x.astype(np.int64)`` counts the agents with True.

    ``is_hierarchical_local=True`` reduces within each machine only (see
    :func:`machine_size`). ``algorithm="decomposed"`` computes the same sum in stages, as
    BlueConnect does: for ``size() = p_0 * p_1 * ... * p_k`` (``factors``; default the
    machine hierarchy, ``(local_size(), machine_size())``), reduce-scatter among the
    ``p_0`` processes of each group, then among ``p_1`` on the chunks left, ..., then
    all-gather back in reverse order; equal to the flat allreduce up to round-off, and
    bit-identical between the simulator and the runtimes.
    """
    if is_hierarchical_local is False and algorithm is None and factors is None:
        return run()(x, average, name)  # the flat allreduce: no other check to make
    variant = _allreduce_variant(is_hierarchical_local, algorithm, factors)
    if variant is None:
        return run()(x, average, name)
    if variant == "local":  # the variants run when called, also from the twin
        return run.variant(_local_allreduce, (x, average, name), "ALLREDUCE_LOCAL")
    return run.variant(_decomposed_allreduce, (x, average, name, factors), "ALLREDUCE_DECOMPOSED")


def _local_allreduce(world: Backend) -> Callable[..., Any]:
    return world.machines.local_allreduce


def _decomposed_allreduce(world: Backend) -> Callable[..., Any]:
    return world.machines.decomposed_allreduce


allreduce_nonblocking = allreduce.nonblocking


@public_op(
    "NEIGHBOR_ALLREDUCE",
    route=lambda world: world.neighbors.neighbor_allreduce,
    twin=lambda world: world.neighbors.neighbor_allreduce_nonblocking,
    twin_doc=(
        "Start :func:`neighbor_allreduce` and return a handle for :func:`wait` / :func:`poll`."
    ),
)
def neighbor_allreduce(
    run: Runner[Value],
    x: ArrayLike,
    self_weight: SelfWeight = None,
    src_weights: Weights = None,
    dst_weights: Weights = None,
    enable_topo_check: bool = True,
    name: str | None = None,
    *,
    check_weights: bool = True,
    compressor: CompressorLike | None = None,
) -> Value:
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

    Per-call weights whose effective matrix is neither row- nor column-stochastic get a
    one-time :class:`fogsim.WeightWarning` per call site (``check_weights=False``: they are
    meant, e.g. push-sum's). The simulator checks the whole matrix; distributed, a matrix
    is checked whole and dicts by this rank's row alone (see :class:`fogsim.WeightWarning`).

    ``compressor`` (a :mod:`fogsim.compress` compressor): every agent sends its compressed
    value, packed, so only ``compressor.payload_bytes(...)`` bytes per destination travel,
    and ``x_i <- w_ii C(x_i) + sum_j w_ij C(x_j)``, with the topology's weights or this
    call's: ``src_weights`` as one matrix or Topology for the step (payloads go only along
    its edges: a dynamic schedule's step costs its out-degree), or ``self_weight`` and
    per-agent ``src_weights`` dicts (the senders are then the topology's; the keys must be
    in-neighbors). ``dst_weights`` is refused: the receiver mixes the decompressed values,
    so push weights would have to travel with the payload. A randomized compressor draws
    from ``fs.rng()``, so every mode gives the same numbers; ``identity()`` gives the
    uncompressed result bit for bit. The nonblocking twin runs it at once and returns a
    completed handle. For compressed gossip with error feedback (static topology) see
    :class:`fogsim.compress.CompressedGossip`.
    """
    if check_weights is True and compressor is None:  # the topology's or the call's weights
        return run()(x, self_weight, src_weights, dst_weights, enable_topo_check, name)
    if compressor is not None:
        if dst_weights is not None:
            raise ValueError(
                "neighbor_allreduce with a compressor takes no dst_weights: the receiver mixes "
                "the decompressed values, so push weights cannot apply; give the step's weights "
                "as src_weights (one n x n matrix or Topology, or per-agent dicts with "
                "self_weight)"
            )
        compressed_neighbor_allreduce = _compressed_gossip
        if compressed_neighbor_allreduce is None:  # fogsim.compress was never imported
            raise TypeError(
                "compressor must be a fogsim.compress.Compressor (e.g. "
                f"fogsim.compress.top_k(0.1)), got {type(compressor).__name__}"
            )
        with _weightcheck.checks(check_weights):
            return run.plain(
                compressed_neighbor_allreduce,
                (x, compressor, None, self_weight, src_weights),
                "COMPRESSED_NEIGHBOR_ALLREDUCE",
            )
    with _weightcheck.checks(check_weights):
        return run()(x, self_weight, src_weights, dst_weights, enable_topo_check, name)


neighbor_allreduce_nonblocking = neighbor_allreduce.nonblocking


# -- ops routed by fogsim._routing (their _nonblocking twins too) --------------------------
@public_op(
    "HIERARCHICAL_NEIGHBOR_ALLREDUCE",
    route=lambda world: world.machines.hierarchical_neighbor_allreduce,
    twin=lambda world: world.machines.hierarchical_neighbor_allreduce_nonblocking,
)
def hierarchical_neighbor_allreduce(
    run: Runner[Value],
    x: ArrayLike,
    self_weight: SelfWeight = None,
    src_machine_weights: Weights = None,
    dst_machine_weights: Weights = None,
    enable_topo_check: bool = True,
    name: str | None = None,
) -> Value:
    """Return the neighbor average over machines of the machine averages of ``x``.

    ``y_m`` is the average of ``x`` over machine m's agents; every agent of machine m gets
    ``self_weight * y_m + sum_k w_mk y_k`` over the in-neighbor machines k of the machine
    topology (weights as in :func:`neighbor_allreduce`, with machines in place of ranks:
    ``src_machine_weights`` ``{machine: weight}``, ``dst_machine_weights`` for a dynamic
    step). Distributed it runs in four steps: the machine's values are gathered and
    averaged on its local rank 0, these exchange with the neighbor machines, combine,
    and broadcast the result inside their machines; only local rank 0's weight arguments
    are used (pass the same on every agent of a machine). In simulation the per-agent
    arguments are stacked as usual (entries of local rank 0 agents are used) or one
    ``machine_size() x machine_size()`` matrix gives the step's weights.
    """
    return run()(x, self_weight, src_machine_weights, dst_machine_weights, enable_topo_check, name)


hierarchical_neighbor_allreduce_nonblocking = hierarchical_neighbor_allreduce.nonblocking


@public_op(
    "ALLGATHER",
    route=lambda world: world.collectives.allgather,
    twin=lambda world: world.collectives.allgather_nonblocking,
)
def allgather(run: Runner[Value], x: ArrayLike, name: str | None = None) -> Value:
    """Return every agent's ``x`` concatenated along the first dimension in rank order.

    The first dimension may differ between agents (in simulation pass a list of n arrays).
    """
    return run()(x, name)


allgather_nonblocking = allgather.nonblocking


@public_op(
    "BROADCAST",
    route=lambda world: world.collectives.broadcast,
    twin=lambda world: world.collectives.broadcast_nonblocking,
)
def broadcast(run: Runner[Value], x: ArrayLike, root_rank: int, name: str | None = None) -> Value:
    """Return agent ``root_rank``'s ``x`` on every agent.

    Every agent names the same ``root_rank`` (and ``name``); where they differ, every
    agent raises the same ``ValueError``, as for a dtype or shape that differs.
    """
    return run()(x, root_rank, name)


broadcast_nonblocking = broadcast.nonblocking


@public_op(
    "NEIGHBOR_ALLGATHER",
    route=lambda world: world.neighbors.neighbor_allgather,
    twin=lambda world: world.neighbors.neighbor_allgather_nonblocking,
)
def neighbor_allgather(
    run: Runner[Value],
    x: ArrayLike,
    src_ranks: Ranks = None,
    dst_ranks: Ranks = None,
    name: str | None = None,
) -> Value:
    """Return the in-neighbors' ``x`` concatenated along the first dimension, by rank.

    With ``src_ranks`` and ``dst_ranks`` (both, per agent) the call uses those neighbors
    instead of the topology's. In simulation the result is one array when every agent has
    the same number of in-neighbors, else a list of n arrays.
    """
    return run()(x, src_ranks, dst_ranks, name)


neighbor_allgather_nonblocking = neighbor_allgather.nonblocking


@public_op(
    "BARRIER",
    route=lambda world: world.collectives.barrier,
    twin=lambda world: world.collectives.barrier_nonblocking,
)
def barrier(run: Runner[None]) -> None:
    """Block until every agent has reached the barrier."""
    return run()()


barrier_nonblocking = barrier.nonblocking


def wait(handle: Handle) -> Any:
    """Block until the operation behind ``handle`` finishes; return its result."""
    if not isinstance(handle, Handle):
        raise TypeError(
            f"wait() takes a handle from a *_nonblocking op, got {type(handle).__name__}"
        )
    tl = _timeline.active
    if tl is None:
        return handle.wait()
    tid = tl.op_begin("WAIT", handle.name or handle.op)
    try:
        return handle.wait()
    finally:
        tl.op_end(tid)


def poll(handle: Handle) -> bool:
    """Return whether :func:`wait` on ``handle`` would return without blocking."""
    if not isinstance(handle, Handle):
        raise TypeError(
            f"poll() takes a handle from a *_nonblocking op, got {type(handle).__name__}"
        )
    return handle.poll()
