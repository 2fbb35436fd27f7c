"""The simulator's neighbor ops: ``neighbor_allreduce`` and ``neighbor_allgather``.

A neighbor allreduce is one weight-matrix product ``X <- W X`` run by the kernels of
:mod:`fogsim._core` through the step's plan (no Python loop over agents on the per-step
path); tensors on a device are combined there (``_torchops``). Both ops charge the
attached cost meter (a clock: :mod:`fogsim.clock`) with their messages ``j -> i``, each
one agent's value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ... import _arrays
from ... import timeline as _timeline
from ..._arrays import NUMPY, Kind, wrap_like
from ...topology import Topology, as_topology
from .._parts import Neighbors
from .._stacking import AgentRanks, AgentSelfWeight, AgentValue, AgentWeights, CallName
from . import _torchops
from ._plan import apply_plan, plan_matrix, plan_messages
from ._pool import MIN_POOLED_BYTES
from ._state import SimState

__all__ = ["SimNeighbors", "by_receiver"]


def by_receiver(
    gathered: np.ndarray, indptr: np.ndarray, degrees: np.ndarray, rows: int, kind: Kind
) -> Any:
    """Return ``gathered`` (the senders' values, receiver by receiver, as CSR ``indptr``
    over the ``rows`` receivers says) as neighbor_allgather does: one stacked value when
    every agent hears as many agents (``degrees``: all agents' in-degrees), else a list."""
    tail = gathered.shape[2:]
    if degrees.size and np.all(degrees == degrees[0]):
        return wrap_like(gathered.reshape(rows, -1, *tail), kind)
    chunks = np.split(gathered, indptr[1:-1])
    return [wrap_like(c.reshape(-1, *tail), kind) for c in chunks]


class SimNeighbors(Neighbors):
    """The neighbor ops of all ``n`` agents stacked in this process (see the module
    docstring)."""

    def __init__(self, state: SimState) -> None:
        self._state = state
        # bound once: neighbor_allreduce is called in tight loops
        self._stacked = state.stacked
        self._sent_add = state.sent.add
        self._pool_empty = state.pool.empty
        self._n = state.n
        self._gathers: dict[tuple[bytes, bytes], Topology] = {}  # see gather_messages

    def neighbor_allreduce(
        self,
        x: AgentValue,
        self_weight: AgentSelfWeight = None,
        src_weights: AgentWeights = None,
        dst_weights: AgentWeights = None,
        enable_topo_check: bool = True,
        name: CallName = None,
    ) -> Any:
        if name is not None:
            _arrays.check_name(name)
        if enable_topo_check is not True and enable_topo_check is not False:
            raise TypeError("enable_topo_check must be a bool")
        st = self._state
        if type(x) is not np.ndarray and _torchops.takes(x):
            t, dtype = _torchops.stacked(st, x, "neighbor_allreduce", averaging=True)
            plan = st.step_plan(self_weight, src_weights, dst_weights)
            st.sent.add_tensor(t, st.step_sends(plan, src_weights, dst_weights))
            return _torchops.neighbor_allreduce(st, t, dtype, plan)
        # At n = 16 a step's sums cost less than a microsecond: what depends only on the
        # topology or the plan (its checked kernel, its out-degrees) was made once, and the
        # rest of this path is kept to what the call itself changes.
        arr, kind = self._stacked(x, "neighbor_allreduce", averaging=True)
        if self_weight is None and src_weights is None and dst_weights is None:
            plan, sends = st.static_plan, st.static_sends  # made by SimState.on_topology
        else:
            plan = st.step_plan(self_weight, src_weights, dst_weights)
            found = plan.sends  # a plan is found again only from arguments of its kind
            if found is None:
                found = st.step_sends(plan, src_weights, dst_weights)
                object.__setattr__(plan, "sends", found)  # frozen: what is cached is derived
            sends = found
        self._sent_add(arr, sends)
        n = self._n
        flat = np.ascontiguousarray(arr if arr.ndim == 2 else arr.reshape(n, -1))
        if flat.nbytes < MIN_POOLED_BYTES:
            out = np.empty(flat.shape, flat.dtype)
        else:
            out = self._pool_empty(flat.shape, flat.dtype)
        if st.faults is not None:  # fogsim.faults: this step's W, changed
            out[...] = st.faults.apply(plan_matrix(plan, n), flat)
        elif flat.shape[1]:
            if _timeline.active is None:
                apply_plan(plan, flat, out)
            else:
                with _timeline.phase("COMPUTE_AVERAGE"):
                    apply_plan(plan, flat, out)
        if st.cost is not None:
            st.charge("neighbor_allreduce", arr, topology=plan_messages(plan, n))
        if kind is NUMPY and arr.ndim == 2:
            return out
        return wrap_like(out.reshape(arr.shape), kind)

    def neighbor_allgather(
        self,
        x: AgentValue,
        src_ranks: AgentRanks = None,
        dst_ranks: AgentRanks = None,
        name: CallName = None,
    ) -> Any:
        _arrays.check_name(name)
        st, n = self._state, self._n
        if _torchops.takes(x):
            t = _torchops.stacked(st, x, "neighbor_allgather", averaging=False)[0]
            indptr, indices = st.senders(src_ranks, dst_ranks)
            st.sent.add_tensor(t, st.sent.gather(indices, n))
            messages = None if st.cost is None else self.gather_messages(st, indptr, indices)
            return _torchops.neighbor_allgather(st, t, indptr, indices, messages)
        arr, kind = self._stacked(x, "neighbor_allgather", averaging=False)
        indptr, indices = st.senders(src_ranks, dst_ranks)
        self._sent_add(arr, st.sent.gather(indices, n))
        per_agent = arr[:, None] if arr.ndim == 1 else arr
        out = by_receiver(per_agent[indices], indptr, np.diff(indptr), n, kind)
        if st.cost is not None:
            st.charge("neighbor_allgather", arr, topology=self.gather_messages(st, indptr, indices))
        return out

    def gather_messages(self, st: SimState, indptr: np.ndarray, indices: np.ndarray) -> Topology:
        """Return a topology whose off-diagonal entries are a neighbor_allgather's messages
        ``j -> i`` (CSR ``indptr``/``indices``, row i: whom i hears), for the cost meter:
        the world's topology when they are its, else one made once per pattern (the meters
        cache a topology's times by its identity)."""
        topology = st.topology
        if indices is topology.offdiag_csr()[1]:
            return topology
        key = (indptr.tobytes(), indices.tobytes())
        made = self._gathers.get(key)
        if made is None:
            if len(self._gathers) >= 64:
                self._gathers.clear()
            edges = sp.csr_array((np.ones(indices.size), indices, indptr), shape=(st.n, st.n))
            made = self._gathers[key] = as_topology(edges)
        return made
