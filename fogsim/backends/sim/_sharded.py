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
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from typing import Any

import numpy as np

from ... import _arrays, _settings
from ... import timeline as _timeline
from ..._arrays import wrap_like
from .._decomposed import check_factors, default_factors
from .._parts import Capabilities
from .._weights import is_matrix
from .._windows import NoWindows
from . import _torchops
from ._backend import SimBackend
from ._bands import BandPlan, band_plan, combine_band, exchange_band
from ._plan import (
    CsrPlan,
    Plan,
    plan_messages,
    static_plan,
)
from ._pool import BufferPool
from ._sent import SentBytes
from ._shapes import ShapeGuard
from ._sharded_device import device_combine
from ._sharded_machines import ShardedMachines
from ._shards import (
    TAG_GATHER,
    TAG_NEIGHBOR,
    ShardPlan,
    block_bounds,
    block_of,
    combine_overlapped,
    exchange_into,
    shard_plan,
)
from ._shardwire import decode, encode

__all__ = ["ShardedSimBackend", "open_transport"]

#: Step plans whose split is remembered (a dynamic schedule cycles through a few).
_CACHED_SHARDS = 32
_MODE = "the sharded simulator (agents split over processes)"


def open_transport(settings: _settings.Settings) -> Any:
    """Return the transport among this job's processes: MPI, or torch.distributed under
    torchrun or with ``FOGSIM_SHARD_TRANSPORT=torch``."""
    kind = settings.shard_transport or ("torch" if settings.torchrun else "mpi")
    if kind == "torch":
        from ..torchdist import _world
        from ..torchdist._transport import TorchTransport

        rank, size = _world.start(settings)
        group, _ = _world.new_groups(rank, size)
        return TorchTransport(group, size, rank)
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - mpi4py is a dependency
        raise ValueError("a sharded simulation over MPI needs mpi4py, which is missing") from exc
    from ..mpi._transport import MpiTransport

    return MpiTransport(MPI.COMM_WORLD.Dup(), MPI)


class ShardedWindows(NoWindows):
    """The window part of the sharded simulator: every window op refuses, naming itself."""

    def _refuse(self, op: str) -> Any:
        raise NotImplementedError(
            f"{op} is not implemented in {_MODE}: run windows with every agent in one "
            "process (shards=1) or one process per agent (backend 'mpi')"
        )


class ShardedSimBackend(ShardedMachines, SimBackend):
    """Simulate ``size`` agents over the processes of ``transport``, one block each.

    ``shards``, when given, must be the number of processes (a check of the launch);
    ``transport`` defaults to :func:`open_transport`. See the module docstring.
    """

    #: Tensors on other devices go through host memory in the ops other than
    #: ``neighbor_allreduce`` (which combines them on their device).
    _host_staging = True
    capabilities = Capabilities(stacked=True, windows=False)

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        shards: int | None = None,
        transport: Any = None,
    ) -> None:
        super().__init__(size, local_size, settings)
        settings = settings or _settings.Settings()
        self._owns_transport = transport is None
        self._t = open_transport(settings) if transport is None else transport
        parts, me = int(self._t.size), int(self._t.rank)
        if shards is not None and shards != parts:
            raise ValueError(
                f"shards={shards} but {parts} process(es) were launched: start the script "
                f"with fogrun --sim --shards {shards} -np {self._n}, or mpiexec -n {shards}"
            )
        self._parts, self._me = parts, me
        self._bounds = block_bounds(self._n, parts)
        lo, hi = int(self._bounds[me]), int(self._bounds[me + 1])
        self._rows, self._first = hi - lo, lo
        self._shapes = ShapeGuard(self._rows)
        self.sent = SentBytes(self._rows, lo)
        self.windows = ShardedWindows(self.name)  # type: ignore[assignment]  # no windows here
        self._extended = BufferPool()  # (block + halo) buffers: inputs and outputs
        self._shards: OrderedDict[tuple[tuple[int, ...], bool], tuple[Plan, Any]] = OrderedDict()
        self._gather_plan: tuple[Any, CsrPlan] | None = None
        self._members: CsrPlan | None = None
        self._device_plans_of: dict[int, tuple[ShardPlan, CsrPlan]] = {}

    # -- world ----------------------------------------------------------------------------
    @property
    def shards(self) -> int:
        """The number of processes the agents are split over."""
        return self._parts

    @property
    def shard(self) -> int:
        """This process's index among the :attr:`shards` (0: the main process)."""
        return self._me

    @property
    def block(self) -> tuple[int, int]:
        """This process's agents ``[lo, hi)``."""
        return self._first, self._first + self._rows

    def is_main_process(self) -> bool:
        return self._me == 0

    def _held(self) -> str:
        lo, hi = self.block
        return (
            f"but this process holds agents {lo}..{hi - 1} ({self._rows} of the world's "
            f"{self._n}, sharded over {self._parts} processes); stack one value per agent "
            "of the block (see fogsim.local)"
        )

    def close(self) -> None:
        free = getattr(self._t, "free", None)
        if self._owns_transport and free is not None:  # every process closes its world
            free()
        self._pool.clear()
        self._extended.clear()
        self._shards.clear()
        self._device_plans_of.clear()

    def barrier(self) -> None:
        """Block until every process of the sharded simulation has reached the barrier."""
        self._t.barrier()

    def _on_topology(self) -> None:
        self._static_plan = static_plan(self.load_topology(), self._is_weighted)
        self._step_plans.clear()  # per-call dicts were checked against the old topology

    def in_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.in_neighbors(i) for i in range(*self.block)]

    def out_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.out_neighbors(i) for i in range(*self.block)]

    def in_neighbor_machine_ranks(self) -> list[list[int]]:
        topo = self.load_machine_topology()
        return [topo.in_neighbors(i // self._local) for i in range(*self.block)]

    def out_neighbor_machine_ranks(self) -> list[list[int]]:
        topo = self.load_machine_topology()
        return [topo.out_neighbors(i // self._local) for i in range(*self.block)]

    # -- what needs every agent in one process -------------------------------------------
    def set_faults(self, faults: Any) -> None:
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

    # -- moving rows ----------------------------------------------------------------------
    def _blocks(self) -> list[tuple[int, int]]:
        b = self._bounds
        return [(int(b[q]), int(b[q + 1])) for q in range(self._parts)]

    def _gather_blocks(self, arr: np.ndarray) -> np.ndarray:
        """Return all N agents' rows on every process (every block to every process)."""
        whole = np.empty((self._n, *arr.shape[1:]), dtype=arr.dtype)
        lo, hi = self.block
        whole[lo:hi] = arr
        self._all_to_all(whole[lo:hi], [whole[a:z] for a, z in self._blocks()], TAG_GATHER)
        return whole

    def _all_to_all(self, mine: np.ndarray, parts: list[np.ndarray], tag: int) -> None:
        """Send ``mine`` to every other process; receive process q's into ``parts[q]``."""
        me = self._me
        others = [q for q in range(self._parts) if q != me]
        if others:
            self._t.exchange(
                [(mine, q) for q in others], [(parts[q], q) for q in others], tag
            ).wait()

    def _split(self, plan: Plan, narrow: bool = False) -> Any:
        """Return this process's part of ``plan``: a :class:`BandPlan` when ``narrow``
        allows one and the plan is a narrow circulant, else a :class:`ShardPlan`.

        Computed once per plan's arrays: a dynamic schedule's Topology objects give plans
        made afresh each step but holding the same (cached) arrays.
        """
        key = (_plan_key(plan), narrow)
        hit = self._shards.get(key)
        if hit is not None and _plan_key(hit[0]) == key[0]:
            self._shards.move_to_end(key)
            return hit[1]
        split: BandPlan | ShardPlan | None = None
        if narrow:
            split = band_plan(plan, self._n, self._parts, self._me)
        if split is None:
            split = shard_plan(plan, self._n, self._parts, self._me)
        self._shards[key] = (plan, split)
        if len(self._shards) > _CACHED_SHARDS:
            self._shards.popitem(last=False)
        return split

    def _shard(self, plan: Plan) -> ShardPlan:
        """Return this process's :class:`ShardPlan` of ``plan`` (cached)."""
        split: ShardPlan = self._split(plan)
        return split

    def _extended_rows(self, flat: np.ndarray, before: int, total: int) -> np.ndarray:
        """Return a ``(total, m)`` buffer holding ``flat`` at rows ``[before, before + b)``.

        ``flat`` that already sits there in such a buffer (an earlier result) is used in
        place: ``x = fs.neighbor_allreduce(x)`` copies no block.
        """
        b, m = self._rows, flat.shape[1]
        base = flat.base
        if (
            isinstance(base, np.ndarray)
            and base.shape == (total, m)
            and base.dtype == flat.dtype
            and base.flags.c_contiguous
            and flat.flags.c_contiguous
            and flat.ctypes.data == base.ctypes.data + before * m * base.itemsize
        ):
            return base
        ext = self._extended.empty((total, m), flat.dtype)
        ext[before : before + b] = flat
        return ext

    def _with_halo(self, flat: np.ndarray, shard: ShardPlan) -> tuple[np.ndarray, Any]:
        """Return the ``(b + h, m)`` extended rows of ``flat`` and the request filling the
        halo rows ``[b, b + h)``."""
        ext = self._extended_rows(flat, 0, self._rows + len(shard.halo))
        return ext, exchange_into(self._t, shard, ext, TAG_NEIGHBOR)

    def _combine(self, plan: Plan, flat: np.ndarray) -> np.ndarray:
        """Return the block's rows of ``W x`` for the block's rows ``flat`` ``(b, m)``."""
        split = self._split(plan, narrow=True)
        b = self._rows
        if isinstance(split, BandPlan):
            a = split.before
            ext = self._extended_rows(flat, a, a + b + split.after)
            request = exchange_band(self._t, split, ext, TAG_NEIGHBOR)
            out = self._extended.empty(ext.shape, ext.dtype)
            with _timeline.phase("COMPUTE_AVERAGE"):
                combine_band(split, ext, out, request)
            return out[a : a + b]
        ext, request = self._with_halo(flat, split)
        out = self._extended.empty(ext.shape, ext.dtype)
        with _timeline.phase("COMPUTE_AVERAGE"):
            combine_overlapped(split, ext, out, request)
        return out[:b]

    # -- per-agent arguments --------------------------------------------------------------
    def _gather(self, value: Any, argname: str) -> list[Any]:
        """Every process's ``value``, by process, as JSON data (never pickled)."""
        parts = self._t.allgather_json(encode(value))
        return [decode(part, argname, f"process {p}") for p, part in enumerate(parts)]

    def _world_arg(self, value: Any, argname: str) -> Any:
        """Return a per-agent argument for the whole world, gathering block-sized ones.

        Every process gathers whenever the argument is per agent (by its type, the same on
        every process running the same script), so the processes never disagree on
        whether to communicate; lengths that fit neither form raise on every process.
        """
        if value is None or isinstance(value, numbers.Real) or is_matrix(value):
            return value
        if _arrays.is_tensor(value):
            value = value.detach().cpu().numpy()
        if not isinstance(value, np.ndarray | list | tuple) or (
            isinstance(value, np.ndarray) and value.ndim == 0
        ):
            return value  # the plan's parser names what is wrong with it
        lengths = self._t.allgather_json(len(value))
        if all(n == self._n for n in lengths):
            return value
        sizes = np.diff(self._bounds).tolist()
        if lengths == sizes:  # the blocks' entries: gather them
            parts = self._gather(value, argname)
            if isinstance(value, np.ndarray):
                return np.concatenate([np.asarray(p) for p in parts])
            return [v for p in parts for v in p]
        raise ValueError(
            f"{argname}: the processes gave {lengths} entries; give one per agent of the "
            f"process's block ({sizes}, as fogsim.local builds it) or one per agent of the "
            f"world ({self._n}) on every process"
        )

    # -- ops ------------------------------------------------------------------------------
    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        _arrays.check_name(name)
        if not isinstance(enable_topo_check, bool):
            raise TypeError("enable_topo_check must be a bool")
        device = _torchops.takes(x)
        if device:
            t, dtype = _torchops.stacked(self, x, "neighbor_allreduce", averaging=True)
        else:
            arr, kind = self._stacked(x, "neighbor_allreduce", averaging=True)
        plan = self._step_plan(
            self._world_arg(self_weight, "self_weight"),
            self._world_arg(src_weights, "src_weights"),
            self._world_arg(dst_weights, "dst_weights"),
        )
        sends = self.sent.step(plan, self.load_topology(), src_weights, dst_weights)
        if device:
            self.sent.add_tensor(t, sends)
            return device_combine(self, plan, t, dtype)
        self.sent.add(arr, sends)
        flat = np.ascontiguousarray(arr.reshape(self._rows, -1))
        if flat.shape[1]:
            out = self._combine(plan, flat)
        else:
            out = np.empty_like(flat)
        if self._cost is not None:
            self._charge("neighbor_allreduce", arr, topology=plan_messages(plan, self._n))
        return wrap_like(out.reshape(arr.shape), kind)

    def _sum(self, arr: np.ndarray) -> np.ndarray:
        """Return the sum over all N agents of ``arr`` (blocks summed, then added by process)."""
        part = arr.sum(axis=0, dtype=arr.dtype)
        # rows of a 2-d array: buffers even for per-agent scalars, whose 0-d parts would
        # be read-only numpy scalars
        parts = np.empty((self._parts, part.size), dtype=arr.dtype)
        parts[self._me] = part.ravel()
        self._all_to_all(parts[self._me], list(parts), TAG_GATHER)
        total = parts[0].copy()
        for q in range(1, self._parts):
            total += parts[q]
        return total.reshape(part.shape)

    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self._reduced(x, average, name)

    def decomposed_allreduce(self, x, average, name, factors):
        if factors is None:
            factors = default_factors(self._n, self._local)
        else:
            factors = check_factors(factors, self._n)
        # sharded, the stages are one sum (1e-12 of the staged one); the cost model is charged
        # for the decomposition
        return self._reduced(x, average, name, algorithm="decomposed", factors=factors)

    def _reduced(self, x: Any, average: Any, name: Any, **info: Any) -> Any:
        """The average (or sum) over all N agents of ``x``, on every agent."""
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        total = self._sum(arr)
        out = self._pool.empty(arr.shape, arr.dtype)
        out[...] = total / self._n if average else total
        self._charge("allreduce", arr, **info)
        return wrap_like(out, kind)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        _arrays.check_name(name)
        root = self.check_rank(root_rank, "root_rank")
        arr, kind = self._stacked(x, "broadcast", averaging=False)
        owner = int(block_of(np.array([root]), self._bounds)[0])
        row = np.empty((1, *arr.shape[1:]), dtype=arr.dtype)
        others = [q for q in range(self._parts) if q != self._me]
        if self._me == owner:
            row[0] = arr[root - self._first]
            self._t.exchange([(row, q) for q in others], [], TAG_GATHER).wait()
        else:
            self._t.exchange([], [(row, owner)], TAG_GATHER).wait()
        out = self._pool.empty(arr.shape, arr.dtype)
        out[...] = row[0]
        self._charge("broadcast", arr)
        return wrap_like(out, kind)

    def global_view(self, x: Any) -> Any:
        """Return all N agents' values on every process (every block is sent to every
        process: one process's whole state, for metrics and plots)."""
        arr, kind = self._stacked(x, "global_view", averaging=False)
        return wrap_like(self._gather_blocks(np.ascontiguousarray(arr)), kind)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        _arrays.check_name(name)
        if isinstance(x, list | tuple) and len(x) == self._rows and not _arrays.is_literal(x):
            return self._allgather_values(x)
        arr, kind = self._stacked(x, "allgather", averaging=False)
        return self._allgathered(self._gather_blocks(np.ascontiguousarray(arr)), kind, arr)

    def _allgathered(self, whole: np.ndarray, kind: Any, arr: np.ndarray) -> Any:
        per_agent = (
            whole.reshape(self._n, -1, *whole.shape[2:]) if whole.ndim > 1 else whole[:, None]
        )
        flat = per_agent.reshape(1, -1, *per_agent.shape[2:])
        out = self._pool.empty((self._rows, *flat.shape[1:]), whole.dtype)
        out[...] = flat
        self._charge("allgather", arr)
        return wrap_like(out, kind)

    def _allgather_values(self, values: Any) -> Any:
        """allgather of one value per agent given as a sequence (sizes may differ)."""
        parts = [_arrays.to_numpy(v, f"x[{i}]") for i, v in enumerate(values)]
        arrays = [np.atleast_1d(a) for a, _ in parts]
        everyone = [a for block in self._gather(arrays, "allgather") for a in block]
        shapes = {a.shape for a in everyone}
        trailing = {s[1:] for s in shapes}
        if len(trailing) > 1:
            raise ValueError(
                f"allgather: agents' values differ beyond the first dimension: {sorted(trailing)}"
            )
        if len(shapes) == 1:  # alike on every process: the stacked form, as one process has
            arr, kind = self._stacked(values, "allgather", averaging=False)
            whole = np.concatenate(everyone).reshape(self._n, *arr.shape[1:])
            return self._allgathered(whole, kind, arr)
        whole = np.concatenate(everyone)
        return [wrap_like(whole.copy(), kind) for _, kind in parts]

    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        _arrays.check_name(name)
        arr, kind = self._stacked(x, "neighbor_allgather", averaging=False)
        if (src_ranks is None) != (dst_ranks is None):  # before any process gathers
            raise ValueError("neighbor_allgather needs both src_ranks and dst_ranks, or neither")
        if src_ranks is None:
            plan = self._static_gather_plan()
        else:
            src = self._world_arg(src_ranks, "src_ranks")
            plan = _pattern_plan(
                *self._senders(src, self._world_arg(dst_ranks, "dst_ranks")), self._n
            )
        self.sent.add(arr, self.sent.gather(plan.indices, self._n))
        per_agent = arr[:, None] if arr.ndim == 1 else arr
        flat = np.ascontiguousarray(per_agent.reshape(self._rows, -1))
        shard = self._shard(plan)
        ext, request = self._with_halo(flat, shard)
        request.wait()
        b = self._rows
        indptr = shard.indptr[: b + 1]
        gathered = ext[shard.indices[: indptr[-1]]].reshape(-1, *per_agent.shape[1:])
        degrees = np.diff(plan.indptr)
        if degrees.size and np.all(degrees == degrees[0]):
            out = gathered.reshape(b, -1, *per_agent.shape[2:])
            return wrap_like(out, kind)
        chunks = np.split(gathered, indptr[1:-1])
        return [wrap_like(c.reshape(-1, *per_agent.shape[2:]), kind) for c in chunks]

    def _static_gather_plan(self) -> CsrPlan:
        topo = self.load_topology()
        if self._gather_plan is None or self._gather_plan[0] is not topo:
            indptr, indices, _ = topo.offdiag_csr()
            self._gather_plan = (topo, _pattern_plan(indptr, indices, self._n))
        return self._gather_plan[1]


def _plan_key(plan: Plan) -> tuple[int, ...]:
    """The identity of what a plan is made of (the cache holds the plan, so it lives on)."""
    if isinstance(plan, CsrPlan):
        return (id(plan.indptr), id(plan.indices), id(plan.data), id(plan.self_weight))
    return (id(plan.form),)


def _pattern_plan(indptr: np.ndarray, indices: np.ndarray, n: int) -> CsrPlan:
    """A plan whose entries are the edges of a pattern (what neighbor_allgather reads)."""
    return CsrPlan(np.zeros(n), indptr, indices, np.ones(len(indices)))
