"""A reproducible model of asynchrony for the simulator's one-sided window ops.

Simulated time advances in rounds (a round ends at each ``win_update``). An
:class:`Asynchrony` draws, from its own seeded numpy Generator, which agents are active in
a round and how late each message arrives or whether it is lost; the simulator's window
ops (``fogsim.backends.sim._windows``) ask it. The default, ``Asynchrony(n)``, draws
nothing at all: every agent is active and every message arrives at once (lock-step).
Distributed backends build one only to check :func:`fogsim.set_asynchrony`'s arguments.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = ["ACTIVATIONS", "DEFAULT_SEED", "Asynchrony"]

#: The activation rules (see :func:`fogsim.set_asynchrony`).
ACTIVATIONS = ("all", "one", "bernoulli", "speeds", "clock")

#: The seed used when neither the call nor the world gives one, so runs stay reproducible.
DEFAULT_SEED = 0

# Mixed into the seed, so a world's seed drives asynchrony on a stream of its own rather
# than replaying the draws of ``np.random.default_rng(seed)`` (the world's generator).
_STREAM = 0x6173796E


def _real(value: Any, argname: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argname} must be a real number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{argname} must be finite, got {number}")
    return number


def _int(value: Any, argname: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{argname} must be an integer, got {type(value).__name__}")
    return int(value)


class Asynchrony:
    """Which agents act in a round, and when (or whether) each message arrives.

    ``activation``: ``"all"`` (every agent every round), ``"one"`` (one agent drawn
    uniformly), ``"bernoulli"`` (each agent with probability ``p_active``) or ``"speeds"``
    (agent i with probability ``speeds[i] / max(speeds)``) or ``"clock"`` (the agents whose
    virtual clocks are the earliest: the simulator's window ops decide, from the world's
    :mod:`fogsim.clock`; :meth:`draw_active` cannot). Each message is ``d`` rounds
    late, ``d`` uniform in ``0..max_delay``, and lost with probability ``loss``.
    """

    def __init__(
        self,
        n: int,
        activation: str = "all",
        *,
        p_active: float = 0.5,
        speeds: Any = None,
        max_delay: int = 0,
        loss: float = 0.0,
        seed: int | None = None,
    ) -> None:
        n = _int(n, "n")
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not isinstance(activation, str):
            raise TypeError(f"activation must be a string, got {type(activation).__name__}")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}"
            )
        p_active = _real(p_active, "p_active")
        if not 0.0 < p_active <= 1.0:
            raise ValueError(f"p_active must be in (0, 1], got {p_active}")
        if activation == "speeds":
            if speeds is None:
                raise ValueError("activation='speeds' needs speeds: one positive number per agent")
            speeds = self._speeds(speeds, n)
        elif speeds is not None:
            raise ValueError(f"speeds is only used with activation='speeds', not {activation!r}")
        max_delay = _int(max_delay, "max_delay")
        if max_delay < 0:
            raise ValueError(f"max_delay must be >= 0 rounds, got {max_delay}")
        loss = _real(loss, "loss")
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        if seed is not None:
            seed = _int(seed, "seed")
            if seed < 0:
                raise ValueError(f"seed must be >= 0, got {seed}")
        self.n = n
        self.activation = activation
        self.p_active = p_active
        self.speeds: np.ndarray | None = speeds
        self.max_delay = max_delay
        self.loss = loss
        self.seed = DEFAULT_SEED if seed is None else seed
        self.rng = np.random.default_rng([_STREAM, self.seed])

    @staticmethod
    def _speeds(speeds: Any, n: int) -> np.ndarray:
        if hasattr(speeds, "detach"):  # a torch tensor
            speeds = speeds.detach().cpu().numpy()
        try:
            arr = np.array(speeds, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"speeds must hold real numbers, got {speeds!r:.60}") from None
        if arr.shape != (n,):
            raise ValueError(f"speeds has shape {arr.shape}; expected one speed per agent ({n},)")
        bad = np.flatnonzero(~np.isfinite(arr) | (arr <= 0))
        if bad.size:
            raise ValueError(f"speeds[{bad[0]}] is {arr[bad[0]]}; speeds must be positive, finite")
        arr.setflags(write=False)
        return arr

    @property
    def lock_step(self) -> bool:
        """Whether every agent acts every round and every message arrives at once."""
        return self.activation == "all" and self.max_delay == 0 and self.loss == 0.0

    def draw_active(self) -> np.ndarray | None:
        """Return the ascending ranks active in a new round (None: every agent)."""
        if self.activation == "all":
            return None
        if self.activation == "clock":
            raise ValueError("activation='clock' is decided by the agents' clocks, not drawn")
        if self.activation == "one":
            return np.array([self.rng.integers(self.n)], dtype=np.int64)
        if self.activation == "bernoulli":
            mask = self.rng.random(self.n) < self.p_active
        else:
            assert self.speeds is not None
            mask = self.rng.random(self.n) < self.speeds / self.speeds.max()
        return np.flatnonzero(mask)

    def draw_delays(self, count: int) -> np.ndarray | None:
        """Return each of ``count`` messages' delay in rounds (None: all arrive at once)."""
        if self.max_delay == 0:
            return None
        return self.rng.integers(0, self.max_delay + 1, size=count)

    def draw_lost(self, count: int) -> np.ndarray | None:
        """Return whether each of ``count`` messages is lost (None: none is)."""
        if self.loss == 0.0:
            return None
        return self.rng.random(count) < self.loss

    def __repr__(self) -> str:
        extra = {
            "one": "",
            "all": "",
            "clock": "",
            "bernoulli": f", p_active={self.p_active}",
            "speeds": f", speeds={self.speeds}",
        }[self.activation]
        return (
            f"Asynchrony(n={self.n}, activation={self.activation!r}{extra}, "
            f"max_delay={self.max_delay}, loss={self.loss}, seed={self.seed})"
        )
