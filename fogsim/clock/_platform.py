"""What the clock models: the network, each agent's compute speed, and its stragglers."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..hierarchy.cost import Level, Network

__all__ = ["Device", "Platform", "Stragglers", "V100", "check_seconds"]


def _number(value: Any, argname: str, *, low: float, strict: bool = False) -> float:
    """``value`` as a finite float ``>= low`` (``> low`` when ``strict``), or raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argname} must be a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out) or out < low or (strict and out == low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{argname} must be finite and {bound}, got {value!r}")
    return out


def check_seconds(value: Any, n: int, argname: str) -> np.ndarray | float:
    """``value`` as seconds: a number, or one per agent (``n``); finite and ``>= 0``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return _number(value, argname, low=0.0)
    if not isinstance(value, np.ndarray | list | tuple):
        raise TypeError(
            f"{argname} must be a number or one number per agent, got {type(value).__name__}"
        )
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"{argname} must be a number or one number per agent, got {type(value).__name__}"
        ) from None
    if arr.ndim == 0:
        return _number(float(arr), argname, low=0.0)
    if arr.shape != (n,):
        raise ValueError(
            f"{argname} must be a number or {n} numbers (one per agent), got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{argname} must be finite and >= 0 for every agent")
    return arr


@dataclass(frozen=True)
class Device:
    """A device's arithmetic: ``peak_flops`` (FLOP/s) reached at ``efficiency`` (0..1].

    ``seconds(flops)`` is ``flops / (peak_flops * efficiency)``.
    """

    peak_flops: float
    efficiency: float = 1.0
    name: str = ""

    def __post_init__(self) -> None:
        _number(self.peak_flops, "Device.peak_flops", low=0.0, strict=True)
        eff = _number(self.efficiency, "Device.efficiency", low=0.0, strict=True)
        if eff > 1:
            raise ValueError(f"Device.efficiency must be in (0, 1], got {self.efficiency!r}")

    def seconds(self, flops: npt.ArrayLike) -> np.ndarray:
        """The seconds ``flops`` take on this device."""
        return np.asarray(flops, dtype=np.float64) / (self.peak_flops * self.efficiency)


#: An NVIDIA V100 in float32: 15.7 TFLOP/s peak, at the efficiency (47%) that makes
#: ResNet-50 train at about 300 images/s on one GPU (64 images of 3 x 8.2 GFLOP a step).
#: An assumption to replace with a measured figure where one exists.
V100 = Device(peak_flops=15.7e12, efficiency=0.47, name="V100")


@dataclass(frozen=True)
class Stragglers:
    """Per computation, each agent is slowed down independently.

    * ``probability``, ``factor``: with ``probability`` an agent's computation takes
      ``factor`` times as long;
    * ``tail``: a heavy tail instead, the slowdown ``1 + X`` with ``X`` Pareto-distributed of
      shape ``tail`` (a smaller shape: rarer, longer stalls);
    * ``trace``: recorded multipliers, one row per computation (each a number, or one per
      agent), used in turn and from the start again when they run out.

    Draws come from the platform's seeded generator, so a run is reproducible.
    """

    probability: float = 0.0
    factor: float = 1.0
    tail: float | None = None
    trace: npt.ArrayLike | None = None

    def __post_init__(self) -> None:
        p = _number(self.probability, "Stragglers.probability", low=0.0)
        if p > 1:
            raise ValueError(f"Stragglers.probability must be in [0, 1], got {self.probability}")
        _number(self.factor, "Stragglers.factor", low=1.0)
        if self.tail is not None:
            _number(self.tail, "Stragglers.tail", low=0.0, strict=True)
        if self.trace is not None:
            trace = np.asarray(self.trace, dtype=np.float64)
            if trace.ndim not in (1, 2) or trace.shape[0] == 0:
                raise ValueError("Stragglers.trace must hold one row per computation")
            if not np.all(np.isfinite(trace)) or np.any(trace <= 0):
                raise ValueError("Stragglers.trace must hold finite multipliers > 0")
            object.__setattr__(self, "trace", trace)

    def draw(self, rng: np.random.Generator, n: int, step: int) -> np.ndarray | None:
        """The ``n`` agents' multipliers for computation number ``step`` (None: all 1)."""
        out: np.ndarray | None = None
        trace = self.trace
        if trace is not None:
            assert isinstance(trace, np.ndarray)  # made one by __post_init__
            row = trace[step % trace.shape[0]]
            if row.ndim and row.shape != (n,):
                raise ValueError(
                    f"Stragglers.trace rows must hold one multiplier or {n} (one per agent), "
                    f"got {row.shape[0]}"
                )
            out = np.broadcast_to(row, (n,)).astype(np.float64)
        if self.probability > 0 and self.factor != 1:
            hit = rng.random(n) < self.probability
            out = (
                np.where(hit, self.factor, 1.0)
                if out is None
                else out * np.where(hit, self.factor, 1.0)
            )
        if self.tail is not None:
            slow = 1.0 + rng.pareto(self.tail, n)
            out = slow if out is None else out * slow
        return out


class Platform:
    """The cluster a clock models (see :mod:`fogsim.clock`).

    Parameters
    ----------
    network : fogsim.hierarchy.Network
        Levels, latencies, bandwidths and link sharing; its size is the number of agents.
    speed : number, sequence of n numbers, or callable
        Each agent's compute speed relative to the computations it is charged (2: twice as
        fast). A callable is called once with ``(rng, n)`` and returns the n speeds (a
        distribution drawn from the platform's seed).
    stragglers : Stragglers, optional
        Per-computation slowdowns.
    device : Device, optional
        What ``compute(flops=...)`` divides by (default: 1 FLOP per second).
    seed : int
        Seeds the speeds and the stragglers' draws.
    allreduce : str
        The cost model's default all-reduce algorithm (``"ring"``, ...).
    """

    network: Network
    speed: np.ndarray
    stragglers: Stragglers | None
    device: Device | None
    seed: int
    allreduce: str
    size: int

    def __init__(
        self,
        network: Network,
        speed: float | Sequence[float] | np.ndarray | Callable[..., Any] = 1.0,
        stragglers: Stragglers | None = None,
        device: Device | None = None,
        seed: int = 0,
        allreduce: str = "ring",
    ) -> None:
        if not isinstance(network, Network):
            raise TypeError(
                f"network must be a fogsim.hierarchy.Network, got {type(network).__name__}"
            )
        if stragglers is not None and not isinstance(stragglers, Stragglers):
            raise TypeError(f"stragglers must be a Stragglers, got {type(stragglers).__name__}")
        if device is not None and not isinstance(device, Device):
            raise TypeError(f"device must be a Device, got {type(device).__name__}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        self.network = network
        self.stragglers = stragglers
        self.device = device
        self.seed = int(seed)
        self.allreduce = allreduce
        self.size = network.size
        rng = np.random.default_rng([self.seed, 0])
        raw = np.asarray(speed(rng, self.size) if callable(speed) else speed, dtype=np.float64)
        speeds = np.broadcast_to(raw, (self.size,)) if raw.ndim == 0 else raw
        if speeds.shape != (self.size,):
            raise ValueError(
                f"speed must be a number or {self.size} numbers (one per agent of the "
                f"network), got shape {speeds.shape}"
            )
        if not np.all(np.isfinite(speeds)) or np.any(speeds <= 0):
            raise ValueError("speed must be finite and > 0 for every agent")
        self.speed = speeds.copy()

    @classmethod
    def uniform(
        cls, n: int, latency: float = 1e-5, bandwidth: float = 1.25e9, **options: Any
    ) -> Platform:
        """``n`` agents on one switch: every message pays ``latency`` (s) and shares its
        agent's link of ``bandwidth`` (bytes/s; default 10 Gb/s) with the agent's other
        messages. ``options``: those of :class:`Platform`."""
        return cls(
            Network([Level(n, alpha=latency, bandwidth=bandwidth, name="switch")]), **options
        )

    @classmethod
    def bluefog_cluster(cls, gpus: int, **options: Any) -> Platform:
        """The BlueFog paper's cluster (seed 000, section VII): machines of 8 V100 joined by
        NVLink, machines joined by 25 Gb/s Ethernet; ``gpus`` a multiple of 8 (or fewer than
        8: one machine). Compute on :data:`V100` unless ``device=`` says otherwise."""
        per = min(gpus, 8)
        if gpus % per:
            raise ValueError(f"gpus must be a multiple of 8 (8 V100 per machine), got {gpus}")
        net = Network(
            [
                Level(per, alpha=5e-6, bandwidth=130e9, name="NVLink"),
                Level(gpus // per, alpha=25e-6, bandwidth=25e9 / 8, name="25 Gb/s"),
            ]
        )
        options.setdefault("device", V100)
        return cls(net, **options)

    def __repr__(self) -> str:
        parts = [f"size={self.size}", f"levels={len(self.network.levels)}"]
        if not np.all(self.speed == 1):
            parts.append(f"speed=[{self.speed.min():g}..{self.speed.max():g}]")
        if self.stragglers is not None:
            parts.append(f"stragglers={self.stragglers}")
        if self.device is not None:
            parts.append(f"device={self.device.name or self.device.peak_flops}")
        return f"Platform({', '.join(parts)})"
