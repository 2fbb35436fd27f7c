"""The vectorized simulator: all n agents in one process, values stacked on axis 0.

Agent i's value is ``x[i]``; every op runs once for all agents, and a neighbor
allreduce is one weight-matrix product ``X <- W X`` run by the kernels of
:mod:`fogsim._core` (no Python loop over agents on the per-step path).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import _arrays, _settings, _weightcheck
from ... import timeline as _timeline
from ..._arrays import NUMPY, Kind, to_numpy, wrap_like
from ..._jit import check_axes, compiled
from ...topology import Topology
from .._base import Backend
from .._decomposed import check_factors, default_factors, staged_sum
from .._parts import Capabilities
from .._weights import is_matrix, machine_words
from . import _torchops
from ._plan import (
    apply_plan,
    check_plan,
    check_same_pattern,
    plan_matrix,
    plan_messages,
    rank_rows,
    resolve_plan,
    static_plan,
    transpose,
)
from ._pool import MIN_POOLED_BYTES, BufferPool
from ._sent import SentBytes
from ._shapes import ShapeGuard
from ._stack import allgather_ragged, ragged, stack_outputs
from ._stepplans import StepPlans
from ._window import SimWindow
from ._windows import SimWindowOps

__all__ = ["SimBackend"]

_FLOAT64, _FLOAT32 = np.dtype(np.float64), np.dtype(np.float32)


def _positive_int(value: Any, argname: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{argname} must be >= 1, got {value}")
    return int(value)


class SimBackend(Backend):
    """Simulate ``size`` agents in this process (see the module docstring).

    A tensor on a device other than the CPU stays there: the collectives and neighbor ops
    combine it with torch on its device (``_torchops``; injected faults copy it to the
    host). The window ops and the model of asynchrony, its ``windows`` part (a
    ``SimWindowOps``), and the decomposed allreduce take host values only.
    """

    name = "sim"
    capabilities = Capabilities(stacked=True, windows=True, cuda=True)
    windows: SimWindowOps
    #: Whether tensors on other devices may be copied to the host (the sharded simulator's
    #: collective ops); here they are combined on their device or refused.
    _host_staging = False

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
    ) -> None:
        super().__init__()
        settings = settings or _settings.Settings()
        if size is None:
            size = settings.size or _settings.DEFAULT_SIM_SIZE
        self._n = _positive_int(size, "size")
        self._local = self._n if local_size is None else _positive_int(local_size, "local_size")
        if self._n % self._local:
            raise ValueError(
                f"local_size={self._local} does not divide size={self._n}: simulated machines "
                "must all hold the same number of agents"
            )
        # The agents this process stacks: all n here; a block of them when sharded.
        self._rows, self._first = self._n, 0
        self._pool = BufferPool()
        #: bytes each agent sent in the neighbor ops (see :func:`fogsim.bytes_sent`)
        self.sent = SentBytes(self._n)
        self._shapes = ShapeGuard(self._n)  # per-agent values that grew an agent axis
        self._static_plan: Any = None  # a Plan once a topology is set
        self._static_sends: Any = None  # its topology's out-degrees (see SentBytes.static)
        self._step_plans = StepPlans()  # the plans of recent per-call weights
        self._machine_plan: Any = None  # the static plan of _machine_plan_of
        self._machine_plan_of: Topology | None = None
        self._cost: Any = None  # a cost meter charged by every communication op (or None)
        self._faults: Any = None  # fogsim.faults.Faults applied to neighbor_allreduce
        self._device_plans = _torchops.PlanCache()  # plans' arrays on tensors' devices
        self.windows = SimWindowOps(self._n)

    # -- world ----------------------------------------------------------------------------
    @property
    def size_int(self) -> int:
        return self._n

    def size(self) -> int:
        return self._n

    def rank(self) -> np.ndarray:
        return np.arange(self._first, self._first + self._rows)

    def local_size(self) -> int:
        return self._local

    def local_rank(self) -> np.ndarray:
        return self.rank() % self._local

    def close(self) -> None:
        self.windows.close()
        self._pool.clear()
        self._device_plans.clear()

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        topo = self.load_topology()
        self._static_plan = static_plan(topo, self._is_weighted)
        self._static_sends = self.sent.static(topo)  # its out-degrees, for bytes_sent
        self._step_plans.clear()  # per-call dicts were checked against the old topology
        self.windows.on_topology(topo, self._is_weighted)

    def _on_machine_topology(self) -> None:
        topo = self._machine_topology
        assert topo is not None
        self._machine_plan = static_plan(topo, self._machine_weighted)
        self._machine_plan_of = topo

    def in_neighbor_machine_ranks(self) -> list[list[int]]:
        topo = self.load_machine_topology()
        return [topo.in_neighbors(i // self._local) for i in range(self._n)]

    def out_neighbor_machine_ranks(self) -> list[list[int]]:
        topo = self.load_machine_topology()
        return [topo.out_neighbors(i // self._local) for i in range(self._n)]

    def in_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.in_neighbors(i) for i in range(self._n)]

    def out_neighbor_ranks(self) -> list[list[int]]:
        topo = self.load_topology()
        return [topo.out_neighbors(i) for i in range(self._n)]

    # -- agent-local data -----------------------------------------------------------------
    def local(self, fn: Callable[[int], Any], jit: bool = False) -> Any:
        if not callable(fn):
            raise TypeError(f"local() takes a function of the rank, got {type(fn).__name__}")
        first, rows = self._first, self._rows
        if jit:
            value = compiled(fn, "local").local_stacked(rows, first)
        else:
            value = stack_outputs([fn(r) for r in range(first, first + rows)])
        for part in value if isinstance(value, tuple) else (value,):
            if hasattr(part, "shape") and len(part.shape):  # an array or a tensor
                self._shapes.made(part)
        return value

    def vmap(
        self,
        fn: Callable[..., Any],
        in_axes: int | None | Sequence[int | None] = 0,
        jit: bool = False,
    ) -> Callable[..., Any]:
        if not callable(fn):
            raise TypeError(f"vmap() takes a function, got {type(fn).__name__}")
        n = self._rows
        jitted = compiled(fn, "vmap") if jit else None

        def per_agent(*args: Any) -> Any:
            axes = check_axes(in_axes, len(args))
            if jitted is not None:
                return jitted.stacked(n, args, axes)
            for k, (a, ax) in enumerate(zip(args, axes, strict=True)):
                if ax == 0 and len(a) != n:
                    raise ValueError(
                        f"argument {k} has {len(a)} entries on its agent axis, expected {n}"
                    )
            return stack_outputs(
                [
                    fn(*[a[i] if ax == 0 else a for a, ax in zip(args, axes, strict=True)])
                    for i in range(n)
                ]
            )

        per_agent.__wrapped__ = fn  # type: ignore[attr-defined]
        per_agent.__doc__ = fn.__doc__
        return per_agent

    def is_main_process(self) -> bool:
        return True

    def global_view(self, x: Any) -> Any:
        if _torchops.takes(x):
            return _torchops.global_view(self, x)
        arr, kind = self._stacked(x, "global_view", averaging=False)
        return wrap_like(arr.copy(), kind)

    # -- helpers --------------------------------------------------------------------------
    def _held(self) -> str:
        """Say which agents this process stacks (for errors about the agent axis)."""
        return f"but the world has {self._n} agents; stack one value per agent (see fogsim.local)"

    def _stacked(
        self, x: Any, op: str, averaging: bool, adds: bool | None = None
    ) -> tuple[np.ndarray, Kind]:
        """Return the stacked value of ``x`` and how it came in, checked for ``op``.

        An op that ``adds`` values (default: one that averages) gets float16 as float32,
        to be rounded back once by ``wrap_like``.
        """
        if (
            type(x) is np.ndarray
            and (x.dtype is _FLOAT64 or x.dtype is _FLOAT32)
            and x.ndim
            and x.shape[0] == self._rows
        ):  # what most calls get: nothing below would change it
            self._shapes.check(x, x.shape, op)
            return x, NUMPY
        arr, kind = to_numpy(x, allow_cuda=self._host_staging)
        if averaging:
            _arrays.require_float(arr, op)
        else:
            _arrays.require_numbers(arr.dtype, op, sums=bool(adds))
        if arr.ndim == 0:  # a scalar is the same value on every agent
            arr = np.full(self._rows, arr[()])
        elif kind is _arrays.LITERAL:  # so is a list of numbers, as it is distributed
            arr = np.broadcast_to(arr, (self._rows, *arr.shape)).copy()
        elif arr.shape[0] != self._rows:
            raise ValueError(
                f"{op}: x has {arr.shape[0]} entries on its leading (agent) axis {self._held()}"
            )
        self._shapes.check(x, arr.shape, op)
        if averaging if adds is None else adds:
            arr, kind = _arrays.upcast_half(arr, kind)
        return arr, kind

    # -- ops ------------------------------------------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        if name is not None:
            _arrays.check_name(name)
        if average is not True and average is not False:
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        if type(x) is not np.ndarray and _torchops.takes(x):
            return _torchops.allreduce(self, x, average)
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        total = arr.sum(axis=0, dtype=arr.dtype)
        if arr.nbytes < MIN_POOLED_BYTES:
            out = np.empty(arr.shape, arr.dtype)
        else:
            out = self._pool.empty(arr.shape, arr.dtype)
        out[...] = total / self._n if average else total
        if self._cost is not None:
            self._charge("allreduce", arr)
        return out if kind is NUMPY else wrap_like(out, kind)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        _arrays.check_name(name)
        root = self.check_rank(root_rank, "root_rank")
        if _torchops.takes(x):
            return _torchops.broadcast(self, x, root)
        arr, kind = self._stacked(x, "broadcast", averaging=False)
        out = self._pool.empty(arr.shape, arr.dtype)
        out[...] = arr[root]
        self._charge("broadcast", arr)
        return wrap_like(out, kind)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        _arrays.check_name(name)
        if (
            isinstance(x, list | tuple)
            and len(x) == self._n
            and not _arrays.is_literal(x)
            and ragged(x)
        ):
            return allgather_ragged(x)
        if _torchops.takes(x):
            return _torchops.allgather(self, x)
        arr, kind = self._stacked(x, "allgather", averaging=False)
        per_agent = arr.reshape(self._n, -1, *arr.shape[2:]) if arr.ndim > 1 else arr[:, None]
        flat = per_agent.reshape(1, -1, *per_agent.shape[2:])
        out = self._pool.empty((self._n, *flat.shape[1:]), arr.dtype)
        out[...] = flat
        self._charge("allgather", arr)
        return wrap_like(out, kind)

    def neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_weights: Any = None,
        dst_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        if name is not None:
            _arrays.check_name(name)
        if enable_topo_check is not True and enable_topo_check is not False:
            raise TypeError("enable_topo_check must be a bool")
        if type(x) is not np.ndarray and _torchops.takes(x):
            t, dtype = _torchops.stacked(self, x, "neighbor_allreduce", averaging=True)
            plan = self._step_plan(self_weight, src_weights, dst_weights)
            self.sent.add_tensor(
                t, self.sent.step(plan, self.load_topology(), src_weights, dst_weights)
            )
            return _torchops.neighbor_allreduce(self, t, dtype, plan)
        # At n = 16 a step's sums cost less than a microsecond: what depends only on the
        # topology or the plan (its checked kernel, its out-degrees) was made once, and the
        # rest of this path is kept to what the call itself changes.
        arr, kind = self._stacked(x, "neighbor_allreduce", averaging=True)
        if self_weight is None and src_weights is None and dst_weights is None:
            plan, sends = self._static_plan, self._static_sends  # made by _on_topology
        else:
            plan = self._step_plan(self_weight, src_weights, dst_weights)
            sends = plan.sends  # a plan is found again only from arguments of its kind
            if sends is None:
                sends = self.sent.step(plan, self.load_topology(), src_weights, dst_weights)
                object.__setattr__(plan, "sends", sends)  # frozen: what is cached is derived
        self.sent.add(arr, sends)
        n = self._n
        flat = np.ascontiguousarray(arr if arr.ndim == 2 else arr.reshape(n, -1))
        out = np.empty(flat.shape, flat.dtype) if flat.nbytes < MIN_POOLED_BYTES else None
        if out is None:
            out = self._pool.empty(flat.shape, flat.dtype)
        if self._faults is not None:  # fogsim.faults: this step's W, changed
            out[...] = self._faults.apply(plan_matrix(plan, n), flat)
        elif flat.shape[1]:
            if _timeline.active is None:
                apply_plan(plan, flat, out)
            else:
                with _timeline.phase("COMPUTE_AVERAGE"):
                    apply_plan(plan, flat, out)
        if self._cost is not None:
            self._charge("neighbor_allreduce", arr, topology=plan_messages(plan, n))
        if kind is NUMPY and arr.ndim == 2:
            return out
        return wrap_like(out.reshape(arr.shape), kind)

    def bytes_sent(self, reset: bool = False) -> np.ndarray:
        """Return each stacked agent's bytes sent in the neighbor ops (int64 per agent)."""
        return self.sent.read(reset)

    def _step_plan(self, self_weight: Any, src_weights: Any, dst_weights: Any) -> Any:
        """Return this neighbor_allreduce's plan, its whole matrix checked when it is new.

        Weights passed again (the same Topology, or equal numbers, arrays and dicts) find
        the plan they made before (see :class:`StepPlans`), checked kernel and all.
        """
        plan = self._step_plans.find(self_weight, src_weights, dst_weights)
        if plan is None:
            # The simulator always matches senders with receivers: it needs the pairing to
            # build W anyway, so enable_topo_check=False cannot make it faster or unsafe.
            plan = resolve_plan(
                self._n,
                self.load_topology(),
                self._is_weighted,
                self._static_plan,
                self_weight,
                src_weights,
                dst_weights,
            )
            if plan is not self._static_plan:
                self._step_plans.keep(self_weight, src_weights, dst_weights, plan)
        if plan is not self._static_plan and not plan.fine and _weightcheck.enabled():
            same = self_weight is None and dst_weights is None and isinstance(src_weights, Topology)
            check_plan(plan, self._n, src_weights if same else None)  # Topology: checked once
        return plan

    # -- fault injection (fogsim.faults) --------------------------------------------------
    @property
    def faults(self) -> Any:
        """The :class:`fogsim.faults.Faults` applied to neighbor averaging, or None."""
        return self._faults

    def set_faults(self, faults: Any) -> None:
        """Apply ``faults`` to every neighbor_allreduce from now on (None: no faults)."""
        self._faults = faults

    # -- modelled communication time --------------------------------------------------------
    def attach_cost_model(self, meter: Any) -> None:
        """Charge every communication op to ``meter`` (None: stop); see fogsim.hierarchy."""
        self._cost = meter

    def _charge(self, op: str, arr: np.ndarray, **info: Any) -> None:
        """Record ``op`` on one agent's share of ``arr`` with the attached cost model.

        On a running timeline the op gets a ``COMMUNICATE`` phase lasting the modelled
        time, and the timeline's clock moves on by it.
        """
        meter = self._cost
        if meter is None:
            return
        seconds = meter.record(op, arr.nbytes // self._rows, size=self._n, **info)
        tl = _timeline.active
        if tl is not None:
            tl.modelled("COMMUNICATE", seconds, tl.now())

    # -- machine level --------------------------------------------------------------------
    def _machine_mean(self, arr: np.ndarray) -> np.ndarray:
        """Each machine's average, its agents summed in local-rank order, ``(M, ...)``."""
        k = self._local
        grid = arr.reshape(self._n // k, k, *arr.shape[1:])
        total = grid[:, 0].copy()
        for j in range(1, k):
            total += grid[:, j]
        return np.divide(total, k, out=total)

    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any = None,
        src_machine_weights: Any = None,
        dst_machine_weights: Any = None,
        enable_topo_check: bool = True,
        name: str | None = None,
    ) -> Any:
        _arrays.check_name(name)
        if not isinstance(enable_topo_check, bool):
            raise TypeError("enable_topo_check must be a bool")
        op = "hierarchical_neighbor_allreduce"
        if _torchops.takes(x):
            t, dtype = _torchops.stacked(self, x, op, averaging=True)
            plan = self._machine_step_plan(self_weight, src_machine_weights, dst_machine_weights)
            self.sent.add_tensor(
                t, self._machine_sends(plan, src_machine_weights, dst_machine_weights)
            )
            return _torchops.hierarchical_neighbor_allreduce(self, t, dtype, plan)
        arr, kind = self._stacked(x, op, averaging=True)
        machines, k = self._n // self._local, self._local
        plan = self._machine_step_plan(self_weight, src_machine_weights, dst_machine_weights)
        self.sent.add(arr, self._machine_sends(plan, src_machine_weights, dst_machine_weights))
        mean = np.ascontiguousarray(self._machine_mean(arr).reshape(machines, -1))
        mixed = np.empty_like(mean)
        if mean.shape[1]:
            apply_plan(plan, mean, mixed)
        out = self._pool.empty(arr.shape, arr.dtype)
        out.reshape(machines, k, -1)[...] = mixed[:, None, :]
        if self._cost is not None:
            self._charge(
                "hierarchical_neighbor_allreduce",
                arr,
                machine_topology=plan_messages(plan, machines),
            )
        return wrap_like(out, kind)

    def _machine_sends(self, plan: Any, src: Any, dst: Any) -> np.ndarray:
        topo = self.load_machine_topology()
        return self.sent.machine_step(plan, topo, self._local, src, dst)

    def _machine_step_plan(self, self_weight: Any, src: Any, dst: Any) -> Any:
        """Return a hierarchical step's plan over machines (local rank 0's arguments)."""
        topo = self.load_machine_topology()
        machines, k = self._n // self._local, self._local
        if self._machine_plan is None or self._machine_plan_of is not topo:
            self._machine_plan = static_plan(topo, self._machine_weighted)
            self._machine_plan_of = topo
        args = (
            _roots(self_weight, self._n, k, "self_weight"),
            _roots(src, self._n, k, "src_machine_weights"),
            _roots(dst, self._n, k, "dst_machine_weights"),
        )
        with machine_words():
            return resolve_plan(machines, topo, self._machine_weighted, self._machine_plan, *args)

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        if _torchops.takes(x):
            return _torchops.local_allreduce(self, x, average)
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        k = self._local
        grid = arr.reshape(self._n // k, k, *arr.shape[1:])
        total = grid.sum(axis=1, dtype=arr.dtype)
        out = self._pool.empty(arr.shape, arr.dtype)
        out.reshape(grid.shape)[...] = (total / k if average else total)[:, None]
        return wrap_like(out, kind)

    def decomposed_allreduce(self, x, average, name, factors):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        factors = (
            default_factors(self._n, self._local)
            if factors is None
            else check_factors(factors, self._n)
        )
        arr, kind = self._stacked(x, "allreduce", averaging=average, adds=True)
        total = staged_sum(arr, factors)
        out = self._pool.empty(arr.shape, arr.dtype)
        out[...] = total / self._n if average else total
        self._charge("allreduce", arr, algorithm="decomposed", factors=factors)
        return wrap_like(out, kind)

    def neighbor_allgather(
        self, x: Any, src_ranks: Any = None, dst_ranks: Any = None, name: str | None = None
    ) -> Any:
        _arrays.check_name(name)
        if _torchops.takes(x):
            t = _torchops.stacked(self, x, "neighbor_allgather", averaging=False)[0]
            senders = self._senders(src_ranks, dst_ranks)
            self.sent.add_tensor(t, self.sent.gather(senders[1], self._n))
            return _torchops.neighbor_allgather(self, t, *senders)
        arr, kind = self._stacked(x, "neighbor_allgather", averaging=False)
        indptr, indices = self._senders(src_ranks, dst_ranks)
        self.sent.add(arr, self.sent.gather(indices, self._n))
        per_agent = arr[:, None] if arr.ndim == 1 else arr
        gathered = per_agent[indices]  # (nnz, k, ...)
        degrees = np.diff(indptr)
        if degrees.size and np.all(degrees == degrees[0]):
            out = gathered.reshape(self._n, -1, *per_agent.shape[2:])
            return wrap_like(out, kind)
        chunks = np.split(gathered, indptr[1:-1])
        return [wrap_like(c.reshape(-1, *per_agent.shape[2:]), kind) for c in chunks]

    def _senders(self, src_ranks: Any, dst_ranks: Any) -> tuple[np.ndarray, np.ndarray]:
        """Return CSR ``(indptr, indices)``: whom each agent's neighbor_allgather hears."""
        if (src_ranks is None) != (dst_ranks is None):
            raise ValueError("neighbor_allgather needs both src_ranks and dst_ranks, or neither")
        if src_ranks is None:
            indptr, indices, _ = self.load_topology().offdiag_csr()
            return indptr, indices
        recv = rank_rows(src_ranks, self._n, "src_ranks")
        send = transpose(*rank_rows(dst_ranks, self._n, "dst_ranks"), self._n)
        check_same_pattern(recv, send, self._n, names=("src_ranks", "dst_ranks"))
        return recv[0], recv[1]

    def barrier(self) -> None:
        """Deliver the window messages in flight; every agent acts until the round ends.

        Simulated agents never wait; a barrier makes the modelled asynchronous ones catch up
        (see :func:`fogsim.set_asynchrony`).
        """
        self.windows.barrier()

    # -- window inspection, modelled asynchrony -------------------------------------------
    def window(self, name: str) -> SimWindow:
        """Return the window ``name``'s state, for every agent (read-only views)."""
        return self.windows.window(name)

    def set_asynchrony(self, activation: str = "all", **options: Any) -> None:
        """Model asynchrony from now on (see :func:`fogsim.set_asynchrony`).

        Without a seed, the world's (``init(seed=...)``) is used, else a fixed default.
        """
        if options.get("seed") is None:
            options["seed"] = self._world_seed()
        self.windows.set_asynchrony(activation, **options)

    def _world_seed(self) -> int | None:
        from ... import _context

        ctx = _context.peek()
        return ctx.seed if ctx is not None and ctx.backend is self else None


def _roots(value: Any, n: int, k: int, argname: str) -> Any:
    """The machine-level argument: local rank 0's entries of a per-agent one.

    A number or a matrix (one step's machine weights) is passed as it is.
    """
    if value is None or k == 1 or isinstance(value, numbers.Real) or is_matrix(value):
        return value
    if _arrays.is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray | list | tuple):
        if len(value) != n:
            raise ValueError(
                f"{argname} has {len(value)} entries; in simulation give one per agent ({n}), "
                "stacked as fogsim.local does (the entries of each machine's local rank 0 "
                "are used)"
            )
        if isinstance(value, np.ndarray):
            return np.ascontiguousarray(value[::k])
        return list(value[::k])
    return value
