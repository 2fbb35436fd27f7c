"""Per-agent virtual clocks, advanced by computation and by every communication op."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .._handles import Handle
from ..hierarchy.cost import CostMeter, CostModel
from ..topology import Topology
from ._messages import Edges, message_times
from ._platform import Platform, check_seconds

__all__ = ["Clock", "kernels"]

# Exchanges run in numba (``_clock_nb``, the same numbers) once a clock has visited this
# many messages in all: numpy's passes cost about 0.5-1 ns a message and a microsecond a
# pass, importing numba and loading the kernel about 0.15 s (1-3 s compiling it the first
# time), so small runs never import numba.
_COMPILE_AFTER = 1 << 22
_kernels: Any = None  # the module _clock_nb, once imported


def kernels() -> Any:
    """The compiled exchanges (``_clock_nb``), or None where numba is missing."""
    global _kernels
    if _kernels is None:
        try:
            from . import _clock_nb
        except ImportError:  # numba missing: the numpy passes give the same numbers
            _kernels = False
        else:
            _kernels = _clock_nb
    return _kernels or None


class Clock(CostMeter):
    """The agents' virtual clocks on a :class:`Platform` (see :mod:`fogsim.clock`).

    ``time`` holds each agent's clock (s); ``computing``, ``communicating`` and
    ``waiting`` the time each spent so. A clock is also a
    :class:`~fogsim.hierarchy.CostMeter` (``total``, ``per_op``, ``calls``: the modelled time
    of each op, as the cost model gives it with every agent arriving at once).
    """

    def __init__(self, platform: Platform, block: tuple[int, int] | None = None) -> None:
        super().__init__(CostModel(platform.network, platform.allreduce))
        self.platform = platform
        #: the world's agents, and those whose clocks this clock holds: ``[lo, hi)`` (all
        #: of them but in a sharded simulation, see :class:`~fogsim.clock.BlockClock`)
        self.size = platform.size
        self._lo, self._hi = block if block is not None else (0, platform.size)
        self.n = n = self._hi - self._lo
        uniform = bool(np.all(platform.speed == 1))  # the world's: every process agrees
        speed = platform.speed[self._lo : self._hi]
        self._inverse_speed = None if uniform else 1.0 / speed
        self._scaled: tuple[float, np.ndarray] | None = None  # seconds, and each agent's
        self._rng = np.random.default_rng([platform.seed, 1])
        self._computations = 0
        self._paused = 0
        self._started: list[tuple[np.ndarray, np.ndarray]] | None = None
        # the clocks live in _ext[:n]; _ext[n] = -inf stands for a sender that never sends
        # (a padding); an exchange writes its finishing times into _spare, then they swap
        self._ext = np.zeros(n + 1)
        self._ext[n] = -np.inf
        self._spare = self._ext.copy()
        # while every clock reads the same, _level holds it and _ext[:n] may be stale
        # (computations and ops alike on every agent move one number; see _clocks)
        self._level: float | None = 0.0
        self._scratch = np.empty(n)
        self._edges: dict[tuple[int, float], Edges] = {}
        self._visited = 0  # messages the exchanges visited (see _COMPILE_AFTER)
        self._trace: _Trace | None = None
        self._computing = np.zeros(n)
        self._computing_alike = 0.0  # what every agent computed alike (compute's fast path)
        # no speeds, no stragglers: a number of seconds is charged to every agent alike
        self._alike = uniform and platform.stragglers is None
        self._communicating = np.zeros(n)
        self._communicating_alike = 0.0  # what every agent communicated alike
        #: agents still in the computation they were last charged (the window ops'
        #: ``"clock"`` activation): compute() does not charge them again; None: none
        self.busy: np.ndarray | None = None

    @property
    def time(self) -> np.ndarray:
        """Each agent's clock (s), read-only."""
        clocks = self._ext[:-1]
        if self._level is not None:
            clocks.fill(self._level)
        view = clocks.view()
        view.flags.writeable = False
        return view

    def _clocks(self) -> np.ndarray:
        """The clocks, to be moved agent by agent: written out if one number held them."""
        clocks = self._ext[:-1]
        if self._level is not None:
            clocks.fill(self._level)
            self._level = None
        return clocks

    @property
    def computing(self) -> np.ndarray:
        """The time each agent spent computing (s)."""
        computing: np.ndarray = self._computing + self._computing_alike
        return computing

    @property
    def communicating(self) -> np.ndarray:
        """The time each agent spent in its ops' own transfers (s)."""
        communicating: np.ndarray = self._communicating + self._communicating_alike
        return communicating

    @property
    def waiting(self) -> np.ndarray:
        """The time each agent spent neither computing nor communicating (s)."""
        waiting: np.ndarray = np.maximum(self.time - self.computing - self.communicating, 0.0)
        return waiting

    # -- computation --------------------------------------------------------------------------
    def compute(
        self, seconds: npt.ArrayLike | None = None, flops: npt.ArrayLike | None = None
    ) -> Any:
        """Charge each agent ``seconds`` of computation (a number or one per agent), or
        ``flops`` on the platform's device, at its speed and its straggler draw; return the
        seconds charged: one number when every agent was charged alike, else one each."""
        if (
            type(seconds) is float
            and flops is None
            and self._alike
            and 0 <= seconds < math.inf
            and self.busy is None
        ):  # every agent charged alike: one number for all computing times
            if self._trace is not None:
                self._trace.span("COMPUTE", self.time, seconds)
            if self._level is not None:
                self._level += seconds
            else:
                self._ext[:-1] += seconds
            self._computing_alike += seconds
            self._computations += 1
            return seconds
        if (seconds is None) == (flops is None):
            raise TypeError("compute() takes seconds or flops=, one of them")
        if seconds is None:
            work = self._per_agent(flops, "flops")
            device = self.platform.device
            taken: Any = work if device is None else device.seconds(work)
        else:
            taken = self._per_agent(seconds, "seconds")
        charged: Any = taken
        if self._inverse_speed is not None:
            if isinstance(taken, float):  # a loop charges the same number each step
                scaled = self._scaled
                if scaled is None or scaled[0] != taken:
                    each = taken * self._inverse_speed
                    each.flags.writeable = False
                    self._scaled = scaled = (taken, each)
                charged = scaled[1]
            else:
                charged = taken * self._inverse_speed
        stragglers = self.platform.stragglers
        if stragglers is not None:  # the world's draws (the same on every process)
            slow = stragglers.draw(self._rng, self.size, self._computations)
            if slow is not None:
                charged = charged * self._held(slow)
        if self.busy is not None:  # still computing: the same computation, not a new one
            charged = np.where(self.busy, 0.0, charged)
        self._computations += 1
        clocks = self._clocks()
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
            if self._started is None:
                if self._level is not None and edges.own_alike is not None:
                    # every clock alike, every agent's transfers alike: they stay alike
                    self._finish(self._level + edges.own_alike, edges.own_alike, False, op)
                    return seconds
                if self._trace is None and self._compiled(edges):
                    return seconds
            done, own = self._exchange(edges)
        else:
            seconds = super().record(op, nbytes, **info)
            if op == "hierarchical_neighbor_allreduce" and self._level is None:
                done, own = self._machines(info["machine_topology"], seconds)
            elif op == "local_allreduce" and self._level is None:
                local = info.get("local_size") or self.platform.network.levels[0].size
                done, own = self._within_machines(local, seconds)
            else:  # a collective (or a hierarchical step from clocks alike): every agent
                # leaves at the last arrival plus the op's time
                done, own = self._latest() + seconds, seconds
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
        seconds = super().record("barrier", 0.0, size=self.size)
        done = max(self._latest(), landed) + seconds
        if self._started is not None:
            self._started.append((np.full(self.n, done), np.full(self.n, seconds)))
        else:
            self._finish(done, seconds, joining=False, op="barrier")

    def _latest(self) -> float:
        """The latest clock."""
        return self._level if self._level is not None else float(self._ext[:-1].max())

    def _per_agent(self, value: Any, argname: str) -> Any:
        """``value`` as seconds (or FLOPs): a number, or one per agent."""
        return check_seconds(value, self.n, argname)

    def _held(self, world: np.ndarray) -> np.ndarray:
        """The clock's agents' entries of one entry per agent of the world."""
        return world if self.n == self.size else world[self._lo : self._hi]

    def _machine_starts(self, local: int) -> np.ndarray:
        """Each machine's last arrival (``local`` agents a machine)."""
        starts: np.ndarray = self.time.reshape(-1, local).max(axis=1)
        return starts

    def _finish(self, done: Any, own: Any, joining: bool, op: str) -> None:
        """Move each clock on to ``done``: the part of the time that the op's own transfers
        (``own``) explain is communicating (the rest is waiting). ``joining``: a nonblocking
        op waited on, which leaves a clock already past ``done`` where it is."""
        if not joining and not isinstance(done, np.ndarray):  # every agent leaves at done
            if self._level is not None:
                alike = min(done - self._level, own)
                if self._trace is not None:
                    self._trace.op(op, self.time, np.broadcast_to(alike, (self.n,)), done)
                self._communicating_alike += alike
            else:
                clocks = self._ext[:-1]
                busy = np.subtract(done, clocks, out=self._scratch)
                np.minimum(busy, own, out=busy)
                if self._trace is not None:
                    self._trace.op(op, clocks, busy, done)
                self._communicating += busy
            self._level = float(done)
            return
        clocks = self._clocks()
        if joining:
            done = np.maximum(clocks, done)
        busy = np.subtract(done, clocks, out=self._scratch)
        np.minimum(busy, own, out=busy)
        if self._trace is not None:
            self._trace.op(op, clocks, busy, done)
        self._communicating += busy
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

    def _compiled(self, edges: Edges) -> bool:
        """Run a blocking exchange and its finish in compiled code, if the clock has visited
        enough messages to pay for numba (see ``_COMPILE_AFTER``); False: not run."""
        self._visited += edges.senders.size
        compiled = kernels() if self._visited > _COMPILE_AFTER else None
        if compiled is None:
            return False
        ext = self._ext
        start = self._clocks()
        done, communicating = self._spare, self._communicating
        if edges.columns is not None:
            arrays = edges.kernel_arrays()
            compiled.exchange(ext, edges.out_time, edges.own_time, *arrays, done, communicating)
        else:
            compiled.exchange_csr(
                start,
                ext,
                edges.senders,
                edges.time,
                edges.indptr,
                edges.out_time,
                edges.own_time,
                done,
                communicating,
            )
        self._ext, self._spare = self._spare, ext
        return True

    def _exchange(self, edges: Edges) -> tuple[np.ndarray, np.ndarray]:
        """A neighbor exchange: agent i is done when its own messages are out and every
        message it receives has arrived, each leaving its sender at the sender's clock."""
        ext, n = self._ext, self.n
        start = self._clocks()
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
        local = self.size // machine_topology.size
        machine_start = self._machine_starts(local)
        indptr, senders, _ = machine_topology.offdiag_csr()
        ready = machine_start.copy()
        has = np.diff(indptr) > 0
        if senders.size:
            latest = np.maximum.reduceat(machine_start[senders], indptr[:-1][has])
            ready[has] = np.maximum(ready[has], latest)
        return self._held(np.repeat(ready + seconds, local)), np.full(self.n, seconds)

    def _within_machines(self, local: int, seconds: float) -> tuple[np.ndarray, np.ndarray]:
        """A machine-local collective (``local`` agents per machine): each machine's agents
        leave at its last arrival plus the op's time (machines do not wait for each other)."""
        machine_start = self._machine_starts(local)
        return self._held(np.repeat(machine_start + seconds, local)), np.full(self.n, seconds)

    def _edges_of(self, topology: Topology, nbytes: float) -> Edges:
        key = (id(topology), nbytes)
        hit = self._edges.get(key)
        if hit is None or hit.topology is not topology:
            if len(self._edges) >= 64:
                self._edges.clear()
            hit = self._edges[key] = Edges(topology, nbytes, self.platform)
        return hit

    # -- a trace in virtual time -----------------------------------------------------------------
    def trace(self, agents: int | Sequence[int] = 32) -> None:
        """Record each computation and op of some agents (the first ``agents``, or these
        ranks) in virtual time, for :meth:`write_trace`."""
        size = self.size
        if isinstance(agents, int) and not isinstance(agents, bool):
            if agents < 1:
                raise ValueError(f"agents must be >= 1, got {agents}")
            ranks = np.arange(min(agents, size))
        else:
            ranks = np.unique(np.asarray(agents, dtype=np.int64))
            if ranks.size == 0 or ranks[0] < 0 or ranks[-1] >= size:
                raise ValueError(f"agents must be ranks in 0..{size - 1}, got {agents!r}")
        lo, hi = self._lo, self._hi  # the clock's own agents among them
        self._trace = _Trace(ranks[(ranks >= lo) & (ranks < hi)] - lo, lo)

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


class _Trace:
    """The spans of some agents in virtual time (see :meth:`Clock.trace`)."""

    def __init__(self, ranks: np.ndarray, first: int = 0) -> None:
        self.ranks = ranks  # among the clock's agents, whose first is agent ``first``
        self.first = first
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

        ranks = (self.ranks + self.first).tolist()
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
