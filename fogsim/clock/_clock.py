"""Per-agent virtual clocks, advanced by computation and by every communication op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._handles import Handle
from ..hierarchy.cost import CostMeter, CostModel, _link_loads
from ..topology import Topology
from ._platform import Platform, check_seconds

__all__ = ["Clock"]


class Clock(CostMeter):
    """The agents' virtual clocks on a :class:`Platform` (see :mod:`fogsim.clock`).

    ``time`` holds each agent's clock (s); ``computing``, ``communicating`` and
    ``waiting`` the time each spent so. A clock is also a
    :class:`~fogsim.hierarchy.CostMeter` (``total``, ``per_op``, ``calls``: the modelled time
    of each op, as the cost model gives it with every agent arriving at once).
    """

    def __init__(self, platform: Platform) -> None:
        super().__init__(CostModel(platform.network, platform.allreduce))
        self.platform = platform
        self.n = platform.size
        self._inverse_speed = 1.0 / platform.speed
        self._rng = np.random.default_rng([platform.seed, 1])
        self._computations = 0
        self._paused = 0
        self._started: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._edges: dict[tuple[int, float], _Edges] = {}
        self.time = np.zeros(self.n)
        self.computing = np.zeros(self.n)
        self.communicating = np.zeros(self.n)
        self.waiting = np.zeros(self.n)

    # -- computation --------------------------------------------------------------------------
    def compute(self, seconds: Any = None, flops: Any = None) -> np.ndarray:
        """Charge each agent ``seconds`` of computation (a number or one per agent), or
        ``flops`` on the platform's device, at its speed and its straggler draw; return the
        seconds each agent was charged."""
        if (seconds is None) == (flops is None):
            raise TypeError("compute() takes seconds or flops=, one of them")
        if seconds is None:
            flops = check_seconds(flops, self.n, "flops")
            device = self.platform.device
            seconds = flops if device is None else device.seconds(flops)
        else:
            seconds = check_seconds(seconds, self.n, "seconds")
        charged = seconds * self._inverse_speed
        stragglers = self.platform.stragglers
        if stragglers is not None:
            slow = stragglers.draw(self._rng, self.n, self._computations)
            if slow is not None:
                charged = charged * slow
        self._computations += 1
        self.time += charged
        self.computing += charged
        return np.asarray(charged)

    # -- communication --------------------------------------------------------------------------
    def record(self, op: str, nbytes: float, **info: Any) -> float:
        """Charge one op (see :meth:`~fogsim.hierarchy.CostMeter.record`), and move every
        agent's clock on as the op's messages arrive (see :mod:`fogsim.clock`)."""
        if self._paused:
            return 0.0
        seconds = super().record(op, nbytes, **info)
        topology = info.get("topology")
        done: Any
        if op in ("neighbor_allreduce", "neighbor_allgather") and topology is not None:
            done, own = self._exchange(topology, float(nbytes))
        elif op == "hierarchical_neighbor_allreduce":
            done, own = self._machines(info["machine_topology"], seconds)
        else:
            done, own = float(self.time.max()) + seconds, np.full(self.n, seconds)
        if self._started is not None:  # a nonblocking op: the agents go on until wait
            self._started.append((np.broadcast_to(done, (self.n,)), own))
        else:
            self._finish(done, own)
        return seconds

    def _finish(self, done: Any, own: np.ndarray) -> None:
        """Move each clock on to ``done`` (an agent's clock past it stays): the part that
        the op's own transfers (``own``) explain is communicating, the rest waiting."""
        done = np.maximum(self.time, done)
        elapsed = done - self.time
        busy = np.minimum(elapsed, own)
        self.communicating += busy
        self.waiting += elapsed - busy
        self.time = done

    def started(self, run: Callable[[], Any], op: str, name: str | None) -> Handle:
        """Run ``run`` (an op) as a nonblocking op: the clocks do not wait for it until
        the returned handle is waited on (communication overlaps what comes between)."""
        self._started = []
        try:
            result = run()
            pending = self._started
        finally:
            self._started = None

        def finish() -> Any:
            for done, own in pending:
                self._finish(done, own)
            return result

        return Handle(op, finish, lambda: True, name)

    def _exchange(self, topology: Topology, nbytes: float) -> tuple[np.ndarray, np.ndarray]:
        """A neighbor exchange: agent i is done when its own messages are out and every
        message it receives has arrived, each leaving its sender at the sender's clock."""
        edges = self._edges_of(topology, nbytes)
        start = self.time
        done = start + edges.out_time
        if edges.senders.size:
            arrival = start[edges.senders] + edges.time
            latest = np.maximum.reduceat(arrival, edges.starts)
            done[edges.receiving] = np.maximum(done[edges.receiving], latest)
        return done, edges.own_time

    def _machines(self, machine_topology: Any, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        """A hierarchical step: each machine starts when its last agent arrives, and is
        done when its own and its in-neighbor machines' starts plus the op's time have
        passed (a slow machine delays its neighbors, not the others)."""
        local = self.n // machine_topology.size
        machine_start = self.time.reshape(-1, local).max(axis=1)
        indptr, senders, _ = machine_topology.offdiag_csr()
        ready = machine_start.copy()
        has = np.diff(indptr) > 0
        if senders.size:
            latest = np.maximum.reduceat(machine_start[senders], indptr[:-1][has])
            ready[has] = np.maximum(ready[has], latest)
        return np.repeat(ready + seconds, local), np.full(self.n, seconds)

    def _edges_of(self, topology: Topology, nbytes: float) -> _Edges:
        key = (id(topology), nbytes)
        hit = self._edges.get(key)
        if hit is None or hit.topology is not topology:
            if len(self._edges) >= 64:
                self._edges.clear()
            hit = self._edges[key] = _Edges(topology, nbytes, self.platform)
        return hit

    # -- reading --------------------------------------------------------------------------------
    def breakdown(self) -> dict[str, np.ndarray]:
        """Each agent's clock and its time computing, communicating and waiting (copies)."""
        return {
            "time": self.time.copy(),
            "computing": self.computing.copy(),
            "communicating": self.communicating.copy(),
            "waiting": self.waiting.copy(),
        }

    def pause(self) -> None:
        """Stop charging ops until :meth:`resume` (the algorithms' metrics are free)."""
        self._paused += 1

    def resume(self) -> None:
        """Charge ops again after :meth:`pause`."""
        self._paused -= 1

    def __repr__(self) -> str:
        t = self.time
        ops = sum(self.calls.values())
        return f"Clock(n={self.n}, time=[{t.min():.6g}..{t.max():.6g}] s, ops={ops})"


class _Edges:
    """A step's messages (receiver by receiver) and each one's time on the network.

    A message crossing levels 0..L takes the longest of those levels' times, ``alpha_l +
    c_l N / w_l`` with ``c_l`` the most messages of the step that one link of level l
    carries one way (the cost model's link sharing), so that with every agent arriving
    at once the step lasts what :func:`~fogsim.hierarchy.neighbor_allreduce_time` says.
    """

    def __init__(self, topology: Topology, nbytes: float, platform: Platform) -> None:
        self.topology = topology
        n = topology.size
        network = platform.network
        indptr, senders, _ = topology.offdiag_csr()
        senders = senders.astype(np.int64)
        counts = np.diff(indptr)
        receivers = np.repeat(np.arange(n), counts)
        self.senders = senders
        self.receiving = np.flatnonzero(counts)  # the agents that receive
        self.starts = indptr[:-1][counts > 0]
        if not senders.size:
            self.time = np.zeros(0)
            self.out_time = np.zeros(n)
            self.own_time = np.zeros(n)
            return
        loads = _link_loads(network, senders, receivers)
        per_level = np.array(
            [
                level.alpha + c * nbytes / level.bandwidth if c else 0.0
                for level, c in zip(network.levels, loads, strict=True)
            ]
        )
        upto = np.maximum.accumulate(per_level)  # a message crossing level L: max over 0..L
        sizes = np.array(network.sizes, dtype=np.int64)
        strides = np.concatenate([[1], np.cumprod(sizes)[:-1]])
        differ = (senders[:, None] // strides) % sizes != (receivers[:, None] // strides) % sizes
        crossed = differ.shape[1] - 1 - np.argmax(differ[:, ::-1], axis=1)
        self.time = upto[crossed]
        out_time = np.zeros(n)
        np.maximum.at(out_time, senders, self.time)
        in_time = np.zeros(n)
        in_time[self.receiving] = np.maximum.reduceat(self.time, self.starts)
        self.out_time = out_time
        self.own_time = np.maximum(out_time, in_time)
