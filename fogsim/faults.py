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

Everything is drawn from ``seed`` (default: the world's seed), so a run is reproducible:
the drops of step ``t`` are the entries of one ``rng.random(nnz)`` draw below ``p``, one
number per nonzero entry of ``W`` in canonical CSR order (diagonal included), drawn
whether or not an agent is down (the noise is drawn after it).

What happened is counted, over the steps since :func:`inject` (a message is a nonzero
off-diagonal entry ``W[i, j]``, from sender ``j`` to receiver ``i``)::

    f = faults.current()
    f.messages    # messages the steps' matrices carried before faults
    f.unsent      # of them, to or from an agent that was down
    f.dropped     # of the others, lost by link_drop
    f.delivered   # the rest: messages - unsent - dropped
    f.delayed     # delivered ones that carried an older value (a straggler's)
    f.last        # what the last step did: a FaultStep (see below), None before it

:class:`FaultStep` holds ``step``; ``dropped``, an (n, n) boolean CSR matrix, True where
the message from ``j`` to ``i`` was lost by ``link_drop``; ``down``, the agents down;
``delay``, how many steps old each agent's delivered value was (a straggler heard ``d``
steps late is heard ``min(d, t)`` steps late at step ``t``); and ``weights``, the matrix
applied. The faults act on the simulator's neighbor averaging; the distributed runtimes
run real networks, and :func:`inject` refuses them.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp

__all__ = ["FaultStep", "Faults", "clear", "current", "inject"]

_DROPPED = ("self", "sender", "none")

# The noise is added in numba (``_faults_nb``, the same numbers) once a Faults has added
# this many entries (messages x values) in all: ``np.add.at`` and its temporaries cost about
# 30-50 ns an entry, importing numba and loading the kernel about 1 s, so small runs never
# import numba and a long one loses at most about that second.
_COMPILE_AFTER = 1 << 24


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


class FaultStep(NamedTuple):
    """What the faults did at one step (see the module docstring)."""

    step: int
    dropped: sp.csr_array  # (receiver, sender) -> lost by link_drop
    down: np.ndarray  # the agents down
    delay: np.ndarray  # steps by which each agent's delivered value is old
    weights: sp.csr_array  # the matrix applied


class Faults:
    """The faults of one simulated world (see the module docstring); made by :func:`inject`."""

    def __init__(
        self,
        n: int,
        link_drop: float = 0.0,
        fail: Mapping[int, int] | None = None,
        stragglers: Mapping[int, int] | None = None,
        noise: float = 0.0,
        dropped_weight: str = "self",
        seed: int | None = None,
    ) -> None:
        self.n: int = n
        self.link_drop: float = _probability(link_drop, "link_drop")
        self.fail: dict[int, int] = _agent_map(fail, n, "fail", "step")
        self.stragglers: dict[int, int] = _agent_map(stragglers, n, "stragglers", "delay")
        if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not noise >= 0:
            raise ValueError(f"noise must be a standard deviation >= 0, got {noise!r}")
        self.noise: float = float(noise)
        if dropped_weight not in _DROPPED:
            raise ValueError(f"dropped_weight must be one of {_DROPPED}, got {dropped_weight!r}")
        self.dropped_weight: str = dropped_weight
        self.rng: np.random.Generator = np.random.default_rng(seed)
        self.step: int = 0
        depth = max(self.stragglers.values(), default=0) + 1
        self._history: deque[np.ndarray] = deque(maxlen=depth)
        self.messages: int = 0
        self.unsent: int = 0
        self.dropped: int = 0
        self.delivered: int = 0
        self.delayed: int = 0
        self.last: FaultStep | None = None
        self._noise_entries: int = 0  # noise entries added so far (see _COMPILE_AFTER)

    def failed(self, step: int | None = None) -> np.ndarray:
        """The agents down at ``step`` (default: the next step), as a boolean mask."""
        t = self.step if step is None else step
        mask = np.zeros(self.n, dtype=bool)
        for agent, at in self.fail.items():
            mask[agent] = t >= at
        return mask

    def weights(self, W: sp.csr_array) -> sp.csr_array:
        """Draw this step's matrix: ``W`` with the lost messages' weights moved (module doc).

        It draws from the generator but neither counts nor advances the step; :meth:`apply`
        does both.
        """
        return self._draw(W)[0]

    def _draw(
        self, W: sp.csr_array
    ) -> tuple[sp.csr_array, sp.csr_array, np.ndarray, tuple[int, int, int]]:
        W = sp.csr_array(W, dtype=np.float64, copy=True)
        W.sum_duplicates()
        W.eliminate_zeros()  # a zero weight is no message
        coo = W.tocoo()
        rows, cols, data = coo.row, coo.col, coo.data.copy()
        off = rows != cols
        down = self.failed()
        unsent = off & (down[cols] | down[rows])  # a failed agent neither sends nor receives
        dropped = np.zeros_like(off)
        if self.link_drop:
            dropped = off & ~unsent & (self.rng.random(len(data)) < self.link_drop)
        lost = unsent | dropped
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
        counts = (int(off.sum()), int(unsent.sum()), int(dropped.sum()))
        mask = sp.csr_array((dropped[dropped], (rows[dropped], cols[dropped])), shape=W.shape)
        return sp.csr_array(out), mask, down, counts

    def apply(self, W: sp.csr_array, x: np.ndarray) -> np.ndarray:
        """Apply one faulty step ``x <- W' x`` to stacked ``x`` of shape (n, m); count it."""
        Wf, mask, down, (messages, unsent, dropped) = self._draw(W)
        delay = np.zeros(self.n, dtype=np.int64)
        if self.stragglers:  # a copy: the caller may change x in place later
            self._history.append(x.copy())
        stale = x
        if self.stragglers:
            stale = x.copy()
            for agent, d in self.stragglers.items():
                delay[agent] = min(d, len(self._history) - 1)
                stale[agent] = self._history[-1 - delay[agent]][agent]
        diag = Wf.diagonal()
        off = Wf - sp.diags_array(diag)
        out = off @ stale + diag[:, None] * x
        coo = sp.coo_array(off)
        if self.noise:
            eps = self.rng.standard_normal((coo.nnz, x.shape[1]))
            compiled = self._noise_entries >= _COMPILE_AFTER
            self._noise_entries += eps.size
            _add_noise(out, coo.row, coo.data, eps, self.noise, compiled)
        self.messages += messages
        self.unsent += unsent
        self.dropped += dropped
        self.delivered += messages - unsent - dropped
        self.delayed += int(np.count_nonzero(delay[coo.col[coo.data != 0]]))
        self.last = FaultStep(self.step, mask, down, delay, Wf)
        self.step += 1
        result: np.ndarray = out.astype(x.dtype, copy=False)
        return result


def _add_noise(
    out: np.ndarray,
    rows: np.ndarray,
    weights: np.ndarray,
    eps: np.ndarray,
    sigma: float,
    compiled: bool,
) -> None:
    """Add ``weights[k] * (sigma * eps[k])`` to ``out[rows[k]]`` for each message ``k`` in turn."""
    if compiled and out.dtype == np.float64 and out.ndim == 2:
        try:
            from ._faults_nb import add_noise
        except ImportError:  # numba missing: np.add.at adds the same numbers
            pass
        else:
            add_noise(out, rows, weights, eps, sigma)
            return
    np.add.at(out, rows, weights[:, None] * (eps * sigma))


def inject(
    link_drop: float = 0.0,
    fail: Mapping[int, int] | None = None,
    stragglers: Mapping[int, int] | None = None,
    noise: float = 0.0,
    dropped_weight: str = "self",
    seed: int | None = None,
) -> Faults:
    """Make the current simulated world's neighbor averaging faulty; return the :class:`Faults`.

    Replaces any faults injected before; :func:`clear` removes them.
    """
    import fogsim as fs

    ctx = fs._context.current()
    backend = ctx.simulator("faults.inject")
    if seed is None:
        seed = ctx.seed
    faults = Faults(backend.size_int, link_drop, fail, stragglers, noise, dropped_weight, seed)
    backend.set_faults(faults)
    return faults


def clear() -> None:
    """Remove the injected faults of the current simulated world."""
    import fogsim as fs

    ctx = fs._context.current()
    if ctx.is_simulated:
        ctx.simulator("faults.clear").set_faults(None)


def current() -> Faults | None:
    """The faults of the current simulated world, or None."""
    import fogsim as fs

    ctx = fs._context.current()
    return ctx.simulator("faults.current").faults if ctx.is_simulated else None
