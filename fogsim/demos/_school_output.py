"""What a fish-school run gives back: its :class:`SchoolHistory`, and pictures of it (the
animated GIF and the estimation-error plot).

Private to :mod:`fogsim.demos.fish_school`, which re-exports :class:`SchoolHistory`,
:func:`animate` and :func:`plot_error`. matplotlib is imported only when drawing, and only its
object-oriented API (no pyplot): nothing here changes the caller's backend or leaves figures
open.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["SchoolHistory", "animate", "length", "plot_error"]


@dataclass
class SchoolHistory:
    """One run of the school: every fish's trajectory and estimates, step by step.

    Index ``k`` of each array is step ``k`` (0 is the start, ``steps`` the end).

    Attributes: ``positions``, ``velocities``, ``estimates`` (diffusion) and
    ``estimates_alone`` (each fish filtering only its own fixes), all ``(steps + 1, n, 2)``;
    ``predator`` ``(steps + 1, 2)``; ``errors``, ``errors_alone`` and ``errors_central``
    ``(steps + 1,)``: the mean distance of the fish's estimates to the true predator, for
    diffusion, for lone fish, and for a fusion center tracking the average of every fish's
    fix (what diffusion would reach if every fish heard every other); ``modes`` the mode at
    each step; ``params`` the run's parameters. At step 0 every estimate is the fish's first
    fix.
    """

    positions: np.ndarray
    velocities: np.ndarray
    estimates: np.ndarray
    estimates_alone: np.ndarray
    predator: np.ndarray
    errors: np.ndarray
    errors_alone: np.ndarray
    errors_central: np.ndarray
    modes: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Return the number of fish."""
        return int(self.positions.shape[1])

    @property
    def steps(self) -> int:
        """Return the number of steps run."""
        return int(self.positions.shape[0]) - 1

    def predator_distance(self) -> np.ndarray:
        """Return the mean distance of the fish to the true predator at every step."""
        mean: np.ndarray = length(self.positions - self.predator[:, None, :])[..., 0].mean(axis=1)
        return mean

    def trajectories(self) -> np.ndarray:
        """Return positions, velocities and estimates side by side, ``(steps + 1, n, 6)``."""
        return np.concatenate([self.positions, self.velocities, self.estimates], axis=-1)


def length(a: np.ndarray) -> np.ndarray:
    """Return ``|a|`` over the last axis (of length 2), keeping it: correctly rounded ops only."""
    out: np.ndarray = np.sqrt(a[..., 0:1] * a[..., 0:1] + a[..., 1:2] * a[..., 1:2])
    return out


def animate(
    history: SchoolHistory,
    path: str | Path,
    *,
    every: int = 1,
    fps: int = 15,
    dpi: int = 72,
    view: tuple[float, float, float, float] | None = None,
) -> Path:
    """Write the run as an animated GIF (matplotlib's PillowWriter) and return its path.

    Fish are blue arrows (their heading), their estimates of the predator orange dots, the
    predator a red star with its track. ``every``: keep one step in ``every``. ``view``:
    ``(xmin, xmax, ymin, ymax)``, default a square around every position of the run.
    """
    from matplotlib.animation import FuncAnimation, PillowWriter
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if isinstance(every, bool) or not isinstance(every, int | np.integer) or every < 1:
        raise ValueError(f"every must be an integer >= 1, got {every!r}")
    frames = list(range(0, history.steps + 1, every))
    P, V, E, Q = history.positions, history.velocities, history.estimates, history.predator
    if view is None:
        corners = np.concatenate([P.reshape(-1, 2), Q])
        low, high = corners.min(axis=0), corners.max(axis=0)
        center, half = 0.5 * (low + high), 0.52 * float((high - low).max()) + 0.5
        view = (center[0] - half, center[0] + half, center[1] - half, center[1] + half)

    fig = Figure(figsize=(5, 5), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set(xlim=view[:2], ylim=view[2:], aspect="equal", xticks=[], yticks=[])
    heading = V[0] / _norm(V[0])
    fish = ax.quiver(
        *P[0].T, *heading.T, color="tab:blue", pivot="middle", scale=40, width=0.004, label="fish"
    )
    (trail,) = ax.plot([], [], color="tab:red", lw=1, alpha=0.5)
    (shark,) = ax.plot(*Q[0], marker="*", color="tab:red", ms=11, ls="", label="predator")
    x, y = E[0].T
    guesses = ax.scatter(
        x, y, s=5, color="tab:orange", alpha=0.6, lw=0, zorder=3, label="fish's estimates"
    )
    title = ax.set_title("")
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.93, bottom=0.08)

    def draw(k: int) -> tuple[Any, ...]:
        heading = V[k] / _norm(V[k])
        fish.set_offsets(P[k])
        fish.set_UVC(heading[:, 0], heading[:, 1])
        guesses.set_offsets(E[k])
        shark.set_data([Q[k, 0]], [Q[k, 1]])
        trail.set_data(Q[: k + 1, 0], Q[: k + 1, 1])
        title.set_text(f"step {k}  {history.modes[k]}  estimate error {history.errors[k]:.2f}")
        return fish, guesses, shark, trail, title

    path = Path(path)
    anim = FuncAnimation(fig, draw, frames=frames, blit=False)
    anim.save(path, writer=PillowWriter(fps=fps), dpi=dpi)
    return path


def plot_error(
    history: SchoolHistory, path: str | Path | None = None, ax: Axes | None = None
) -> Any:
    """Plot the estimation error over time (lone fish, diffusion, fusion center).

    Draws on ``ax`` if given, else on a new figure; saves it to ``path`` if given. Returns the
    figure.
    """
    if ax is None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig: Any = Figure(figsize=(6, 3.5))  # or the given axes' figure (or subfigure)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    steps = np.arange(history.steps + 1)
    ax.semilogy(steps, history.errors_alone, label="each fish alone", color="tab:gray")
    ax.semilogy(steps, history.errors, label="diffusion (neighbors)", color="tab:blue")
    ax.semilogy(
        steps, history.errors_central, label="fusion center (all fish)", color="tab:green", ls="--"
    )
    ax.set(
        xlabel="step",
        ylabel="mean |estimate - predator|",
        title=f"{history.n} fish, {'/'.join(dict.fromkeys(history.modes))}",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _norm(v: np.ndarray) -> np.ndarray:
    """Return the lengths of the rows of ``v``, ``(n, 1)``, at least a tiny positive number."""
    lengths: np.ndarray = np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)
    return lengths
