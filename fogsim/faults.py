"""Fault injection in simulation: dropped links, failed agents, stragglers, noisy links.

    import fogsim as fs
    from fogsim import faults

    fs.init(size=16, seed=0)
    faults.inject(link_drop=0.2, fail={3: 50}, stragglers={5: 2}, noise=1e-3, seed=1)
    ...                                   # every neighbor_allreduce step now suffers them
    faults.clear()

Each :func:`fogsim.neighbor_allreduce` call is one step ``t`` (counted from
:func:`inject`); its weight matrix ``W`` (the topology's, or the call's weights) is
changed before it is applied:

* ``link_drop=p``: each message (off-diagonal entry of ``W``) is lost with probability
  ``p`` this step, independently;
* ``fail={agent: step}``: from that step on the agent is down: it sends nothing, and keeps
  its value (its row becomes the identity);
* ``stragglers={agent: d}``: its neighbors receive its value from ``d`` steps earlier;
* ``noise=sigma``: every received message gets independent Gaussian noise of standard
  deviation ``sigma`` per entry.

A lost message's weight goes, per ``dropped_weight``:

* ``"self"`` (default): to the receiver's own value, so each row still sums to what it
  summed to (rows stay stochastic: averaging still averages; with a symmetric ``W`` and a
  failed agent, the live agents' matrix stays doubly stochastic);
* ``"sender"``: back to the sender's own value, so each column still sums to what it did
  (column-stochastic weights stay so: push-sum keeps the mass of the live agents; the
  receiver cannot know the message was lost, but its sender can, by an acknowledgement);
* ``"none"``: nowhere (the rows no longer sum to one).

Everything is drawn from ``seed`` (default: the world's seed), so a run is reproducible.
The faults act on the simulator's neighbor averaging; the distributed runtimes run real
networks, and :func:`inject` refuses them.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["Faults", "clear", "current", "inject"]

_DROPPED = ("self", "sender", "none")


def _probability(value: Any, argname: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argname} must be a number in [0, 1], got {type(value).__name__}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{argname} must be in [0, 1], got {value}")
    return float(value)


def _agent_map(value: Any, n: int, argname: str, what: str) -> dict[int, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{argname} must be a dict {{agent: {what}}}, got {type(value).__name__}")
    out = {}
    for agent, number in value.items():
        for v, name in ((agent, "agent"), (number, what)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{argname}: {name} {v!r} must be an integer")
        if not 0 <= agent < n:
            raise ValueError(f"{argname}: agent {agent} is out of range for {n} agents")
        if number < 0:
            raise ValueError(f"{argname}: {what} for agent {agent} must be >= 0, got {number}")
        out[int(agent)] = int(number)
    return out


class Faults:
    """The faults of one simulated world (see the module docstring); made by :func:`inject`."""

    def __init__(self, n: int, link_drop: float = 0.0, fail: Any = None, stragglers: Any = None,
                 noise: float = 0.0, dropped_weight: str = "self",
                 seed: int | None = None) -> None:  # fmt: skip
        self.n = n
        self.link_drop = _probability(link_drop, "link_drop")
        self.fail = _agent_map(fail, n, "fail", "step")
        self.stragglers = _agent_map(stragglers, n, "stragglers", "delay")
        if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not noise >= 0:
            raise ValueError(f"noise must be a standard deviation >= 0, got {noise!r}")
        self.noise = float(noise)
        if dropped_weight not in _DROPPED:
            raise ValueError(f"dropped_weight must be one of {_DROPPED}, got {dropped_weight!r}")
        self.dropped_weight = dropped_weight
        self.rng = np.random.default_rng(seed)
        self.step = 0
        self._history: deque = deque(maxlen=max(self.stragglers.values(), default=0) + 1)

    def failed(self, step: int | None = None) -> np.ndarray:
        """The agents down at ``step`` (default: the next step), as a boolean mask."""
        t = self.step if step is None else step
        mask = np.zeros(self.n, dtype=bool)
        for agent, at in self.fail.items():
            mask[agent] = t >= at
        return mask

    def weights(self, W: sp.csr_array) -> sp.csr_array:
        """This step's matrix: ``W`` with the lost messages' weights moved (see module doc)."""
        W = sp.csr_array(W, dtype=np.float64, copy=True)
        W.sum_duplicates()
        coo = W.tocoo()
        rows, cols, data = coo.row, coo.col, coo.data.copy()
        off = rows != cols
        down = self.failed()
        lost = off & (down[cols] | down[rows])  # a failed agent neither sends nor receives
        if self.link_drop:
            lost |= off & (self.rng.random(len(data)) < self.link_drop)
        moved = np.where(lost, data, 0.0)
        data[lost] = 0.0
        diag = np.zeros(self.n)
        diag[rows[~off]] = data[~off]
        if self.dropped_weight == "self":
            np.add.at(diag, rows, moved)
        elif self.dropped_weight == "sender":
            np.add.at(diag, cols, moved)
        diag[down] = 1.0  # a failed agent keeps its value
        data[~off] = 0.0
        out = sp.csr_array((data, (rows, cols)), shape=W.shape) + sp.diags_array(diag)
        out.eliminate_zeros()
        return sp.csr_array(out)

    def apply(self, W: sp.csr_array, x: np.ndarray) -> np.ndarray:
        """One faulty step ``x <- W' x`` on stacked ``x`` of shape (n, m)."""
        Wf = self.weights(W)
        if self.stragglers:  # a copy: the caller may change x in place later
            self._history.append(x.copy())
        stale = x
        if self.stragglers:
            stale = x.copy()
            for agent, d in self.stragglers.items():
                past = self._history[max(0, len(self._history) - 1 - d)]
                stale[agent] = past[agent]
        diag = Wf.diagonal()
        off = Wf - sp.diags_array(diag)
        out = off @ stale + diag[:, None] * x
        if self.noise:
            coo = sp.coo_array(off)
            eps = self.rng.standard_normal((coo.nnz, x.shape[1])) * self.noise
            np.add.at(out, coo.row, coo.data[:, None] * eps)
        self.step += 1
        return out.astype(x.dtype, copy=False)


def inject(link_drop: float = 0.0, fail: Any = None, stragglers: Any = None,
           noise: float = 0.0, dropped_weight: str = "self",
           seed: int | None = None) -> Faults:  # fmt: skip
    """Make the current simulated world's neighbor averaging faulty; return the :class:`Faults`.

    Replaces any faults injected before; :func:`clear` removes them.
    """
    import fogsim as fs

    backend = fs._api._backend()
    if not hasattr(backend, "set_faults"):
        raise ValueError(
            f"faults.inject: the {backend.name} backend runs a real network; fault injection "
            "is for the simulator (init(backend='sim'))"
        )
    if seed is None:
        seed = fs._context.current().seed
    faults = Faults(backend.size_int, link_drop, fail, stragglers, noise, dropped_weight, seed)
    backend.set_faults(faults)
    return faults


def clear() -> None:
    """Remove the injected faults of the current simulated world."""
    import fogsim as fs

    backend = fs._api._backend()
    if hasattr(backend, "set_faults"):
        backend.set_faults(None)


def current() -> Faults | None:
    """The faults of the current simulated world, or None."""
    import fogsim as fs

    return getattr(fs._api._backend(), "_faults", None)
