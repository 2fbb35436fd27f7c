"""BlueFog's one-sided (window) ops over fogsim's: BlueFog's names, argument order, defaults.

A tensor registered with :func:`win_create` is the agent's own state: ``win_update``,
``win_update_then_collect`` and a put or accumulate with ``self_weight`` change it in place
(as BlueFog does), so a script may keep reading the tensor it registered (the paper's
Listing 3 reads ``x_ext`` after every ``win_update_then_collect``). ``win_sync`` and
``win_sync_then_collect`` are BlueFog's earlier names of ``win_update`` and
``win_update_then_collect`` (its operations document uses them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import fogsim

from ..._types import ArrayLike, PerAgent, SelfWeight, Value, Weights
from . import _errors
from ._args import _float_scalar, _float_weights
from ._pairs import Call, bluefog_op
from ._types import Tensor

_STARTED = "Start :func:`{}`; return a handle for :func:`win_wait`."

__all__ = [
    "win_create",
    "win_free",
    "win_put",
    "win_put_nonblocking",
    "win_accumulate",
    "win_accumulate_nonblocking",
    "win_get",
    "win_get_nonblocking",
    "win_update",
    "win_update_then_collect",
    "win_mutex",
    "win_wait",
    "win_poll",
    "get_win_version",
    "win_associated_p",
    "turn_on_win_ops_with_associated_p",
    "turn_off_win_ops_with_associated_p",
    "get_current_created_window_names",
    "win_sync",
    "win_sync_then_collect",
]


# -- one-sided window ops (see fogsim.win_create) --------------------------------------------
def win_create(tensor: Tensor, name: str, zero_init: bool = False) -> bool:
    """Create the window ``name`` for ``tensor`` (collective); one buffer per in-neighbor."""
    _errors.check_tensor("win_create", tensor)
    return fogsim.win_create(tensor, name, zero_init)


def win_free(name: str | None = None) -> bool:
    """Free the window ``name``, or all windows (collective).

    A name no window has raises ``UnknownWindow`` (a KeyError, as BlueFog's
    lookup, and a ValueError).
    """
    _known_window("win_free", name)
    return fogsim.win_free(name)


@bluefog_op(lambda: fogsim.win_put, names=False, twin_doc=_STARTED.format("win_put"))
def win_put(
    call: Call[bool],
    tensor: ArrayLike,
    name: str,
    self_weight: SelfWeight = None,
    dst_weights: Weights = None,
    require_mutex: bool = False,
) -> bool:
    """Put ``dst_weights[j] * tensor`` into the buffers at the out-neighbors ``j``."""
    weights = _float_weights(dst_weights)
    return call(tensor, name, tensor, name, _float_scalar(self_weight), weights, require_mutex)


win_put_nonblocking = win_put.nonblocking


@bluefog_op(lambda: fogsim.win_accumulate, names=False, twin_doc=_STARTED.format("win_accumulate"))
def win_accumulate(
    call: Call[bool],
    tensor: ArrayLike,
    name: str,
    self_weight: SelfWeight = None,
    dst_weights: Weights = None,
    require_mutex: bool = False,
) -> bool:
    """Add ``dst_weights[j] * tensor`` to the buffers at the out-neighbors ``j``."""
    weights = _float_weights(dst_weights)
    return call(tensor, name, tensor, name, _float_scalar(self_weight), weights, require_mutex)


win_accumulate_nonblocking = win_accumulate.nonblocking


@bluefog_op(lambda: fogsim.win_get, names=False, twin_doc=_STARTED.format("win_get"))
def win_get(
    call: Call[bool], name: str, src_weights: Weights = None, require_mutex: bool = False
) -> bool:
    """Fetch the in-neighbors' exposed values (times ``src_weights``) into the buffers."""
    return call(None, name, name, _float_weights(src_weights), require_mutex)


win_get_nonblocking = win_get.nonblocking


def win_update(
    name: str,
    self_weight: SelfWeight = None,
    neighbor_weights: Weights = None,
    reset: bool = False,
    clone: bool = False,
    require_mutex: bool = False,
) -> Value:
    """Return the weighted average of the registered tensor and the buffers (in place).

    A half-precision tensor (float16, bfloat16) is combined in float32 and rounded once.
    As in BlueFog, an unknown ``name`` raises a KeyError (``UnknownWindow``),
    and ``self_weight`` must be a float and ``neighbor_weights`` a dict (ValueError).
    """
    _known_window("win_update", name)
    _errors.check_weights("win_update", self_weight, neighbor_weights, "neighbor_weights")
    return fogsim.win_update(
        name,
        _float_scalar(self_weight),
        _float_weights(neighbor_weights),
        reset,
        clone,
        require_mutex,
    )


def win_update_then_collect(name: str, require_mutex: bool = True) -> Value:
    """Add every buffer to the registered tensor and zero the buffers."""
    _known_window("win_update_then_collect", name)
    return fogsim.win_update_then_collect(name, require_mutex)


def win_mutex(
    name: str, for_self: bool = False, ranks: Sequence[int] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """Context manager holding the window mutexes of ``ranks`` (default out-neighbors)."""
    return fogsim.win_mutex(name, for_self, ranks)


def win_wait(handle: fogsim.Handle) -> bool:
    """Wait for a nonblocking window op; return its result."""
    done: bool = fogsim.win_wait(handle)
    return done


def win_poll(handle: fogsim.Handle) -> bool:
    """Return whether :func:`win_wait` would return at once."""
    return fogsim.win_poll(handle)


def get_win_version(name: str) -> PerAgent:
    """Return ``{in-neighbor: writes since the last win_update}``."""
    return fogsim.get_win_version(name)


def win_associated_p(name: str) -> PerAgent:
    """Return the push-sum weight ``p`` carried by the window."""
    return fogsim.win_associated_p(name)


def turn_on_win_ops_with_associated_p() -> None:
    """Make window ops carry the push-sum weight ``p``."""
    fogsim.set_win_ops_with_associated_p(True)


def turn_off_win_ops_with_associated_p() -> None:
    """Stop window ops from carrying ``p``."""
    fogsim.set_win_ops_with_associated_p(False)


def get_current_created_window_names() -> list[str]:
    """Return the names of the windows that exist."""
    return fogsim.win_names()


#: BlueFog's earlier name of :func:`win_update` (same arguments, same result).
win_sync = win_update

#: BlueFog's earlier name of :func:`win_update_then_collect` (same arguments, same result).
win_sync_then_collect = win_update_then_collect


def _known_window(op: str, name: str | None) -> None:
    """Raise ``UnknownWindow`` unless a window ``name`` exists (None: all)."""
    if name is not None and isinstance(name, str) and name not in fogsim.win_names():
        names = ", ".join(map(repr, fogsim.win_names())) or "none"
        raise _errors.UnknownWindow(
            f"{op}: no window named {name!r} (windows: {names}); create it with win_create first"
        )
