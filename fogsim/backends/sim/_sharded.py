"""The simulator sharded over P processes: N agents, one contiguous block per process.

The same stacked-agent script runs unchanged when P processes are launched
(``fogrun --sim --shards P -np N``, ``mpiexec -n P python -m mpi4py script.py`` with
``init(backend="sim", size=N)``, or ``init(..., shards=P)``): process ``p`` holds agents
``[lo_p, hi_p)`` (:func:`~._shards.block_bounds`: sizes differ by at most one), so
``fs.rank()`` is its block's ranks, ``fs.local(fn)`` builds only the block, and every op
takes and returns the block's rows. ``fs.size()`` stays N.

What moves between processes, per op:

* ``neighbor_allreduce`` and ``neighbor_allgather``: only boundary rows. Each step plan
  (the static topology's, or one per call) is split once into what each block reads from
  the others and what it sends (:func:`~._shards.shard_plan`, cached per plan); the halo
  arrives straight into rows ``[b, b + h)`` of an extended buffer whose first ``b`` rows
  are the block, and the block's rows are combined with the one-process plan's products in
  its order: the numbers are those of one process, bit for bit. The rows that read no halo
  are combined while it moves. Narrow circulant plans (rings) instead lay the block out
  between its halo rows and run the circulant kernel (``_bands``). The result is itself a
  view into such a buffer, so ``x = fs.neighbor_allreduce(x)`` copies no block.
* tensors on a device (CUDA): ``neighbor_allreduce`` combines the block and its halo in
  torch on the device (the halo moved as device tensors over torch.distributed, through
  host memory over MPI); the other ops stage them through host memory.
* ``allreduce``: each process sums its block, the P partial sums are exchanged and added
  in process order (the same numbers as one process up to rounding: 1e-12 relative).
* ``broadcast``: the root's row from the process holding it.
* ``global_view`` and ``allgather``: every block to every process -- N rows on each,
  for metrics and plots (their cost is one process's whole state, on every process).
* hierarchical ops: machine means computed by the process holding each machine's first
  agent (the machine's other rows sent to it), then all M means on every process.

Per-agent weight arguments (``self_weight`` vectors, ``src_weights``/``dst_weights``
dicts, ``src_ranks``) may be given for the block (as ``fs.local`` builds them) or for the
world; they are gathered to the world's (one message per call, as JSON data: see
:mod:`._shardwire`) so that every process builds the same plan. Window ops, modelled
asynchrony and fault injection need every agent in one process: they raise
``NotImplementedError`` naming the op.

The world is composed of its own parts over one :class:`~._state.SimState` for the block
(the simulator's: its stacking, plans, bytes sent and cost model) and one
:class:`~._shardcomm.ShardComm` (the transport and the blocks): collectives and neighbor
ops (:mod:`._sharded_ops`), machine ops (:mod:`._sharded_machines`), and windows that
refuse. Each part is the simulator's over a whole-world state, with the sharded forms
above as methods of its own; an op it has no sharded form of (a new one) runs on the
gathered world (:meth:`ShardedSimBackend.follow`, :mod:`._gathered`). The transport is
opened by name through :func:`fogsim.backends.open_transport`.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ... import _settings
from ..._arrays import wrap_like
from .. import OpenedTransport, open_transport
from .._parts import Capabilities
from .._runtime.transport import Transport
from .._windows import NoWindows
from ._collectives import SimCollectives
from ._gathered import gathered
from ._machines import SimMachines
from ._neighbors import SimNeighbors
from ._shardcomm import ShardComm
from ._sharded_machines import ShardedMachines
from ._sharded_ops import ShardedCollectives, ShardedNeighbors
from ._state import FaultModel, SimState
from ._world import StackedWorld, world_size

__all__ = ["ShardedSimBackend", "ShardedWindows"]

#: The simulator's part methods, and their parts: a sharded part that inherits one runs it
#: gathered, on the simulator's own part of that kind over the whole world.
_SIMULATOR_OPS: dict[Any, type[SimCollectives | SimNeighbors | SimMachines]] = {
    f: part
    for part in (SimCollectives, SimNeighbors, SimMachines)
    for f in vars(part).values()
    if callable(f)
}

if TYPE_CHECKING:
    from ..._types import ArrayLike
    from .. import Backend

_MODE = "the sharded simulator (agents split over processes)"


class ShardedWindows(NoWindows):
    """The window part of the sharded simulator: every window op refuses, naming itself."""

    def _refuse(self, op: str) -> Any:
        raise NotImplementedError(
            f"{op} is not implemented in {_MODE}: run windows with every agent in one "
            "process (shards=1) or one process per agent (backend 'mpi')"
        )


class ShardedSimBackend(StackedWorld):
    """Simulate ``size`` agents over the processes of ``transport``, one block each.

    ``shards``, when given, must be the number of processes (a check of the launch);
    ``transport`` defaults to the one :func:`fogsim.backends.open_transport` opens: MPI,
    or torch.distributed under torchrun or with ``FOGSIM_SHARD_TRANSPORT=torch``. See the
    module docstring.
    """

    name = "sim"
    capabilities: ClassVar[Capabilities] = Capabilities(stacked=True, windows=False, cuda=True)
    collectives: ShardedCollectives
    neighbors: ShardedNeighbors
    machines: ShardedMachines

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        shards: int | None = None,
        transport: Transport | None = None,
    ) -> None:
        settings = settings or _settings.Settings()
        n, local = world_size(size, local_size, settings)
        #: the transport this world opened, and frees when it closes (None: given one)
        self._opened: OpenedTransport | None = None
        if transport is None:
            kind = settings.shard_transport or ("torch" if settings.torchrun else "mpi")
            transport = self._opened = open_transport(kind, settings)
        self._comm = comm = ShardComm(transport, n)
        if shards is not None and shards != comm.parts:
            raise ValueError(
                f"shards={shards} but {comm.parts} process(es) were launched: start the script "
                f"with fogrun --sim --shards {shards} -np {n}, or mpiexec -n {shards}"
            )
        lo, hi = comm.lo, comm.hi
        held = (
            f"but this process holds agents {lo}..{hi - 1} ({hi - lo} of the world's "
            f"{n}, sharded over {comm.parts} processes); stack one value per agent "
            "of the block (see fogsim.local)"
        )
        state = SimState(
            n,
            local,
            hi - lo,
            lo,
            held=held,
            host_staging=True,  # the ops other than neighbor_allreduce stage device tensors
            machine_topology=self.load_machine_topology,
        )
        super().__init__(state)
        # the whole world beside the block, for the ops with no sharded form (it takes the
        # block's topologies at the first of them: see follow and _gathered)
        self._whole = whole = SimState(
            n,
            local,
            n,
            0,
            held="the sharded simulator gathers the whole world for this op",
            host_staging=True,
            machine_topology=self.load_machine_topology,
        )
        self.windows = ShardedWindows(self.name)
        self.collectives = ShardedCollectives(whole, state, comm)
        self.neighbors = ShardedNeighbors(whole, state, comm)
        self.machines = ShardedMachines(whole, state, comm, self.collectives)
        # the simulator's own parts over the whole world: what an op with no sharded form
        # runs on, gathered (so that what it calls on ``self`` is the simulator's too, never
        # a sharded form that takes the block's values)
        self._simulator: dict[type, SimCollectives | SimNeighbors | SimMachines] = {
            SimCollectives: SimCollectives(whole, comm.transport.barrier),
            SimNeighbors: SimNeighbors(whole),
            SimMachines: SimMachines(whole),
        }

    def follow(self, route: Callable[[Backend], Callable[..., Any]]) -> Callable[..., Any]:
        """The part method ``route`` reaches: the sharded form where the part has one; an
        op its part inherits from the simulator's runs on the gathered world
        (:func:`~._gathered.gathered`: the one-process numbers, with the whole world on
        every process for that op)."""
        method = route(self)
        function = getattr(method, "__func__", None)
        part = _SIMULATOR_OPS.get(function)
        if part is not None and function is not None:
            simulator = types.MethodType(function, self._simulator[part])
            return gathered(simulator, self._whole, self._state, self._comm)
        return method

    # -- world ----------------------------------------------------------------------------
    @property
    def shards(self) -> int:
        """The number of processes the agents are split over."""
        return self._comm.parts

    @property
    def shard(self) -> int:
        """This process's index among the :attr:`shards` (0: the main process)."""
        return self._comm.me

    def shard_index(self) -> int | None:
        return self._comm.me

    @property
    def block(self) -> tuple[int, int]:
        """This process's agents ``[lo, hi)``."""
        return self._comm.lo, self._comm.hi

    def is_main_process(self) -> bool:
        return self._comm.me == 0

    def neighbor_values(
        self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The block's per-agent ``values`` with those of the senders it hears from in the
        world's pattern ``indptr``, ``indices``, and where each edge's sender lies among
        them (see ``ShardComm.neighbor_values``; what ``fogsim.clock`` reads)."""
        return self._comm.neighbor_values(indptr, indices, values)

    def max_over_shards(self, values: np.ndarray) -> np.ndarray:
        """Entry by entry, the largest of every process's ``values`` (alike in shape)."""
        return self._comm.max_over_shards(values)

    def close(self) -> None:
        if self._opened is not None:  # every process closes its world
            self._opened.free()
        self._state.close()
        self._whole.close()
        self._comm.clear()

    def global_view(self, x: ArrayLike) -> Any:
        """Return all N agents' values on every process (every block is sent to every
        process: one process's whole state, for metrics and plots)."""
        arr, kind = self._state.stacked(x, "global_view", averaging=False)
        return wrap_like(self._comm.gather_blocks(np.ascontiguousarray(arr)), kind)

    # -- what needs every agent in one process -------------------------------------------
    def set_faults(self, faults: FaultModel | None) -> None:
        if faults is not None:
            raise NotImplementedError(
                f"fault injection (fogsim.faults) is not implemented in {_MODE}: inject "
                "faults with every agent in one process (shards=1)"
            )

    def window(self, name: str) -> Any:
        raise NotImplementedError(f"window inspection is not implemented in {_MODE}")

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        raise NotImplementedError(
            f"set_asynchrony (modelled asynchrony) is not implemented in {_MODE}: model "
            "asynchrony with every agent in one process (shards=1)"
        )
