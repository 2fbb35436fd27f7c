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
on one plot. The SPMD mode (agents as threads) has no clock, and the sharded simulator's
clock is not written yet: both refuse :func:`start` with an error that says so.

What the model leaves out: congestion beyond the cost model's link sharing (messages of
different ops never meet), OS noise, and the time of the local arithmetic of an op (the
weighted sums). Window ops, ``neighbor_allgather`` and the machine-local ``allreduce`` do
not move the clock yet.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import _context
from ._clock import Clock
from ._platform import V100, Device, Platform, Stragglers, check_seconds

__all__ = [
    "V100",
    "Clock",
    "Device",
    "Platform",
    "Stragglers",
    "WallClock",
    "breakdown",
    "compute",
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

    def compute(self, seconds: Any = None, flops: Any = None) -> float:
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
    clock: Clock | WallClock | None = getattr(ctx, "clock", None)
    return clock


def start(platform: Platform | None = None) -> Clock | WallClock:
    """Start the current world's clock (see the module docstring) and return it.

    In the simulator ``platform`` is required and must have as many agents as the world;
    under MPI or torch.distributed it is optional (it gives the speeds and stragglers that
    :func:`compute` emulates). Starting again replaces the clock.
    """
    if platform is not None and not isinstance(platform, Platform):
        raise TypeError(f"platform must be a fogsim.clock.Platform, got {type(platform).__name__}")
    ctx = _context.current()
    backend = ctx.backend
    if ctx.is_simulated:
        if backend.shard_index() is not None:
            raise NotImplementedError(
                "fogsim.clock is not implemented in the sharded simulator yet: run the "
                "clock with every agent in one process (shards=1)"
            )
        if platform is None:
            raise TypeError(
                "start() in the simulator needs a platform, e.g. "
                "fogsim.clock.Platform.uniform(fs.size())"
            )
        if platform.size != backend.size_int:
            raise ValueError(
                f"the platform has {platform.size} agents but the world {backend.size_int}"
            )
        clock: Clock | WallClock = Clock(platform)
        ctx.simulator("fogsim.clock").attach_cost_model(clock)
    elif backend.name == "spmd":
        raise ValueError(
            "fogsim.clock has no SPMD mode (agents as threads of one process have no time of "
            "their own): run the script simulated (virtual time) or under fogrun -np N (real "
            "time)"
        )
    else:
        clock = WallClock(platform, int(backend.rank()), backend.size_int)
    ctx.clock = clock
    return clock


def stop() -> None:
    """Stop the current world's clock (a simulated world's ops are no longer charged)."""
    ctx = _context.current()
    clock = _clock_of(ctx)
    if isinstance(clock, Clock):
        ctx.simulator("fogsim.clock").attach_cost_model(None)
    ctx.clock = None


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


def compute(seconds: Any = None, *, flops: Any = None) -> Any:
    """Charge computation to the agents' clocks (see the module docstring); return the
    seconds charged (per agent in simulation, this rank's under MPI or torch)."""
    return current().compute(seconds, flops)


def now() -> Any:
    """Each agent's clock in seconds: stacked in simulation, this rank's under MPI/torch."""
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


__all__ += ["current"]
