"""The value every algorithm returns: the final state and the per-iteration metrics."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Result"]

_AXES = {  # the x axes of Result.plot, with their labels
    "iteration": "iteration",
    "bytes": "bytes sent per agent",
    "time": "simulated time (s)",
}


@dataclass(repr=False)
class Result:
    """The outcome of a run of a decentralized algorithm.

    Attributes
    ----------
    x : array
        The final agent-local value (stacked ``(n, ...)`` in simulation, the block's rows
        ``(len(fs.rank()), ...)`` in a sharded simulation, this agent's own value under
        MPI); for push-sum methods the de-biased estimate ``z / p``. ``fs.global_view(x)``
        gives every agent's.
    history : dict of str to ndarray
        Per-iteration metrics, each of length ``iters + 1`` (index 0: the initial state),
        the same on every agent and every process (reduced with ``allreduce``, never read
        from rows a process lacks): those of one process bit for bit under MPI's one agent
        per rank, to rounding (1e-12 relative) when sharded, e.g.

        * ``"consensus_error"``: ``sqrt(mean_i ||x_i - xbar||^2)``, ``xbar = mean_i x_i``;
        * ``"distance"``: ``sqrt(mean_i ||x_i - x*||^2)`` to the target (the optimum, the
          initial average, the moving target);
        * ``"grad_norm"``: ``||(1/n) sum_i grad f_i(xbar)||``;
        * ``"bytes"``: the bytes each agent has sent since the run began, averaged over the
          agents (index 0: 0), as ``fs.bytes_sent()`` counts them: the values of the
          neighbor ops once per destination; not ``allreduce`` (Gossip-PGA's global
          averages, the metrics themselves) nor the window ops. Every algorithm records
          it, so ``plt.semilogy(h["bytes"], h["consensus_error"])`` plots error against
          communication (or ``plot(against="bytes")``);
        * ``"time"``, while a :mod:`fogsim.clock` runs: the simulated seconds since the run
          began (the agents' clocks averaged; wall-clock seconds under MPI or torch), for
          ``plot(against="time")``.

        For a batch of S problems (a problem with ``batch_shape == (S,)``, such as
        ``LeastSquares.random(m, d, seed=[...])``) every metric but ``"bytes"`` and
        ``"time"`` has shape ``(iters + 1, S)``, one column per problem.
    state : dict of str to array
        The algorithm's other final agent-local variables (e.g. ``"y"`` of gradient
        tracking, ``"p"`` of push-sum), to inspect or to continue from.
    """

    x: np.ndarray
    history: dict[str, np.ndarray] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        shape = tuple(np.shape(self.x))
        # a batch of problems (history of shape (iters + 1, S)) shows its worst
        last = ", ".join(
            f"{k}={float(np.max(v[-1])):.3e}" for k, v in self.history.items() if len(v)
        )
        iters = max((len(v) for v in self.history.values()), default=1) - 1
        return f"Result(x: shape {shape}, iters={iters}{', ' if last else ''}{last})"

    def plot(
        self,
        ax: Axes | None = None,
        keys: str | Sequence[str] | None = None,
        logy: bool = True,
        against: str = "iteration",
    ) -> Axes:
        """Plot the metrics against the iteration, the bytes sent or the simulated time;
        return the axes.

        Parameters
        ----------
        ax : matplotlib Axes, optional
            Where to draw; a new figure when None.
        keys : str or sequence of str, optional
            The metrics to draw (default: all of ``history`` but ``"bytes"`` and ``"time"``).
        logy : bool
            Logarithmic y axis (zeros are left out).
        against : {"iteration", "bytes", "time"}
            The x axis: the iteration, ``history["bytes"]`` (error against communication),
            or ``history["time"]`` (error against the seconds a :mod:`fogsim.clock` gave
            the run).
        """
        if against not in _AXES:
            raise ValueError(f"against must be 'iteration', 'bytes' or 'time', got {against!r}")
        if against != "iteration" and against not in self.history:
            hint = " (start a fogsim.clock before the run)" if against == "time" else ""
            raise ValueError(f"no metric {against!r} in history to plot against{hint}")
        if keys is None:
            keys = [k for k in self.history if k not in ("bytes", "time")]
        elif isinstance(keys, str):
            keys = [keys]
        unknown = [k for k in keys if k not in self.history]
        if unknown:
            raise ValueError(f"no metric {unknown[0]!r} in history (has {sorted(self.history)})")
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(5, 3.5))
        for key in keys:
            values = np.asarray(self.history[key], dtype=np.float64)
            xs: np.ndarray
            if against == "iteration":
                xs = np.arange(values.shape[0])
            else:
                xs = np.asarray(self.history[against], dtype=np.float64)
            ax.plot(xs, values, label=key)
        if logy:
            ax.set_yscale("log", nonpositive="mask")
        ax.set_xlabel(_AXES[against])
        if keys:
            ax.legend()
        return ax
