"""Per-agent virtual clocks, advanced by computation and by every communication op."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._handles import Handle
from ..hierarchy.cost import CostMeter, CostModel, _link_loads
from ..topology import Topology
from ._platform import Platform, check_seconds

__all__ = ["Clock", "message_times"]


def message_times(network: Any, senders: np.ndarray, receivers: np.ndarray, nbytes: float) -> Any:
    """Each message's seconds on ``network``: a message ``senders[k] -> receivers[k]`` of
    ``nbytes`` crossing levels 0..L takes the longest of those levels' ``alpha_l + c_l N /
    w_l``, ``c_l`` the most of these messages that one link of level l carries one way (the
    cost model's link sharing)."""
    if not senders.size:
        return np.zeros(0)
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
    return upto[crossed]


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
        self.n = n = platform.size
        uniform = bool(np.all(platform.speed == 1))
        self._inverse_speed = None if uniform else 1.0 / platform.speed
        self._rng = np.random.default_rng([platform.seed, 1])
        self._computations = 0
        self._paused = 0
        self._started: list[tuple[np.ndarray, np.ndarray]] | None = None
        # the clocks live in _ext[:n]; _ext[n] = -inf stands for a sender that never sends
        # (a padding); an exchange writes its finishing times into _spare, then they swap
        self._ext = np.zeros(n + 1)
        self._ext[n] = -np.inf
        self._spare = self._ext.copy()
        self._scratch = np.empty(n)
        self._edges: dict[tuple[int, float], _Edges] = {}
        self._trace: _Trace | None = None
        self._computing = np.zeros(n)
        self._computing_alike = 0.0  # what every agent computed alike (compute's fast path)
        # no speeds, no stragglers: a number of seconds is charged to every agent alike
        self._alike = uniform and platform.stragglers is None
        self.communicating = np.zeros(n)
        #: agents still in the computation they were last charged (the window ops'
        #: ``"clock"`` activation): compute() does not charge them again; None: none
        self.busy: np.ndarray | None = None

    @property
    def time(self) -> np.ndarray:
        """Each agent's clock (s)."""
        return self._ext[:-1]

    @property
    def computing(self) -> np.ndarray:
        """The time each agent spent computing (s)."""
        computing: np.ndarray = self._computing + self._computing_alike
        return computing

    @property
    def waiting(self) -> np.ndarray:
        """The time each agent spent neither computing nor communicating (s)."""
        waiting: np.ndarray = np.maximum(self.time - self.computing - self.communicating, 0.0)
        return waiting

    # -- computation --------------------------------------------------------------------------
    def compute(self, seconds: Any = None, flops: Any = None) -> Any:
        """Charge each agent ``seconds`` of computation (a number or one per agent), or
        ``flops`` on the platform's device, at its speed and its straggler draw; return the
        seconds charged: one number when every agent was charged alike, else one each."""
        if (
            type(seconds) is float
            and flops is None
            and self._alike
            and 0 <= seconds < math.inf
            and self.busy is None
        ):  # every agent charged alike: one pass, and one number for all computing times
            clocks = self.time
            if self._trace is not None:
                self._trace.span("COMPUTE", clocks, seconds)
            clocks += seconds
            self._computing_alike += seconds
            self._computations += 1
            return seconds
        if (seconds is None) == (flops is None):
            raise TypeError("compute() takes seconds or flops=, one of them")
        if seconds is None:
            flops = check_seconds(flops, self.n, "flops")
            device = self.platform.device
            seconds = flops if device is None else device.seconds(flops)
        else:
            seconds = check_seconds(seconds, self.n, "seconds")
        charged: Any = seconds if self._inverse_speed is None else seconds * self._inverse_speed
        stragglers = self.platform.stragglers
        if stragglers is not None:
            slow = stragglers.draw(self._rng, self.n, self._computations)
            if slow is not None:
                charged = charged * slow
        if self.busy is not None:  # still computing: the same computation, not a new one
            charged = np.where(self.busy, 0.0, charged)
        self._computations += 1
        clocks = self.time
        if self._trace is not None:
            self._trace.span("COMPUTE", clocks, charged)
        clocks += charged
        self._computing += charged
        return charged

    # -- communication --------------------------------------------------------------------------
    def record(self, op: str, nbytes: float, **info: Any) -> float:
        """Charge one op (see :meth:`~fogsim.hierarchy.CostMeter.record`), and move every
        agent's clock on as the op's messages arrive (see :mod:`fogsim.clock`)."""
        if self._paused:
            return 0.0
        topology = info.get("topology")
        done: Any
        own: Any
        if op in ("neighbor_allreduce", "neighbor_allgather") and topology is not None:
            edges = self._edges_of(topology, float(nbytes))
            seconds = edges.seconds  # the cost model's time: its busiest link's
            self.total += seconds
            self.current += seconds
            self.per_op[op] = self.per_op.get(op, 0.0) + seconds
            self.calls[op] = self.calls.get(op, 0) + 1
            done, own = self._exchange(edges)
        else:
            seconds = super().record(op, nbytes, **info)
            if op == "hierarchical_neighbor_allreduce":
                done, own = self._machines(info["machine_topology"], seconds)
            else:  # a collective: every agent leaves at the last arrival plus its time
                done, own = float(self.time.max()) + seconds, seconds
        if self._started is not None:  # a nonblocking op: the agents go on until wait
            kept = np.array(np.broadcast_to(done, (self.n,)))
            self._started.append((kept, np.broadcast_to(own, (self.n,))))
        else:
            self._finish(done, own, joining=False, op=op)
        return seconds

    def send(
        self,
        op: str,
        senders: np.ndarray,
        receivers: np.ndarray,
        origin: np.ndarray,
        nbytes: float,
    ) -> np.ndarray | None:
        """A window op's messages ``senders[k] -> receivers[k]``, each run by agent
        ``origin[k]`` (the sender of a put or accumulate, the reader of a get): return when
        each lands, its origin's clock plus its ``message_times`` (None while paused:
        they land at once), and move each origin's clock on until its last message has
        landed (a nonblocking op: at wait)."""
        if self._paused:
            return None
        times = message_times(self.platform.network, senders, receivers, float(nbytes))
        landing: np.ndarray = self.time[origin] + times
        seconds = float(times.max()) if times.size else 0.0
        self.total += seconds
        self.current += seconds
        self.per_op[op] = self.per_op.get(op, 0.0) + seconds
        self.calls[op] = self.calls.get(op, 0) + 1
        own = np.zeros(self.n)
        np.maximum.at(own, origin, times)
        done = self.time + own
        if self._started is not None:
            self._started.append((done, own))
        else:
            self._finish(done, own, joining=False, op=op)
        return landing

    def barrier(self, landed: float = -math.inf) -> None:
        """A barrier after window messages landing up to ``landed``: every agent leaves
        at the last arrival or landing plus the cost model's barrier time."""
        self.busy = None
        if self._paused:
            return
        seconds = super().record("barrier", 0.0, size=self.n)
        done = max(float(self.time.max()), landed) + seconds
        if self._started is not None:
            self._started.append((np.full(self.n, done), np.full(self.n, seconds)))
        else:
            self._finish(done, seconds, joining=False, op="barrier")

    def _finish(self, done: Any, own: Any, joining: bool, op: str) -> None:
        """Move each clock on to ``done``: the part of the time that the op's own transfers
        (``own``) explain is communicating (the rest is waiting). ``joining``: a nonblocking
        op waited on, which leaves a clock already past ``done`` where it is."""
        clocks = self.time
        if joining:
            done = np.maximum(clocks, done)
        busy = np.subtract(done, clocks, out=self._scratch)
        np.minimum(busy, own, out=busy)
        if self._trace is not None:
            self._trace.op(op, clocks, busy, done)
        self.communicating += busy
        if isinstance(done, np.ndarray) and done.base is self._spare:
            self._ext, self._spare = self._spare, self._ext  # the exchange wrote it there
        else:
            clocks[...] = done

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
                self._finish(done, own, joining=True, op=op)
            return result

        return Handle(op, finish, lambda: True, name)

    def _exchange(self, edges: _Edges) -> tuple[np.ndarray, np.ndarray]:
        """A neighbor exchange: agent i is done when its own messages are out and every
        message it receives has arrived, each leaving its sender at the sender's clock."""
        ext, n = self._ext, self.n
        start = ext[:-1]
        done = np.add(start, edges.out_time, out=self._spare[:-1])
        if edges.columns is not None:  # in-degrees alike: one pass per column of senders
            arrival = self._scratch
            for senders, shift, seconds in edges.columns:
                if shift is None:
                    np.take(ext, senders, out=arrival)
                else:  # a circulant column: sender (i + shift) mod n
                    arrival[: n - shift] = start[shift:]
                    arrival[n - shift :] = start[:shift]
                arrival += seconds
                np.maximum(done, arrival, out=done)
        elif edges.senders.size:
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

    # -- a trace in virtual time -----------------------------------------------------------------
    def trace(self, agents: Any = 32) -> None:
        """Record each computation and op of some agents (the first ``agents``, or these
        ranks) in virtual time, for :meth:`write_trace`."""
        if isinstance(agents, int) and not isinstance(agents, bool):
            if agents < 1:
                raise ValueError(f"agents must be >= 1, got {agents}")
            ranks = np.arange(min(agents, self.n))
        else:
            ranks = np.unique(np.asarray(agents, dtype=np.int64))
            if ranks.size == 0 or ranks[0] < 0 or ranks[-1] >= self.n:
                raise ValueError(f"agents must be ranks in 0..{self.n - 1}, got {agents!r}")
        self._trace = _Trace(ranks)

    def write_trace(self, path: str) -> None:
        """Write what :meth:`trace` recorded as a Chrome trace (Perfetto, chrome://tracing):
        one process track per agent, in virtual microseconds."""
        if self._trace is None:
            raise ValueError("nothing recorded: call trace() (or start(..., trace=)) first")
        self._trace.write(path)

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
        self.columns: list[tuple[np.ndarray, int | None, np.ndarray]] | None = None
        n = topology.size
        network = platform.network
        indptr, senders, _ = topology.offdiag_csr()
        senders = senders.astype(np.int64)
        counts = np.diff(indptr)
        receivers = np.repeat(np.arange(n), counts)
        self.senders = senders
        self.receiving = np.flatnonzero(counts)  # the agents that receive
        self.starts = indptr[:-1][counts > 0]
        self.seconds = 0.0
        if not senders.size:
            self.time = np.zeros(0)
            self.out_time = np.zeros(n)
            self.own_time = np.zeros(n)
            return
        self.time = message_times(network, senders, receivers, nbytes)
        self.seconds = float(self.time.max())
        out_time = np.zeros(n)
        np.maximum.at(out_time, senders, self.time)
        in_time = np.zeros(n)
        in_time[self.receiving] = np.maximum.reduceat(self.time, self.starts)
        self.out_time = out_time
        self.own_time = np.maximum(out_time, in_time)
        # Where the in-degrees are alike (circulant, exponential, one-peer steps), column j
        # holds each agent's j-th sender and its message time, padded with sender n (whose
        # clock is -inf) where an agent has fewer: k contiguous passes instead of a reduceat;
        # a column whose senders are i + s (mod n) is read as two slices.
        k = int(counts.max())
        self.columns = None
        if k * n <= 2 * senders.size:
            # each row's senders by their distance ahead, (sender - receiver) mod n
            order = np.lexsort(((senders - receivers) % n, receivers))
            slot = np.arange(senders.size) - np.repeat(indptr[:-1], counts)
            index = np.full((k, n), n, dtype=np.int64)
            seconds = np.zeros((k, n))
            index[slot, receivers] = senders[order]
            seconds[slot, receivers] = self.time[order]
            ranks = np.arange(n)
            self.columns = []
            for column, times in zip(index, seconds, strict=True):
                shift = int(column[0])
                circulant = np.array_equal(column, (ranks + shift) % n) and 0 < shift < n
                self.columns.append((column, shift if circulant else None, times))


class _Trace:
    """The spans of some agents in virtual time (see :meth:`Clock.trace`)."""

    def __init__(self, ranks: np.ndarray) -> None:
        self.ranks = ranks
        self.events: list[tuple[str, np.ndarray, np.ndarray]] = []  # name, starts, lengths

    def span(self, name: str, starts: np.ndarray, seconds: Any) -> None:
        lengths = np.broadcast_to(seconds, starts.shape)[self.ranks]
        self.events.append((name, starts[self.ranks].copy(), np.array(lengths)))

    def op(self, name: str, starts: np.ndarray, busy: np.ndarray, done: Any) -> None:
        begin = starts[self.ranks].copy()
        moving = busy[self.ranks].copy()
        end = np.broadcast_to(done, starts.shape)[self.ranks]
        self.events.append((name, begin, moving))
        self.events.append(("WAIT", begin + moving, end - begin - moving))

    def write(self, path: str) -> None:
        import json
        import os

        ranks = self.ranks.tolist()
        out: list[dict[str, Any]] = [
            {"ph": "M", "pid": r, "name": "process_name", "args": {"name": f"agent {r}"}}
            for r in ranks
        ]
        for name, starts, lengths in self.events:
            for r, ts, dur in zip(ranks, starts.tolist(), lengths.tolist(), strict=True):
                if dur > 0 or name == "COMPUTE":
                    span = {"ts": 1e6 * ts, "dur": 1e6 * dur}
                    out.append({"ph": "X", "pid": r, "tid": 0, "name": name, **span})
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "w") as f:
            json.dump({"traceEvents": out, "displayTimeUnit": "ms"}, f)
