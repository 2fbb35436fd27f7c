"""A sweep's results: tidy rows, one summary row per run, CSV, pandas, statistics over seeds."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._cache import Outcome
from ._configs import Config, Value, axes_of, check_value

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["Results"]


class Results:
    """The runs of a :func:`sweep`: configurations and what each run recorded.

    Attributes
    ----------
    configs : list of dict
        The finished runs' configurations, in the order they were given.
    outcomes : list
        Per run, its ``series`` (dict of metric name to 1-d array, one value per
        iteration) and ``scalars`` (dict of other numbers it returned).
    axes : list of str
        The configurations' keys (the grid's axes), in order.
    metrics : list of str
        The names of the per-iteration metrics, in first-seen order.
    seed_key : str
        The axis averaged over by :meth:`summary` and :meth:`plot`.
    computed, cached : int
        How many runs this sweep computed, and how many it read from the cache.
    stacked : list of dict
        The simulations that ran seeds stacked: ``{"config": ..., "seeds": [...]}`` each
        (the configuration without the seed); empty when none did.
    failures : list of (dict, str)
        The configurations whose run raised, with the traceback's text.
    """

    def __init__(
        self,
        configs: Sequence[Config],
        outcomes: Sequence[Outcome],
        *,
        seed_key: str = "seed",
        computed: int = 0,
        cached: int = 0,
        stacked: list[dict[str, Any]] | None = None,
        failures: list[tuple[Config, str]] | None = None,
    ) -> None:
        if len(configs) != len(outcomes):
            raise ValueError("configs and outcomes must have one entry per run")
        self.configs = [dict(c) for c in configs]
        self.outcomes = list(outcomes)
        self.seed_key = seed_key
        self.computed = computed
        self.cached = cached
        self.stacked = list(stacked or [])
        self.failures = list(failures or [])
        self.axes = axes_of(self.configs)
        names: dict[str, None] = {}
        for outcome in self.outcomes:
            names.update(dict.fromkeys(outcome.series))
        self.metrics = list(names)

    def __len__(self) -> int:
        return len(self.configs)

    def __repr__(self) -> str:
        parts = [f"{len(self)} runs", f"axes={self.axes}", f"metrics={self.metrics}"]
        if self.stacked:
            merged = sum(len(s["seeds"]) for s in self.stacked)
            parts.append(f"stacked {merged} runs in {len(self.stacked)} simulations")
        if self.failures:
            parts.append(f"{len(self.failures)} failed")
        return f"Results({', '.join(parts)})"

    # -- tables ---------------------------------------------------------------------------
    @property
    def rows(self) -> list[dict[str, bool | int | float | str | None]]:
        """One dict per run per iteration: the axes, ``iteration``, then each metric."""
        rows: list[dict[str, Value]] = []
        for config, outcome in zip(self.configs, self.outcomes, strict=True):
            base = {axis: config.get(axis) for axis in self.axes}
            for k in range(outcome.length):
                row: dict[str, Value] = dict(base, iteration=k)
                for name in self.metrics:
                    series = outcome.series.get(name)
                    row[name] = float(series[k]) if series is not None else None
                rows.append(row)
        return rows

    @property
    def runs(self) -> list[dict[str, bool | int | float | str | None]]:
        """One dict per run: the axes, then each metric's final value and the scalars."""
        out = []
        for config, outcome in zip(self.configs, self.outcomes, strict=True):
            row: dict[str, Value] = {axis: config.get(axis) for axis in self.axes}
            row.update(outcome.final())
            out.append(row)
        return out

    def to_csv(self, path: str | os.PathLike[str], what: str = "rows") -> None:
        """Write the tidy ``rows`` (or the ``runs``) to a CSV file with a header line.

        Numbers are written as Python's ``repr`` (floats read back exactly), None as an
        empty cell.
        """
        table = self._table(what)
        columns = list(dict.fromkeys(k for row in table for k in row))
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, restval="")
            writer.writeheader()
            for row in table:
                writer.writerow({k: "" if v is None else v for k, v in row.items()})

    def to_pandas(self, what: str = "rows") -> Any:
        """Return the tidy ``rows`` (or the ``runs``) as a ``pandas.DataFrame``.

        Raises ImportError when pandas is not installed (``pip install pandas``).
        """
        table = self._table(what)
        try:
            import pandas
        except ImportError as exc:
            raise ImportError(
                "Results.to_pandas needs pandas (pip install pandas); Results.rows and "
                "Results.to_csv work without it"
            ) from exc
        return pandas.DataFrame.from_records(table)

    def _table(self, what: str) -> list[dict[str, Value]]:
        if what == "rows":
            return self.rows
        if what == "runs":
            return self.runs
        raise ValueError(f"what must be 'rows' or 'runs', got {what!r}")

    # -- selections and statistics --------------------------------------------------------
    def select(self, **fixed: Value) -> Results:
        """Return the runs whose configuration has these values (``select(alpha=0.1)``)."""
        for axis, value in fixed.items():
            if axis not in self.axes:
                raise ValueError(f"no axis {axis!r} (axes: {self.axes})")
            check_value(value, f"select({axis}=...)")
        keep = [
            i
            for i, c in enumerate(self.configs)
            if all(c.get(a) == v and type(c.get(a)) is type(v) for a, v in fixed.items())
        ]
        return Results(
            [self.configs[i] for i in keep],
            [self.outcomes[i] for i in keep],
            seed_key=self.seed_key,
        )

    def summary(
        self, metric: str, by: Sequence[str] | None = None, at: int = -1
    ) -> list[dict[str, Value]]:
        """Return the mean and spread over seeds of one metric, per group of runs.

        Parameters
        ----------
        metric : str
            A per-iteration metric (its value at iteration ``at``) or a scalar the runs
            returned.
        by : sequence of str, optional
            The axes that define a group (default: every axis but ``seed_key``); runs
            alike in these are pooled.
        at : int
            The iteration (default -1, the last).

        Returns
        -------
        list of dict
            Per group, in first-seen order: its ``by`` values, then ``"mean"``, ``"std"``
            (population standard deviation, numpy's ``ddof=0``), ``"min"``, ``"max"`` and
            ``"count"`` (the runs pooled).
        """
        keys = self._by(by)
        values = [self._value(o, metric, at) for o in self.outcomes]
        groups: dict[tuple[Any, ...], list[float]] = {}
        labels: dict[tuple[Any, ...], dict[str, Value]] = {}
        for config, value in zip(self.configs, values, strict=True):
            label = {k: config.get(k) for k in keys}
            ident = tuple((type(v).__name__, v) for v in label.values())
            groups.setdefault(ident, []).append(value)
            labels[ident] = label
        out = []
        for ident, pooled in groups.items():
            arr = np.asarray(pooled, dtype=np.float64)
            row: dict[str, Value] = dict(labels[ident])
            row.update(
                mean=float(arr.mean()),
                std=float(arr.std()),
                min=float(arr.min()),
                max=float(arr.max()),
                count=int(arr.size),
            )
            out.append(row)
        return out

    def _by(self, by: Sequence[str] | None) -> list[str]:
        if by is None:
            return [a for a in self.axes if a != self.seed_key]
        if isinstance(by, str):
            by = [by]
        unknown = [b for b in by if b not in self.axes]
        if unknown:
            raise ValueError(f"by: no axis {unknown[0]!r} (axes: {self.axes})")
        return list(by)

    def _value(self, outcome: Outcome, metric: str, at: int) -> float:
        if metric in outcome.series:
            series = outcome.series[metric]
            try:
                return float(series[at])
            except IndexError:
                raise ValueError(f"at={at} is outside the {len(series)} iterations") from None
        if metric in outcome.scalars:
            value = outcome.scalars[metric]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            raise ValueError(f"metric {metric!r} is not a number ({value!r})")
        known = sorted(set(self.metrics) | {k for o in self.outcomes for k in o.scalars})
        raise ValueError(f"metric: no {metric!r} in the results (has {known})")

    # -- plots ----------------------------------------------------------------------------
    def plot(
        self,
        metric: str,
        x: str = "iteration",
        hue: str | None = None,
        col: str | None = None,
        band: str | None = "std",
        logy: bool = True,
        ax: Axes | None = None,
    ) -> Any:
        """Draw the mean over seeds of ``metric`` against ``x``, with a shaded band.

        Parameters
        ----------
        metric : str
            A per-iteration metric (``"distance"``, ``"consensus_error"``, ...).
        x : {"iteration", "bytes", "time"}
            The x axis: the iteration, or the mean over seeds of the runs' ``"bytes"``
            (error against communication) or ``"time"`` (a :mod:`fogsim.clock` ran).
        hue : str, optional
            An axis drawn as one line (and colour) per value.
        col : str, optional
            An axis drawn as one panel per value, side by side.
        band : {"std", "minmax"} or None
            The band: mean +- one standard deviation over seeds, or from the minimum to
            the maximum; None for none.
        logy : bool
            Logarithmic y axis (values <= 0 masked).
        ax : matplotlib Axes, optional
            Where to draw (without ``col``); a new figure when None.

        Returns
        -------
        matplotlib Axes, or a list of them (one per ``col`` value)

        Every axis but ``seed_key``, ``hue`` and ``col`` must hold one value in these
        results (narrow them with :meth:`select`): lines are means over seeds only.
        """
        from ._plot import draw

        return draw(self, metric, x, hue, col, band, logy, ax)

    def _check_plain(self, metric: str) -> None:
        if metric not in self.metrics:
            raise ValueError(f"metric: no per-iteration {metric!r} (has {self.metrics})")
