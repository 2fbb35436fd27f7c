"""What the parts of a simulated world share: its agents, plans, buffers and meters.

A simulated world (:class:`~._backend.SimBackend`, or the sharded
:class:`~._sharded.ShardedSimBackend`) makes one :class:`SimState` and gives it to each of
its parts (collectives, neighbor ops, machine ops), which read it, never the world. The
state holds what depends only on the world, its topology or a plan, made once there and
not per call: the stacked rows, the static plans and their out-degrees, the plans of recent
per-call weights, the buffer pool, the byte counter, the shape guard, and the meters that
ops charge (a cost model, injected faults).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from ... import _arrays, _weightcheck
from ... import timeline as _timeline
from ..._arrays import NUMPY, Kind, to_numpy
from ...topology import Topology
from .._weights import is_matrix, machine_words
from ._plan import (
    Plan,
    PlanCache,
    check_plan,
    check_same_pattern,
    rank_rows,
    resolve_plan,
    static_plan,
    transpose,
)
from ._pool import BufferPool
from ._sent import SentBytes
from ._shapes import ShapeGuard
from ._stepplans import StepPlans

__all__ = ["CostMeter", "FaultModel", "SimState", "positive_int"]

_FLOAT64, _FLOAT32 = np.dtype(np.float64), np.dtype(np.float32)


class CostMeter(Protocol):
    """What the simulator charges its communication ops to (see
    :class:`fogsim.hierarchy.CostMeter`)."""

    def record(self, op: str, nbytes: float, **info: Any) -> float: ...


class FaultModel(Protocol):
    """What changes a step's weight matrix (see :class:`fogsim.faults.Faults`)."""

    def apply(self, W: sp.csr_array, x: np.ndarray) -> np.ndarray: ...


def positive_int(value: Any, argname: str) -> int:
    """Return ``value`` as an int >= 1, or raise naming ``argname``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{argname} must be >= 1, got {value}")
    return int(value)


class SimState:
    """The state a simulated world's parts share (see the module docstring).

    ``n`` agents, ``local`` of them per machine; this process stacks the ``rows`` agents
    ``first .. first + rows - 1`` (all of them, or one block when sharded). ``held`` ends
    the errors about the agent axis (what a stacked value must hold); ``host_staging``:
    whether tensors on other devices may be copied to the host (the sharded simulator's
    collectives), else they are combined on their device or refused. ``machine_topology``
    returns the machine topology in use (the world makes the default on first use).

    ``static_plan`` and ``static_sends`` exist once :meth:`on_topology` has run.
    """

    __slots__ = (
        "n",
        "local",
        "rows",
        "first",
        "held",
        "host_staging",
        "pool",
        "sent",
        "shapes",
        "step_plans",
        "device_plans",
        "topology",
        "is_weighted",
        "static_plan",
        "static_sends",
        "machine_topology",
        "machine_weighted",
        "_machine_plan",
        "_machine_plan_of",
        "cost",
        "faults",
    )

    topology: Topology
    static_plan: Plan
    static_sends: np.ndarray

    def __init__(
        self,
        n: int,
        local: int,
        rows: int,
        first: int,
        *,
        held: str,
        host_staging: bool,
        machine_topology: Callable[[], Topology],
    ) -> None:
        self.n, self.local, self.rows, self.first = n, local, rows, first
        self.held = held
        self.host_staging = host_staging
        self.pool = BufferPool()
        #: bytes each stacked agent sent in the neighbor ops (see :func:`fogsim.bytes_sent`)
        self.sent = SentBytes(rows, first)
        self.shapes = ShapeGuard(rows)  # per-agent values that grew an agent axis
        self.step_plans = StepPlans()  # the plans of recent per-call weights
        self.device_plans = PlanCache()  # plans' arrays on tensors' devices
        self.is_weighted = False
        self.machine_topology = machine_topology
        self.machine_weighted = False
        self._machine_plan: Plan | None = None  # the static plan of _machine_plan_of
        self._machine_plan_of: Topology | None = None
        #: the meter every communication op is charged to, or None
        self.cost: CostMeter | None = None
        #: the faults applied to neighbor_allreduce, or None
        self.faults: FaultModel | None = None

    def on_topology(self, topology: Topology, is_weighted: bool) -> None:
        """Make what the static ``topology`` gives every step: its plan, its out-degrees."""
        self.topology, self.is_weighted = topology, is_weighted
        self.static_plan = static_plan(topology, is_weighted)
        self.static_sends = self.sent.static(topology)  # its out-degrees, for bytes_sent
        self.step_plans.clear()  # per-call dicts were checked against the old topology

    def on_machine_topology(self, topology: Topology, is_weighted: bool) -> None:
        """Make the static plan of the machine ``topology``."""
        self.machine_weighted = is_weighted
        self._machine_plan = static_plan(topology, is_weighted)
        self._machine_plan_of = topology

    def mirror(self, other: SimState) -> None:
        """Take ``other``'s topologies (agents' and machines'), where they differ from
        this state's, and its cost meter and faults (a whole world beside a block)."""
        topology = getattr(other, "topology", None)
        if topology is not None and getattr(self, "topology", None) is not topology:
            self.on_topology(topology, other.is_weighted)
        machines = other._machine_plan_of
        if machines is not None and (
            self._machine_plan_of is not machines or self.machine_weighted != other.machine_weighted
        ):
            self.on_machine_topology(machines, other.machine_weighted)
        self.cost, self.faults = other.cost, other.faults

    def close(self) -> None:
        """Forget the pooled buffers and the plans' device copies."""
        self.pool.clear()
        self.device_plans.clear()

    # -- values in --------------------------------------------------------------------------
    def stacked(
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
            and x.shape[0] == self.rows
        ):  # what most calls get: nothing below would change it
            self.shapes.check(x, x.shape, op)
            return x, NUMPY
        arr, kind = to_numpy(x, allow_cuda=self.host_staging)
        if averaging:
            _arrays.require_float(arr, op)
        else:
            _arrays.require_numbers(arr.dtype, op, sums=bool(adds))
        if arr.ndim == 0:  # a scalar is the same value on every agent
            arr = np.full(self.rows, arr[()])
        elif kind is _arrays.LITERAL:  # so is a list of numbers, as it is distributed
            arr = np.broadcast_to(arr, (self.rows, *arr.shape)).copy()
        elif arr.shape[0] != self.rows:
            raise ValueError(
                f"{op}: x has {arr.shape[0]} entries on its leading (agent) axis {self.held}"
            )
        self.shapes.check(x, arr.shape, op)
        if averaging if adds is None else adds:
            arr, kind = _arrays.upcast_half(arr, kind)
        return arr, kind

    # -- modelled communication time ----------------------------------------------------------
    def charge(self, op: str, arr: np.ndarray, **info: Any) -> None:
        """Record ``op`` on one agent's share of ``arr`` with the attached cost model.

        On a running timeline the op gets a ``COMMUNICATE`` phase lasting the modelled
        time, and the timeline's clock moves on by it.
        """
        meter = self.cost
        if meter is None:
            return
        seconds = meter.record(op, arr.nbytes // self.rows, size=self.n, **info)
        tl = _timeline.active
        if tl is not None:
            tl.modelled("COMMUNICATE", seconds, tl.now())

    # -- plans --------------------------------------------------------------------------------
    def step_plan(self, self_weight: Any, src_weights: Any, dst_weights: Any) -> Plan:
        """Return a neighbor_allreduce's plan, its whole matrix checked when it is new.

        Weights passed again (the same Topology, or equal numbers, arrays and dicts) find
        the plan they made before (see :class:`StepPlans`), checked kernel and all.
        """
        plan: Plan | None = self.step_plans.find(self_weight, src_weights, dst_weights)
        static = self.static_plan
        if plan is None:
            # The simulator always matches senders with receivers: it needs the pairing to
            # build W anyway, so enable_topo_check=False cannot make it faster or unsafe.
            plan = resolve_plan(
                self.n,
                self.topology,
                self.is_weighted,
                static,
                self_weight,
                src_weights,
                dst_weights,
            )
            if plan is not static:
                self.step_plans.keep(self_weight, src_weights, dst_weights, plan)
        if plan is not static and not plan.fine and _weightcheck.enabled():
            same = self_weight is None and dst_weights is None and isinstance(src_weights, Topology)
            check_plan(plan, self.n, src_weights if same else None)  # Topology: checked once
        return plan

    def step_sends(self, plan: Plan, src_weights: Any, dst_weights: Any) -> np.ndarray:
        """How many agents each agent sends to in a step with ``plan`` (see SentBytes.step)."""
        return self.sent.step(plan, self.topology, src_weights, dst_weights)

    def machine_step_plan(self, self_weight: Any, src: Any, dst: Any) -> Plan:
        """Return a hierarchical step's plan over machines (local rank 0's arguments)."""
        topo = self.machine_topology()
        machines, k = self.n // self.local, self.local
        plan = self._machine_plan
        if plan is None or self._machine_plan_of is not topo:
            plan = self._machine_plan = static_plan(topo, self.machine_weighted)
            self._machine_plan_of = topo
        args = (
            _roots(self_weight, self.n, k, "self_weight"),
            _roots(src, self.n, k, "src_machine_weights"),
            _roots(dst, self.n, k, "dst_machine_weights"),
        )
        with machine_words():
            return resolve_plan(machines, topo, self.machine_weighted, plan, *args)

    def machine_sends(self, plan: Plan, src: Any, dst: Any) -> np.ndarray:
        """How many agents each agent sends to in a hierarchical step with ``plan``."""
        return self.sent.machine_step(plan, self.machine_topology(), self.local, src, dst)

    def senders(self, src_ranks: Any, dst_ranks: Any) -> tuple[np.ndarray, np.ndarray]:
        """Return CSR ``(indptr, indices)``: whom each agent's neighbor_allgather hears."""
        if (src_ranks is None) != (dst_ranks is None):
            raise ValueError("neighbor_allgather needs both src_ranks and dst_ranks, or neither")
        n = self.n
        if src_ranks is None:
            indptr, indices, _ = self.topology.offdiag_csr()
            return indptr, indices
        recv = rank_rows(src_ranks, n, "src_ranks")
        send = transpose(*rank_rows(dst_ranks, n, "dst_ranks"), n)
        check_same_pattern(recv, send, n, names=("src_ranks", "dst_ranks"))
        return recv[0], recv[1]


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
