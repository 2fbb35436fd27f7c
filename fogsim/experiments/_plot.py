"""Plots of a sweep: the mean over seeds against iterations, bytes or time, with a band."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._configs import Value

__all__ = ["draw"]

_X = {"iteration": "iteration", "bytes": "bytes sent per agent", "time": "simulated time (s)"}
_BANDS = ("std", "minmax", None)


def draw(
    results: Any,
    metric: str,
    x: str,
    hue: str | None,
    col: str | None,
    band: str | None,
    logy: bool,
    ax: Any,
) -> Any:
    """Draw :meth:`Results.plot`'s figure for ``results`` (a ``Results``, which imports
    this module when it plots); return its axes (a list of them with ``col``)."""
    results._check_plain(metric)
    if x not in _X:
        raise ValueError(f"x must be 'iteration', 'bytes' or 'time', got {x!r}")
    if x != "iteration" and x not in results.metrics:
        hint = " (start a fogsim.clock in the run)" if x == "time" else ""
        raise ValueError(f"x: the runs recorded no {x!r} to plot against{hint}")
    if band not in _BANDS:
        raise ValueError(f"band must be 'std', 'minmax' or None, got {band!r}")
    if not isinstance(logy, bool):
        raise TypeError(f"logy must be a bool, got {type(logy).__name__}")
    for argname, axis in (("hue", hue), ("col", col)):
        if axis is not None and axis not in results.axes:
            raise ValueError(f"{argname}: no axis {axis!r} (axes: {results.axes})")
    if hue is not None and hue == col:
        raise ValueError(f"hue and col must be different axes, both are {hue!r}")
    if col is not None and ax is not None:
        raise ValueError("ax: give no ax with col (one panel per value is made)")
    if len(results) == 0:
        raise ValueError("no runs to plot")
    free = [a for a in results.axes if a not in (results.seed_key, hue, col)]
    for axis in free:
        values = _distinct(c.get(axis) for c in results.configs)
        if len(values) > 1:
            raise ValueError(
                f"axis {axis!r} holds {len(values)} values {values}: draw it as hue= or col=, "
                f"or narrow the results with select({axis}=...)"
            )
    import matplotlib.pyplot as plt

    panels = [None] if col is None else _distinct(c.get(col) for c in results.configs)
    if ax is None:
        _, made = plt.subplots(
            1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False, sharey=True
        )
        axes = list(made[0])
    else:
        axes = [ax]
    hues = [None] if hue is None else _distinct(c.get(hue) for c in results.configs)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for panel, where in zip(panels, axes, strict=True):
        for h, value in enumerate(hues):
            members = [
                o
                for c, o in zip(results.configs, results.outcomes, strict=True)
                if (col is None or _same(c.get(col), panel))
                and (hue is None or _same(c.get(hue), value))
            ]
            if not members:
                continue
            ys = _stack([o.series[metric] for o in members if metric in o.series])
            xs = (
                np.arange(ys.shape[1], dtype=np.float64)
                if x == "iteration"
                else _stack([o.series[x] for o in members if x in o.series]).mean(axis=0)
            )
            mean = ys.mean(axis=0)
            color = colors[h % len(colors)]
            label = metric if hue is None else f"{hue}={value}"
            where.plot(xs, mean, color=color, label=label)
            if band is not None and ys.shape[0] > 1:
                if band == "std":
                    spread = ys.std(axis=0)
                    low, high = mean - spread, mean + spread
                else:
                    low, high = ys.min(axis=0), ys.max(axis=0)
                where.fill_between(xs, low, high, color=color, alpha=0.25, linewidth=0)
        if logy:
            where.set_yscale("log", nonpositive="mask")
        where.set_xlabel(_X[x])
        where.set_ylabel(metric)
        if col is not None:
            where.set_title(f"{col}={panel}")
        if hue is not None:
            where.legend()
    return axes[0] if col is None else axes


def _distinct(values: Any) -> list[Value]:
    out: list[Value] = []
    for v in values:
        if not any(_same(v, seen) for seen in out):
            out.append(v)
    return out


def _same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def _stack(series: list[np.ndarray]) -> np.ndarray:
    """Return the runs' series as rows, cut to the shortest (NaN-free lengths may differ)."""
    length = min(len(s) for s in series)
    return np.stack([s[:length] for s in series])
