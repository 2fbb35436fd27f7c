"""Simulated wall-clock time: how long a run takes, on which machines.

In the simulator each agent has a virtual clock (one float per agent, stacked), off by
default. :func:`start` switches it on for the current world, on a :class:`Platform` that
describes the cluster: its network (a :class:`fogsim.hierarchy.Network`: levels,
latencies, bandwidths, link sharing), each agent's compute speed, its stragglers and its
device. Then:

* :func:`compute` charges computation: seconds (a number or one per agent), or ``flops=``
  on the platform's :class:`Device`, divided by the agent's speed and multiplied by its
  straggler draw (:class:`Stragglers`, seeded: a run is reproducible); the
  :mod:`fogsim.optim` wrappers charge each training pass so, from the FLOPs torch counts
  for the model's forward and backward (see :class:`fogsim.optim.DistributedOptimizer`);
* every communication op moves the clocks on, as a real runtime would:

  - a neighbor op (``neighbor_allreduce``, the dynamic and weighted ones too) finishes for
    agent i when i has called it, its own messages are out and every message it receives
    has arrived; a message leaves its sender when the sender calls the op and takes the
    network's time over the links it crosses (``alpha + c N / w`` per level, ``c`` the
    messages of the step sharing one link, the cost model's sharing). One slow agent
    delays its neighbours, and through them, step by step, everyone;
  - a collective (``allreduce`` and its algorithms, ``allgather``, ``broadcast``) finishes
    for every agent at the last caller's time plus the collective's time in
    :mod:`fogsim.hierarchy.cost`;
  - ``hierarchical_neighbor_allreduce``: each machine starts when its last agent arrives
    and finishes when it and its in-neighbor machines have started, plus the op's time;
  - a ``*_nonblocking`` op leaves the clocks alone until :func:`fogsim.wait`, which moves
    each agent's clock on to when the op is done for it, if that is later: communication
    overlaps the computation charged in between (``communicating`` counts only what it
    did not hide);
  - a window op (``win_put``, ``win_accumulate``, ``win_get``) is truly asynchronous:
    each of its messages leaves its origin (the sender; a get's reader) at the origin's
    clock and lands ``alpha + c N / w`` later (N the agent's share of the window, ``c`` the
    op's messages sharing one link, as above); the origin's clock moves on until its last
    message has landed (MPI's put then unlock: the op is complete at both ends). Messages
    wait in flight, with their landing times, and a receiver's ``win_update``,
    ``win_update_then_collect``, ``win_get`` and ``get_win_version`` see exactly those
    that have landed by its clock (puts to one buffer in landing order, the last landed
    wins; accumulates add up, so push-sum's mass stays exact). ``win_update`` itself
    takes no time (local arithmetic). :func:`fogsim.barrier` and ``win_free`` land
    everything in flight; every agent leaves them at the last arrival or landing plus a
    barrier's ``ceil(lg n) alpha``;
  - with ``fogsim.set_asynchrony("clock")`` the window ops' rounds follow the clocks: in
    each round the agents whose clocks are the earliest (the first to finish their
    computation) act, and the others stay busy in the computation they were charged
    (:func:`compute` does not charge them again until they act), so an agent k times
    faster makes about k times more updates per second of virtual time. The other
    activation rules still choose who acts; ``loss`` still drops messages; round delays
    (``max_delay``) are refused: the network delays the messages;

* :func:`now` reads the clocks, :func:`breakdown` each agent's time computing,
  communicating and waiting; every reference algorithm records ``history["time"]`` (the
  agents' clocks averaged) while a clock runs, so ``result.plot(against="time")`` draws
  error against simulated time.

>>> import numpy as np, fogsim as fs
>>> _ = fs.init(size=4, topology=fs.topology.ring_graph)
>>> clock = fs.clock.start(fs.clock.Platform.uniform(4, latency=1e-5, bandwidth=1e9))
>>> x = fs.local(lambda r: np.full(1000, float(r)))        # 8 kB per agent
>>> for _ in range(3):
...     _ = fs.clock.compute(1e-3)
...     x = fs.neighbor_allreduce(x)
>>> [round(float(t) * 1e3, 3) for t in fs.clock.now()]     # ms
[3.078, 3.078, 3.078, 3.078]
>>> fs.shutdown()

Under MPI or torch.distributed the same script runs unchanged and the clock reads real
time: :func:`now` is the seconds since :func:`start` on this rank, and :func:`compute`
sleeps for the computation it is given (at the rank's speed and straggler draw from the
same seeded platform, so the same agents are slow), so that prediction and measurement go
on one plot. In the sharded simulator each process keeps its block's clocks
(:class:`BlockClock`): a neighbor op reads the clocks of the halo, the other blocks'
agents the block hears from, as the op's values move; a collective takes the latest clock
over the processes (one number each); a hierarchical step each machine's latest. The
clocks are one process's, bit for bit. The SPMD mode (agents as threads) has no clock and
refuses :func:`start`, saying so.

Cost: off, nothing. On, while every clock reads the same (no speeds or stragglers, ops
that treat every agent alike, and after every collective) one number stands for them
all and a step costs a few microseconds; otherwise a neighbor op costs a pass over its
messages (compiled with numba once a run has visited 2^22 of them, the same numbers),
about 6 microseconds on a ring of 10^4 agents (``benchmarks/bench_clock.py``).

What the model leaves out: congestion beyond the cost model's link sharing (messages of
different ops never meet), OS noise, and the time of the local arithmetic of an op (the
weighted sums). In the window ops a stacked round is one event per acting agent, so a read
can miss a message sent in a later round that lands before it (never one sent earlier):
with the ``"clock"`` activation that needs a message faster than the reader's own
transfer (one crossing fewer levels, or sharing its link with fewer messages); with the
other rules the agents' clocks drift apart and reads can lag more. A ``win_get`` reads
its in-neighbor's exposed value as it is at the call (the simulator keeps no history of
it), and the ``*_nonblocking`` window ops are eager in the simulator: they cost what the
blocking ones do.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from .. import _context
from .._handles import Handle
from ._block import BlockClock, Shards
from ._calibrate import calibrate
from ._clock import Clock
from ._platform import V100, Device, Platform, Stragglers, check_seconds

__all__ = [
    "V100",
    "BlockClock",
    "Clock",
    "Device",
    "Platform",
    "Stragglers",
    "WallClock",
    "breakdown",
    "calibrate",
    "compute",
    "current",
    "now",
    "paused",
    "running",
    "start",
    "stop",
]


class WallClock:
    """The clock of one MPI or torch.distributed rank: real time since :func:`start`;
    :meth:`compute` sleeps (see the module docstring)."""

    def __init__(self, platform: Platform | None, rank: int, size: int) -> None:
        if platform is not None and platform.size != size:
            raise ValueError(
                f"the platform has {platform.size} agents but the world {size} processes"
            )
        self.platform, self.rank, self.n = platform, rank, size
        self._rng = np.random.default_rng([platform.seed, 1]) if platform else None
        self._computations = 0
        self._start = time.perf_counter()
        self.computing = 0.0

    @property
    def time(self) -> float:
        """Seconds since the clock started, on this rank."""
        return time.perf_counter() - self._start

    def compute(
        self, seconds: npt.ArrayLike | None = None, flops: npt.ArrayLike | None = None
    ) -> float:
        """Sleep for this rank's share of the computation (see :meth:`Clock.compute`)."""
        if (seconds is None) == (flops is None):
            raise TypeError("compute() takes seconds or flops=, one of them")
        platform = self.platform
        if seconds is None:
            flops = check_seconds(flops, self.n, "flops")
            device = None if platform is None else platform.device
            seconds = flops if device is None else device.seconds(flops)
        else:
            seconds = check_seconds(seconds, self.n, "seconds")
        mine = float(np.broadcast_to(seconds, (self.n,))[self.rank])
        if platform is not None:
            mine /= float(platform.speed[self.rank])
            if platform.stragglers is not None and self._rng is not None:
                slow = platform.stragglers.draw(self._rng, self.n, self._computations)
                if slow is not None:
                    mine *= float(slow[self.rank])
        self._computations += 1
        end = time.perf_counter() + mine
        while (left := end - time.perf_counter()) > 0:  # sleep, then spin the last 0.2 ms
            if left > 2e-4:
                time.sleep(left - 2e-4)
        self.computing += mine
        return mine

    def started(self, run: Callable[[], Any], op: str, name: str | None) -> Handle:
        """Run ``run`` (an op) now and return its completed handle: a rank's nonblocking ops
        overlap for real, so their own handles say when they end."""
        return Handle.completed(op, run(), name)

    def breakdown(self) -> dict[str, float]:
        """This rank's clock and its emulated computation (the rest is the ops' time)."""
        t = self.time
        return {
            "time": t,
            "computing": self.computing,
            "communicating_or_waiting": t - self.computing,
        }

    def pause(self) -> None:
        """Real time does not pause: nothing to do."""

    def resume(self) -> None:
        """Real time does not pause: nothing to do."""


def _clock_of(ctx: _context.Context) -> Clock | WallClock | None:
    clock = ctx.clock
    return clock if isinstance(clock, Clock | WallClock) else None


def start(
    platform: Platform | None = None,
    *,
    trace: str | None = None,
    trace_agents: int | Sequence[int] = 32,
) -> Clock | WallClock:
    """Start the current world's clock (see the module docstring) and return it.

    In the simulator ``platform`` is required and must have as many agents as the world;
    under MPI or torch.distributed it is optional (it gives the speeds and stragglers that
    :func:`compute` emulates). Starting again replaces the clock. ``trace``: a file that
    :func:`stop` writes, a Chrome trace in virtual time with one track per agent (the first
    ``trace_agents``, or those ranks): each computation, each op's communication and the
    waits, where a straggler and what it holds up are seen (simulator only).
    """
    if platform is not None and not isinstance(platform, Platform):
        raise TypeError(f"platform must be a fogsim.clock.Platform, got {type(platform).__name__}")
    ctx = _context.current()
    backend = ctx.backend
    if ctx.is_simulated:
        if platform is None:
            raise TypeError(
                "start() in the simulator needs a platform, e.g. "
                "fogsim.clock.Platform.uniform(fs.size())"
            )
        if platform.size != backend.size_int:
            raise ValueError(
                f"the platform has {platform.size} agents but the world {backend.size_int}"
            )
        sharded = backend.shard_index() is not None  # each process keeps its block's clocks
        simulated = BlockClock(platform, cast(Shards, backend)) if sharded else Clock(platform)
        if trace is not None:
            simulated.trace(trace_agents)
        clock: Clock | WallClock = simulated
        ctx.simulator("fogsim.clock").attach_cost_model(simulated)
    elif backend.name == "spmd":
        raise ValueError(
            "fogsim.clock has no SPMD mode (agents as threads of one process have no time of "
            "their own): run the script simulated (virtual time) or under fogrun -np N (real "
            "time)"
        )
    else:
        if trace is not None:
            raise ValueError(
                "start(trace=) writes the simulator's virtual time; under MPI or torch record "
                "real time with fogsim.timeline"
            )
        clock = WallClock(platform, int(backend.rank()), backend.size_int)
    ctx.clock = clock
    ctx.clock_trace = trace
    return clock


def stop() -> None:
    """Stop the current world's clock (a simulated world's ops are no longer charged)."""
    ctx = _context.current()
    clock = _clock_of(ctx)
    if isinstance(clock, Clock):
        ctx.simulator("fogsim.clock").attach_cost_model(None)
        path = getattr(ctx, "clock_trace", None)
        if path is not None and ctx.backend.is_main_process():
            clock.write_trace(path)
    ctx.clock = None
    ctx.clock_trace = None


def current() -> Clock | WallClock:
    """Return the current world's clock, or raise if none runs."""
    clock = _clock_of(_context.current())
    if clock is None:
        raise ValueError("no clock runs in this world: call fogsim.clock.start(platform) first")
    return clock


def running() -> bool:
    """Whether a clock runs in the current world."""
    ctx = _context.peek()
    return ctx is not None and _clock_of(ctx) is not None


def compute(seconds: npt.ArrayLike | None = None, *, flops: npt.ArrayLike | None = None) -> Any:
    """Charge computation to the agents' clocks (see the module docstring); return the
    seconds charged (per agent in simulation, this rank's under MPI or torch)."""
    return current().compute(seconds, flops)


def now() -> Any:
    """Each agent's clock in seconds: stacked in simulation (the block's agents when
    sharded), this rank's under MPI/torch."""
    clock = current()
    return clock.time.copy() if isinstance(clock, Clock) else clock.time


def breakdown() -> dict[str, Any]:
    """Each agent's clock and its time computing, communicating and waiting."""
    return current().breakdown()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Ops inside the block do not move the clock (what observes a run, e.g. metrics)."""
    ctx = _context.peek()
    clock = None if ctx is None else _clock_of(ctx)
    if clock is None:
        yield
        return
    clock.pause()
    try:
        yield
    finally:
        clock.resume()
