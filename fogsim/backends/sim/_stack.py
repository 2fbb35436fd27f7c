"""Stacking of per-agent values along a leading agent axis."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..._arrays import is_tensor, to_numpy, wrap_like
from . import _torchops

__all__ = ["PerAgent", "allgather_ragged", "ragged", "stack_agents", "stack_outputs"]


class PerAgent(list):  # type: ignore[type-arg]
    """A list of one value per agent, as :func:`stack_agents` makes it.

    A plain list of numbers passed to an op is one value, the same on every agent (as it is
    distributed); this list is not plain, so the simulator reads it as the agents' values.
    """

    __slots__ = ()


def stack_agents(values: Sequence[Any]) -> Any:
    """Stack per-agent values: arrays and numbers of one shape into one array, else a list.

    numpy arrays and real numbers stack into an ndarray with a leading agent axis, torch
    tensors into a tensor; dicts, lists, ragged shapes and mixtures stay a list of n (a
    :class:`PerAgent`).
    """
    if not values:
        return PerAgent()
    first = values[0]
    if is_tensor(first):
        if all(is_tensor(v) and v.shape == first.shape for v in values):
            import torch

            return torch.stack(list(values))
        return PerAgent(values)
    if all(_is_array_like(v) for v in values):
        shape = np.shape(first)
        if all(np.shape(v) == shape for v in values):
            return np.stack([np.asarray(v) for v in values])
    return PerAgent(values)


def stack_outputs(values: Sequence[Any]) -> Any:
    """Stack per-agent results as :func:`stack_agents` does, except that tuples of one
    length give a tuple of stacked outputs (as ``out1, out2 = fn(...)`` reads for one
    agent); tuples whose parts do not stack stay a list of n."""
    if values and all(isinstance(v, tuple) for v in values):
        width = len(values[0])
        if width and all(len(v) == width for v in values):
            parts = [stack_agents([v[k] for v in values]) for k in range(width)]
            if not any(isinstance(p, list) for p in parts):
                return tuple(parts)
    return stack_agents(values)


def _is_array_like(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return bool(v.dtype != object)
    return isinstance(v, numbers.Number | np.generic) and not isinstance(v, str)


def ragged(values: Sequence[Any]) -> bool:
    """Whether per-agent values differ in shape (an allgather of first dimensions that
    differ between agents)."""
    shapes = {tuple(np.shape(v)) for v in values}
    return len(shapes) > 1


def allgather_ragged(values: Sequence[Any]) -> list[Any]:
    """Every agent's value concatenated along the first dimension, one copy per agent, for
    per-agent values whose first dimensions differ (the trailing ones must agree)."""
    if all(_torchops.takes(v) for v in values):
        return _torchops.allgather_ragged(values)
    parts = [to_numpy(v, f"x[{i}]") for i, v in enumerate(values)]
    arrays = [np.atleast_1d(a) for a, _ in parts]
    trailing = {a.shape[1:] for a in arrays}
    if len(trailing) > 1:
        raise ValueError(
            f"allgather: agents' values differ beyond the first dimension: {sorted(trailing)}"
        )
    whole = np.concatenate(arrays)
    return [wrap_like(whole.copy(), kind) for _, kind in parts]
