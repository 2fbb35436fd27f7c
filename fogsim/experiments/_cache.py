"""What one run gave (its metric series and scalars) and the on-disk cache of them.

The cache is a folder with one JSON file per run, ``<key>.json``, ``key`` the first 32 hex
digits of the sha256 of the canonical JSON of the configuration, the run function's
qualified name and the user's ``version`` (:func:`config_key`). A file is written to a
temporary name in the same folder and moved into place with :func:`os.replace`, so a
sweep stopped at any moment leaves whole files or none, and the next sweep reads only
whole ones.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fogsim.algorithms import Result

from ._configs import Config, Value

__all__ = ["Cache", "Outcome", "SCHEMA", "outcome_of"]

#: The cache files' format version; files of another are recomputed.
SCHEMA = 1


@dataclass
class Outcome:
    """One run's numbers: per-iteration ``series`` (all of one length) and ``scalars``."""

    series: dict[str, np.ndarray] = field(default_factory=dict)
    scalars: dict[str, Value] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Return the number of recorded iterations (0 when the run gave no series)."""
        return max((len(v) for v in self.series.values()), default=0)

    def final(self) -> dict[str, Value]:
        """Return each series' last value, then the scalars."""
        out: dict[str, Value] = {k: float(v[-1]) for k, v in self.series.items() if len(v)}
        out.update(self.scalars)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "series": {k: v.tolist() for k, v in self.series.items()},
            "scalars": dict(self.scalars),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        series = {k: np.array(v, dtype=np.float64) for k, v in data["series"].items()}
        return cls(series, dict(data["scalars"]))


def outcome_of(value: Any, where: str) -> Outcome:
    """Return what a run function returned as an :class:`Outcome`.

    A :class:`fogsim.algorithms.Result` gives its ``history``; a dict gives its 1-d
    array-likes as series (of one length) and its numbers, strings, bools and None as
    scalars. Anything else is refused with a ``TypeError`` naming ``where``.
    """
    if isinstance(value, Result):
        items: Mapping[str, Any] = value.history
    elif isinstance(value, Mapping):
        items = value
    else:
        raise TypeError(
            f"{where} returned {type(value).__name__}; a run must return a "
            "fogsim.algorithms.Result or a dict of numbers and 1-d arrays"
        )
    outcome = Outcome()
    for key, item in items.items():
        if not isinstance(key, str) or key in ("iteration",):
            raise TypeError(f"{where} returned the key {key!r}: keys must be str, not 'iteration'")
        if item is None or isinstance(item, (bool, str)):
            outcome.scalars[key] = item
            continue
        arr = np.asarray(item)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{where} returned {key!r} of dtype {arr.dtype}: not numbers")
        if arr.ndim == 0:
            outcome.scalars[key] = arr.item()
        elif arr.ndim == 1:
            outcome.series[key] = arr.astype(np.float64)
        else:
            raise TypeError(
                f"{where} returned {key!r} of shape {arr.shape}: a metric must be a number or "
                "one value per iteration (a history of a batch of problems is split with "
                "fogsim.experiments.unstack)"
            )
    lengths = {len(v) for v in outcome.series.values()}
    if len(lengths) > 1:
        raise ValueError(f"{where} returned series of different lengths {sorted(lengths)}")
    return outcome


class Cache:
    """A folder of finished runs, one JSON file per configuration (see the module's notes)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def file(self, key: str) -> Path:
        return self.path / f"{key}.json"

    def load(self, key: str, config: Config, run: str, version: str | None) -> Outcome | None:
        """Return the cached outcome of ``config``, or None (absent, unreadable, other run)."""
        try:
            with open(self.file(key), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        if (
            not isinstance(data, dict)
            or data.get("schema") != SCHEMA
            or data.get("config") != config
            or data.get("run") != run
            or data.get("version") != version
        ):
            return None
        return Outcome.from_json(data["outcome"])

    def save(
        self, key: str, config: Config, run: str, version: str | None, outcome: Outcome
    ) -> None:
        """Write one run's file atomically (a temporary file, then :func:`os.replace`)."""
        data = {
            "schema": SCHEMA,
            "run": run,
            "version": version,
            "config": config,
            "outcome": outcome.to_json(),
        }
        text = json.dumps(data, allow_nan=True)  # a diverged run's NaN and inf are kept
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=self.path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.file(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
