"""Configurations: the grid's cartesian product, their checks, and their stable cache keys."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Config", "Value", "check_configs", "config_key", "grid", "run_name"]

#: A configuration's value: what JSON holds without loss and a CSV cell shows.
Value = bool | int | float | str | None
#: One configuration: axis name to value.
Config = dict[str, Value]


def grid(**axes: Value | Iterable[Value]) -> list[Config]:
    """Return the cartesian product of the axes as a list of configurations.

    ``grid(alpha=[0.1, 0.01], seed=range(3))`` gives six dicts, in
    ``itertools.product`` order: the first axis varies slowest, the last fastest
    (``alpha=0.1`` with seeds 0, 1, 2, then ``alpha=0.01`` with seeds 0, 1, 2). The dicts'
    keys follow the order of the keywords.

    Parameters
    ----------
    **axes : value or iterable of values
        Each axis's values (a list, tuple, range or 1-d array); a single value (a number,
        string, bool or None) is an axis of one value, for settings every run shares.
        Values must be JSON scalars: bool, int, float (finite), str or None (numpy
        scalars are converted); they name the run in the cache and in the tables.

    Raises
    ------
    ValueError
        An axis has no values, holds a value twice, or a float that is not finite.
    TypeError
        A value is not a JSON scalar (a list, a dict, an object).
    """
    if not axes:
        raise ValueError("grid needs at least one axis (grid(alpha=[...], seed=range(3)))")
    names = list(axes)
    columns: list[list[Value]] = []
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            seq: list[Any] = [values]
        else:
            seq = list(values)
        if not seq:
            raise ValueError(f"axis {name!r} has no values")
        column = [check_value(v, f"axis {name!r}") for v in seq]
        canon = [_canonical(v) for v in column]
        if len(set(canon)) != len(canon):
            raise ValueError(f"axis {name!r} holds a value twice: {column}")
        columns.append(column)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*columns)]


def check_value(value: Any, where: str) -> Value:
    """Return ``value`` as a JSON scalar (numpy scalars converted), else raise naming ``where``."""
    if isinstance(value, np.generic) and value.ndim == 0 and value.dtype.kind in "biuf":
        value = value.item()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{where}: {value!r} is not a finite number (JSON cannot hold it)")
        return number
    raise TypeError(
        f"{where}: values must be JSON scalars (bool, int, float, str or None), got "
        f"{type(value).__name__} {value!r}"
    )


def check_configs(configs: Any, argname: str = "configs") -> list[Config]:
    """Return ``configs`` as a list of checked dicts, all distinct."""
    if isinstance(configs, Mapping) or isinstance(configs, (str, bytes)):
        raise TypeError(
            f"{argname} must be a sequence of dicts (grid(...) makes one), got one dict"
        )
    if not isinstance(configs, Iterable):
        raise TypeError(f"{argname} must be a sequence of dicts, got {type(configs).__name__}")
    checked: list[Config] = []
    seen: dict[str, int] = {}
    for index, config in enumerate(configs):
        if not isinstance(config, Mapping):
            raise TypeError(f"{argname}[{index}] must be a dict, got {type(config).__name__}")
        out: Config = {}
        for key, value in config.items():
            if not isinstance(key, str):
                raise TypeError(f"{argname}[{index}]: keys must be str, got {key!r}")
            if key == "iteration":
                raise ValueError(f"{argname}[{index}]: 'iteration' is a column of the results")
            out[key] = check_value(value, f"{argname}[{index}][{key!r}]")
        canon = _canonical(out)
        if canon in seen:
            raise ValueError(f"{argname}[{index}] repeats {argname}[{seen[canon]}]: {out}")
        seen[canon] = index
        checked.append(out)
    if not checked:
        raise ValueError(f"{argname} is empty: nothing to run")
    return checked


def _canonical(obj: Any) -> str:
    """Return the canonical JSON of ``obj``: sorted keys, no spaces, ASCII, floats as repr."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def run_name(run: Callable[..., Any]) -> str:
    """Return the run function's qualified name, ``module.qualname``."""
    module = getattr(run, "__module__", None) or "?"
    qualname = getattr(run, "__qualname__", None) or type(run).__qualname__
    return f"{module}.{qualname}"


def config_key(config: Mapping[str, Value], run: str, version: str | None) -> str:
    """Return the cache key of a run: sha256 of the canonical JSON of (config, run, version).

    ``1`` and ``1.0`` are different configurations (their JSON differs); key order is not.
    """
    payload = _canonical({"config": dict(config), "run": run, "version": version})
    return hashlib.sha256(payload.encode("ascii")).hexdigest()[:32]


def axes_of(configs: Sequence[Mapping[str, Value]]) -> list[str]:
    """Return the configurations' keys, in first-seen order."""
    names: dict[str, None] = {}
    for config in configs:
        names.update(dict.fromkeys(config))
    return list(names)
