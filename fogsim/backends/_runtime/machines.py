"""The machine-level ops of the distributed runtimes, written once over a :class:`MachineLink`.

Machine m holds ranks ``m * local_size .. (m + 1) * local_size - 1``. The ops:

* ``hierarchical_neighbor_allreduce``: the machine's values are gathered on its local
  rank 0 and averaged there; the local ranks 0 exchange the averages in a second world of
  one process per machine (made on the first hierarchical call) with the machine
  topology, where a machine is a rank, so the machine-level arguments get the rank-level
  checks and agreement of ``neighbor_allreduce`` and their errors name machines. Each
  local rank 0 then tells its machine the outcome (an error report, or the result), so an
  error raises on every rank instead of leaving one waiting;
* the machine-local allreduce (``allreduce(is_hierarchical_local=True)``);
* the decomposed allreduce: reduce-scatter stages, then all-gather stages in reverse
  order, stage ``s`` among the ranks that differ only in digit ``s`` of their rank written
  in the factors' mixed radix (see :mod:`fogsim.backends._decomposed`).

The additions are those of the simulator, in the same order (rows ``0 .. k-1`` one at a
time, then one division), so every runtime gives the simulator's bits. How values move
inside a machine and within a stage is the runtime's :class:`MachineLink`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..._arrays import check_name
from ...topology import Topology
from .._base import Backend
from .._decomposed import check_factors, default_factors, digits, piece_bounds
from .._layout import layout_error
from .._parts import Machines
from .._weights import exchange_between_machines
from .agree import LocalError
from .datapath import Value
from .transport import Transport

__all__ = ["MachineLink", "MachineOps", "Report", "sum_rows"]

V = TypeVar("V", bound=Value)
V_contra = TypeVar("V_contra", bound=Value, contravariant=True)

#: A local rank 0's report of the error the exchange among machines raised there:
#: the exception's type name and its message.
Report = tuple[str, str]


def sum_rows(rows: Any, k: int) -> Any:
    """``rows[0] + rows[1] + ... + rows[k-1]``, one addition at a time (numpy or torch)."""
    total = rows[0].copy() if isinstance(rows, np.ndarray) else rows[0].clone()
    for j in range(1, k):
        total += rows[j]
    return total


class MachineLink(Protocol[V_contra]):
    """What a runtime supplies to :class:`MachineOps`: how values move among the ranks of
    a machine and of a decomposed allreduce's stage, and how the machines' world is made.

    Every method but :meth:`new_world` is collective over the machine (or the stage); the
    values are the runtime's (:class:`~.datapath.Value`), results numpy arrays where
    the value has a numpy view (``value.arr``), else on the value's device.
    """

    local_size: int  # processes on this rank's machine
    local_rank: int  # this rank's place among them

    def is_root(self) -> bool:
        """Return whether this is its machine's local rank 0 (collective over the job on
        the first call, which makes what the local ranks 0 talk over)."""
        ...

    def new_world(self) -> Backend:
        """Return the local ranks 0 as one world, one agent per machine (collective over
        those ranks; called once, after :meth:`is_root`)."""
        ...

    def gather(self, value: V_contra) -> Any:
        """Local rank 0: the machine's values stacked in local-rank order; others: None."""
        ...

    def tell(self, report: Report | None) -> Report | None:
        """Return local rank 0's ``report`` (None: none) on every rank of the machine."""
        ...

    def broadcast(self, value: V_contra, out: Any) -> Any:
        """Return local rank 0's ``out`` on every rank of the machine (others pass None)."""
        ...

    def local_sum(self, value: V_contra) -> Any:
        """Return the sum of the machine's values (a new buffer) on every rank of it."""
        ...

    def flat(self, value: V_contra) -> tuple[Any, Any]:
        """Return a flat copy of ``value``: (what moves, what adds), one memory."""
        ...

    def stages(self, factors: tuple[int, ...]) -> list[Any]:
        """Return what stage ``s`` of the decomposition by ``factors`` moves over."""
        ...

    def reduce_scatter(
        self, stage: Any, value: V_contra, flat: Any, bounds: np.ndarray, d: int
    ) -> Any:
        """Send piece ``j`` (``bounds[j]:bounds[j + 1]`` of ``flat``) to the stage's member
        ``j``; return the members' pieces ``d`` (this rank's place), stacked by member."""
        ...

    def all_gather(
        self, stage: Any, value: V_contra, flat: Any, bounds: np.ndarray, d: int
    ) -> None:
        """Send piece ``d`` of ``flat`` to every member; receive their pieces in place."""
        ...

    def close(self) -> None:
        """Free what the link made (the machines' world, which owns the rest, apart)."""
        ...


def start_machine_op(
    op: str, name: Any, check: Callable[[str], None], enable_topo_check: Any, average: Any
) -> None:
    """The checks a machine-level op starts with (the same outcome on every rank)."""
    check_name(name)
    if not isinstance(enable_topo_check, bool):
        raise TypeError("enable_topo_check must be a bool")
    if not isinstance(average, bool):
        raise TypeError(f"average must be a bool, got {type(average).__name__}")
    check(op)


class MachineOps(Machines, Generic[V]):
    """The machines part of a distributed runtime (see the module docstring).

    Built from what it needs: the world's ``transport`` (the machine layout is gathered on
    it), the runtime's ``link``, ``checked`` (the collectives part's conversion and
    agreement, ``RuntimeCollectives.checked``, of values ``V``), ``flush``
    (send the queued neighbor calls), and readers of the machine topology in use. Its
    construction is collective (the layout is checked on every rank).
    """

    def __init__(
        self,
        transport: Transport,
        link: MachineLink[V],
        checked: Callable[..., V],
        flush: Callable[[], None],
        machine_topology: Callable[[], Topology],
        machine_weighted: Callable[[], bool],
    ) -> None:
        self._link, self._checked, self._flush = link, checked, flush
        self._rank, self._n = transport.rank, transport.size
        self._topology, self._weighted = machine_topology, machine_weighted
        self.local_size, self.local_rank = link.local_size, link.local_rank
        layout = transport.allgather_json([self.local_size, self.local_rank])
        # why the machine-level ops cannot run here, or None
        self.error = layout_error([(int(k), int(lr)) for k, lr in layout])
        self._world: Backend | None = None  # the local ranks 0 as one world (on use)

    def check(self, op: str) -> None:
        """Raise a ValueError naming ``op`` when the machines are not alike."""
        if self.error is not None:
            raise ValueError(f"{op}: {self.error}")

    def bytes_sent(self, reset: bool) -> int:
        """The bytes this rank sent in the machines' world (hierarchical steps)."""
        world = self._world
        return 0 if world is None else int(world.bytes_sent(reset))

    def close(self) -> None:
        """Close the machines' world, then what the link made."""
        world, self._world = self._world, None
        if world is not None:
            world.close()
        self._link.close()

    # The machine topology needs nothing when it is set: the machines' world re-wires on
    # its next op.
    def _machine_world(self) -> Backend:
        """The local ranks 0, one per machine, as one world with the machine topology.

        Collective over those ranks only (built on first use).
        """
        topo, weighted = self._topology(), self._weighted()
        if self._world is None:
            self._world = self._link.new_world()
        world = self._world
        if world._topology is not topo or world.is_topology_weighted() != weighted:
            world.set_topology(topo, weighted)
        return world

    # -- the ops --------------------------------------------------------------------------
    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_machine_weights: Any,
        dst_machine_weights: Any,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any:
        """Gather and average on local rank 0; exchange among machines; broadcast back."""
        op = "hierarchical_neighbor_allreduce"
        start_machine_op(op, name, self.check, enable_topo_check, True)
        self._flush()
        value = self._checked(op, x, averaging=True, name=name)
        link, k = self._link, self.local_size
        root = link.is_root()
        mean = value.data if value.arr is None else value.arr
        if k > 1:
            rows = link.gather(value)
            if rows is not None:  # one process per machine: its value is the average
                mean = sum_rows(rows, k)
                mean /= k
        out, error = None, None
        if root:  # every machine's local rank 0 runs the exchange, then tells its machine
            out, error = exchange_between_machines(
                self._machine_world(),
                mean,
                self_weight,
                src_machine_weights,
                dst_machine_weights,
                enable_topo_check,
            )
        if k == 1:
            if error is not None:
                raise error
            return value.wrap(out)
        report = link.tell(None if error is None else (type(error).__name__, str(error)))
        if report is not None:
            raise (TypeError if report[0] == "TypeError" else ValueError)(report[1])
        return value.wrap(link.broadcast(value, out))

    def local_allreduce(self, x: Any, average: bool, name: str | None) -> Any:
        """Return the average (or sum) of ``x`` over this agent's machine."""
        op = "allreduce(is_hierarchical_local=True)"
        start_machine_op(op, name, self.check, True, average)
        self._flush()
        value = self._checked("allreduce-local", x, averaging=average, adds=True, name=name)
        out = self._link.local_sum(value)
        if average:
            out /= self.local_size
        return value.wrap(out)

    def _decomposition(self, factors: Any) -> tuple[tuple[int, ...] | None, LocalError | None]:
        """Return (factors, None) for the decomposed allreduce, or (None, the error)."""
        try:
            if factors is None:
                self.check("allreduce(algorithm='decomposed')")
                return default_factors(self._n, self.local_size), None
            return check_factors(factors, self._n), None
        except (TypeError, ValueError) as exc:
            return None, LocalError(exc)

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        """Return the allreduce computed in reduce-scatter/all-gather stages."""
        check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        factors, error = self._decomposition(factors)
        value = self._checked(
            "allreduce-decomposed",
            x,
            averaging=average,
            adds=True,
            extra=(factors,),
            error=error,
            name=name,
        )
        assert factors is not None  # the agreement raised the error on every rank
        link = self._link
        flat, buf = link.flat(value)
        lo, hi, done = 0, buf.shape[0], []
        for stage, p, d in self._stages(factors):  # reduce-scatter
            bounds = piece_bounds(lo, hi, p)
            rows = link.reduce_scatter(stage, value, flat, bounds, d)
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            buf[lo:hi] = sum_rows(rows, p)
            done.append((stage, bounds, d))
        for stage, bounds, d in reversed(done):  # all-gather
            link.all_gather(stage, value, flat, bounds, d)
        if average:
            buf /= self._n
        return value.wrap(buf.reshape(value.shape))

    def _stages(self, factors: tuple[int, ...]) -> Iterator[tuple[Any, int, int]]:
        """(stage, its size, this rank's place in it), for each stage."""
        stages = self._link.stages(factors)
        return zip(stages, factors, digits(self._rank, factors), strict=True)
