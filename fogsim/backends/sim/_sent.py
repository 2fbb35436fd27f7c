"""The bytes each simulated agent sends in the neighbor ops: what the runtimes count.

A runtime rank counts the bytes of the values it hands to its transport, once per
destination (see ``fogsim.bytes_sent``). The simulator moves nothing, so it counts what
each agent would send: its value's bytes, in the dtype the runtimes put on the wire, times
the number of agents it sends to in that step. Whom a runtime rank sends to follows its
plan: the static topology's out-neighbors for calls without ``dst_weights`` and without a
weight matrix (however many of them the receivers then weigh), else the step's own
pattern (a matrix's off-diagonal columns, or the ``dst_weights`` each agent names).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...topology import Topology
from .._weights import is_matrix
from ._plan import CircPlan, Plan

__all__ = ["SentBytes", "follows_topology", "plan_degrees", "wire_itemsize"]


def follows_topology(src_weights: Any, dst_weights: Any) -> bool:
    """Whether a runtime rank sends a ``neighbor_allreduce`` to the static topology's
    out-neighbors (its rule in ``_runtime.plan.rank_plan``), not to the step's pattern."""
    if dst_weights is not None:
        return False
    return isinstance(src_weights, list | tuple) or not is_matrix(src_weights)  # dicts: cheaply


def wire_itemsize(dtype: Any, itemsize: int) -> int:
    """The bytes per element the runtimes send for a torch ``dtype``: bfloat16, which
    numpy lacks, travels as float32 on MPI and torch alike."""
    return 4 if str(dtype) == "torch.bfloat16" else itemsize


def _degrees(indices: np.ndarray, n: int) -> np.ndarray:
    """Out-degrees (int64) of a pattern given by its CSR column ``indices`` (senders)."""
    return np.bincount(indices, minlength=n).astype(np.int64, copy=False)


#: The out-degree 1 of every agent: what steps whose agents all send to as many count under.
_ONE = np.array(1, np.int64)
_ONE.flags.writeable = False


class SentBytes:
    """Cumulative bytes sent by the agents ``first .. first + rows - 1`` (int64 per agent).

    A step's count is one Python integer added to what earlier steps with the same
    out-degree array sent (a step's degrees are its plan's or its topology's, made once);
    the per-agent counts are formed when read (:attr:`counts`), so a step does no pass over
    the agents.
    """

    __slots__ = ("_counts", "_first", "_static", "_pending", "_lock")

    def __init__(self, rows: int, first: int = 0) -> None:
        self._counts = np.zeros(rows, dtype=np.int64)
        self._first = first
        # out-degrees of the topologies in use (agents', machines'), by identity
        self._static: dict[int, tuple[Topology, np.ndarray]] = {}
        # id(degrees) -> [degrees, bytes per agent sent to each of them since the last read]
        self._pending: dict[int, list[Any]] = {}
        self._lock = threading.Lock()  # SPMD agents may read their counts side by side

    @property
    def counts(self) -> np.ndarray:
        """The per-agent counts (int64), every step so far included; writable."""
        if self._pending:
            self._flush()
        return self._counts

    def static(self, topo: Topology) -> np.ndarray:
        """The out-degrees of ``topo``, remembered while it is in use."""
        hit = self._static.get(id(topo))
        if hit is None or hit[0] is not topo:
            if len(self._static) >= 4:
                self._static.clear()
            hit = self._static[id(topo)] = (topo, _degrees(topo.offdiag_csr()[1], topo.size))
        return hit[1]

    def step(self, plan: Plan, topo: Topology, src_weights: Any, dst_weights: Any) -> np.ndarray:
        """How many agents each agent sends to in one ``neighbor_allreduce`` step over
        ``topo`` (the agents', or the machines' for a hierarchical step): one per agent, or
        0-d where every agent sends to as many (a circulant step: no pass over agents)."""
        if follows_topology(src_weights, dst_weights):
            return self.static(topo)
        return plan_degrees(plan, topo.size)

    def machine_step(
        self, plan: Plan, topo: Topology, local: int, src: Any, dst: Any
    ) -> np.ndarray:
        """:meth:`step` of a hierarchical call, per agent: a machine's local rank 0 sends
        its machine's average to the other machines' local ranks 0 (the averaging inside a
        machine is not counted)."""
        per_machine = self.step(plan, topo, src, dst)
        degrees = np.zeros(topo.size * local, dtype=np.int64)
        degrees[::local] = per_machine
        return degrees

    @staticmethod
    def gather(indices: np.ndarray, n: int) -> np.ndarray:
        """The out-degrees of a ``neighbor_allgather`` pattern (CSR ``indices``, senders)."""
        return _degrees(indices, n)

    def add(self, arr: np.ndarray, degrees: np.ndarray) -> None:
        """Count one step: each agent's row of the stacked ``arr`` to ``degrees`` agents."""
        rows = len(arr)
        if rows and arr.nbytes:
            entry = self._pending.get(id(degrees))
            if entry is not None and entry[0] is degrees:  # a step like the last ones
                entry[1] += arr.nbytes // rows
            else:
                self._add(arr.nbytes // rows, degrees)

    def add_tensor(self, t: Any, degrees: np.ndarray) -> None:
        """:meth:`add` for a stacked tensor, in the dtype the runtimes send."""
        if len(t) and t.numel():
            self._add(t.numel() // len(t) * wire_itemsize(t.dtype, t.element_size()), degrees)

    def _add(self, per_agent: int, degrees: np.ndarray) -> None:
        if not degrees.ndim:  # every agent sends to as many: one running total for all
            per_agent, degrees = per_agent * int(degrees), _ONE
        entry = self._pending.get(id(degrees))
        if entry is not None and entry[0] is degrees:
            entry[1] += per_agent
            return
        if len(self._pending) >= 8:  # steps with fresh degrees each: formed every few
            self._flush()
        self._pending[id(degrees)] = [degrees, per_agent]

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            for degrees, per_agent in pending.values():
                if degrees.ndim:  # else one out-degree for every agent
                    degrees = degrees[self._first : self._first + len(self._counts)]
                self._counts += per_agent * degrees

    def read(self, reset: bool) -> np.ndarray:
        """Return a copy of the counts; ``reset``: start them again from zero."""
        counts = self.counts
        out = counts.copy()
        if reset:
            counts[...] = 0
        return out


def plan_degrees(plan: Plan, n: int) -> np.ndarray:
    """The out-degrees of a plan's own pattern, made once per plan: one per agent, or one
    0-d count for a circulant plan (no entry of a circulant form is zero: every agent sends
    to each offset)."""
    degrees = plan.degrees
    if degrees is None:
        if isinstance(plan, CircPlan):
            degrees = np.array(len(plan.form.offsets), np.int64)
        else:
            degrees = _degrees(plan.indices, n)
        object.__setattr__(plan, "degrees", degrees)  # frozen: what is cached is derived
    return degrees
