"""How heterogeneous a split is: per-agent label histograms and summary numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Report"]

# Past this many agents, plot() draws a heat map instead of stacked bars.
_BARS_UP_TO = 64


class Report:
    """Label heterogeneity of a split: what :meth:`Partition.report` returns.

    Parameters
    ----------
    counts : array_like
        ``counts[i, k]``: agent i's number of samples of class k (agents x classes).
    scheme : str, optional
        The split's description, shown in :meth:`summary`.

    Notes
    -----
    With ``p_ik = counts[i, k] / sizes[i]`` agent i's label distribution and
    ``p_k = sum_i counts[i, k] / sum_i sizes[i]`` the distribution of the samples the
    split assigns, agent i's total-variation distance is

        ``TV_i = 1/2 sum_k |p_ik - p_k|``,

    between 0 (the global mix) and ``1 - p_min`` (one class only). An agent with no sample
    has no distribution: its ``tv`` and ``proportions`` row are NaN, and the averages
    (:attr:`mean_tv`, :attr:`mean_classes`) leave it out and :meth:`summary` says so.
    """

    def __init__(self, counts: np.ndarray, scheme: str = "") -> None:
        c = np.asarray(counts)
        if c.ndim != 2 or c.dtype.kind not in "iu" or (c.size and c.min() < 0):
            raise ValueError("counts must be a 2-D array of non-negative integers")
        self.counts: np.ndarray = c.astype(np.int64)
        """``counts[i, k]``: agent i's number of samples of class k."""
        self.scheme = scheme
        self.sizes: np.ndarray = self.counts.sum(axis=1)
        """Each agent's number of samples."""
        total = self.counts.sum(axis=0)
        self.global_distribution: np.ndarray = total / max(int(total.sum()), 1)
        """The class distribution ``p_k`` of all the samples assigned."""
        with np.errstate(invalid="ignore", divide="ignore"):
            self.proportions: np.ndarray = self.counts / self.sizes[:, None]
        """``p_ik``, agent i's class distribution (NaN rows for empty agents)."""
        self.tv: np.ndarray = 0.5 * np.abs(self.proportions - self.global_distribution).sum(axis=1)
        """Each agent's total-variation distance to the global distribution (NaN: empty)."""
        self.tv[self.sizes == 0] = np.nan
        self.classes_per_agent: np.ndarray = (self.counts > 0).sum(axis=1)
        """How many distinct classes each agent holds."""
        self.empty: np.ndarray = np.flatnonzero(self.sizes == 0)
        """The agents holding no sample."""

    @property
    def agents(self) -> int:
        """The number of agents."""
        return int(self.counts.shape[0])

    @property
    def n_classes(self) -> int:
        """The number of classes (the largest label plus one)."""
        return int(self.counts.shape[1])

    @property
    def mean_tv(self) -> float:
        """The mean of ``tv`` over the non-empty agents (NaN if all are empty)."""
        held = self.sizes > 0
        return float(self.tv[held].mean()) if held.any() else float("nan")

    @property
    def mean_classes(self) -> float:
        """The mean number of classes per non-empty agent."""
        held = self.sizes > 0
        return float(self.classes_per_agent[held].mean()) if held.any() else float("nan")

    def summary(self) -> str:
        """Return a few lines describing the split (what ``print(report)`` shows)."""
        s = self.sizes
        lines = [
            f"{self.scheme or 'split'}: {self.agents} agents, {int(s.sum())} samples, "
            f"{self.n_classes} classes",
            f"  sizes: min {int(s.min())}, median {float(np.median(s)):g}, max {int(s.max())}",
            f"  mean TV distance to the global label distribution: {self.mean_tv:.3f} "
            f"(max {np.nanmax(self.tv) if s.any() else float('nan'):.3f})",
            f"  classes per agent: mean {self.mean_classes:.2f}, "
            f"min {int(self.classes_per_agent.min())}, max {int(self.classes_per_agent.max())}",
        ]
        if self.empty.size:
            lines.append(
                f"  {self.empty.size} empty agent(s), left out of the means: "
                + ", ".join(str(int(r)) for r in self.empty[:10])
                + (", ..." if self.empty.size > 10 else "")
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return (
            f"Report({self.scheme or 'split'}: {self.agents} agents, {self.n_classes} classes, "
            f"mean TV {self.mean_tv:.3f}, {self.empty.size} empty)"
        )

    def plot(self, ax: Axes | None = None, *, kind: str = "auto") -> Axes:
        """Draw each agent's class proportions and return the matplotlib Axes.

        ``kind="bars"``: one stacked bar per agent (a colour per class); ``"heatmap"``: an
        agents x classes image of the proportions; ``"auto"`` (default): bars up to 64
        agents, else the heat map. Empty agents show as an empty bar (a blank row).
        """
        import matplotlib.pyplot as plt

        if kind == "auto":
            kind = "bars" if self.agents <= _BARS_UP_TO else "heatmap"
        if kind not in ("bars", "heatmap"):
            raise ValueError(f"kind must be 'auto', 'bars' or 'heatmap', got {kind!r}")
        if ax is None:
            _, ax = plt.subplots(figsize=(max(4.0, min(12.0, 0.25 * self.agents + 2)), 3.5))
        p = np.nan_to_num(self.proportions)
        agents = np.arange(self.agents)
        if kind == "bars":
            colors = plt.get_cmap("tab10" if self.n_classes <= 10 else "viridis")
            bottom = np.zeros(self.agents)
            for k in range(self.n_classes):
                shade = colors(k if self.n_classes <= 10 else k / max(self.n_classes - 1, 1))
                ax.bar(agents, p[:, k], bottom=bottom, color=shade, width=0.9, label=str(k))
                bottom += p[:, k]
            ax.set_ylabel("class proportion")
            ax.set_ylim(0, 1)
            if self.n_classes <= 20:
                ax.legend(title="class", fontsize="small", loc="upper left", bbox_to_anchor=(1, 1))
        else:
            image = ax.imshow(p.T, aspect="auto", interpolation="nearest", cmap="viridis")
            ax.figure.colorbar(image, ax=ax, label="class proportion")
            ax.set_ylabel("class")
        ax.set_xlabel("agent")
        ax.set_title(f"{self.scheme} (mean TV {self.mean_tv:.2f})" if self.scheme else "")
        return ax
