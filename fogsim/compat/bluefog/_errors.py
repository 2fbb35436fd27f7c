"""The exceptions BlueFog raises, and the checks that raise them in the compat layer.

BlueFog 0.3 raises these where fogsim's own API would raise something else, or nothing
(from ``bluefog/torch/mpi_ops.py`` and ``bluefog/common/basics.py``):

=======================================  ======================  ==============================
case                                     BlueFog                 here
=======================================  ======================  ==============================
tensor type it has no kernel for         ValueError              :class:`UnsupportedTensor`
(bool, complex ...)                                              (ValueError and TypeError)
non-contiguous tensor                    ValueError              :class:`UnsupportedTensor`
``allreduce(average=True)`` of integers  AssertionError          :class:`AverageOfIntegers`
                                                                 (TypeError and AssertionError)
``self_weight`` not a float              ValueError              :class:`BadWeights`
``src_weights``/``neighbor_weights``     ValueError              (ValueError and TypeError)
not a dict
a window name never created              KeyError (dict          :class:`UnknownWindow`
(``win_free``, ``win_update`` ...)       lookup)                 (KeyError and ValueError)
an op named as one still in flight       ValueError              :class:`NameInFlight`
                                         (C++ invalid_argument)  (ValueError)
=======================================  ======================  ==============================

One difference is kept on purpose: ``synchronize``/``win_wait`` of something that is not a
handle (BlueFog's handles are ints; it returns None/False for an unknown one) raises
TypeError, since no int is ever a handle here.

Each class subclasses both BlueFog's exception and the one fogsim raises for the same
mistake, so a BlueFog test (``pytest.raises(ValueError)``) and fogsim-minded code
(``except TypeError``) both catch it. Every check runs before any communication, on every
rank alike, so no rank waits on another that raised.

"In flight" is deterministic here: a named op is in flight from its ``*_nonblocking`` call
until :func:`synchronize`/``wait`` on its handle. (BlueFog frees the name when its
background thread finishes the op, which depends on timing; a rule that depends on timing
would let one rank raise while another goes on into the op, and wait forever.)
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

H = TypeVar("H")

__all__ = ["UnsupportedTensor", "AverageOfIntegers", "BadWeights", "UnknownWindow", "NameInFlight"]


class UnsupportedTensor(ValueError, TypeError):
    """A tensor BlueFog has no kernel for (its dtype), or a non-contiguous one."""


class AverageOfIntegers(TypeError, AssertionError):
    """``allreduce(average=True)`` of an integer tensor (BlueFog asserts floats)."""


class UnknownWindow(KeyError, ValueError):
    """A window name that no ``win_create`` made (BlueFog looks it up in a dict)."""

    def __str__(self) -> str:  # KeyError's str() would quote the whole message
        return str(self.args[0]) if self.args else ""


class BadWeights(ValueError, TypeError):
    """Per-agent weights of a wrong type: ``self_weight`` not a float, weights not a dict."""


class NameInFlight(ValueError):
    """An op given the ``name`` of one started and not yet synchronized."""


#: torch dtypes BlueFog has kernels for (``mpi_lib``'s per-type functions), plus bfloat16,
#: which fogsim computes in float32 (BlueFog itself lacks it).
_TORCH_DTYPES = (
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)
_NUMPY_KINDS = "uif"


def check_tensor(op: str, tensor: Any) -> None:
    """Raise :class:`UnsupportedTensor` for a dtype BlueFog lacks or a non-contiguous tensor.

    Other types (lists, scalars) are left to fogsim, which says what it takes.
    """
    if isinstance(tensor, np.ndarray):
        if tensor.dtype.kind not in _NUMPY_KINDS:
            raise UnsupportedTensor(f"{op}: tensor type numpy {tensor.dtype} is not supported")
        return
    dtype = getattr(tensor, "dtype", None)
    if dtype is None or not callable(getattr(tensor, "is_contiguous", None)):
        return
    if str(dtype).removeprefix("torch.") not in _TORCH_DTYPES:
        raise UnsupportedTensor(
            f"{op}: tensor type {dtype} is not supported (BlueFog's types: "
            f"{', '.join(_TORCH_DTYPES)})"
        )
    if not tensor.is_contiguous():
        raise UnsupportedTensor(
            f"{op}: tensor is required to be contiguous; pass tensor.contiguous()"
        )


def check_average(op: str, tensor: Any, average: bool) -> None:
    """Raise :class:`AverageOfIntegers` when ``average`` and ``tensor`` holds integers."""
    dtype = getattr(tensor, "dtype", None)
    if not average or dtype is None:
        return
    is_float = getattr(dtype, "is_floating_point", None)
    if is_float is None:  # numpy
        is_float = np.dtype(dtype).kind == "f"
    if not is_float:
        raise AverageOfIntegers(
            f"{op}: average=True needs a float tensor, got {dtype} (use average=False to sum)"
        )


def check_weights(op: str, self_weight: Any, weights: Any, keyword: str) -> None:
    """Raise :class:`BadWeights` as BlueFog does when per-agent weights have a wrong form.

    With both given, ``self_weight`` must be a float (BlueFog: "has to be a float for self
    rank") and ``weights`` (``src_weights``, ``neighbor_weights``) a ``{rank: weight}``
    dict. Only a scalar-rank call (one MPI process or SPMD agent) is checked; the
    simulator's stacked arguments (one entry per agent) are fogsim's and checked there.
    """
    if self_weight is None or weights is None:
        return  # neither, or one missing: fogsim says so (a ValueError, as BlueFog)
    import fogsim

    if not isinstance(fogsim.rank(), numbers.Integral):
        return
    if not isinstance(weights, dict):
        raise BadWeights(
            f"{op}: {keyword} has to be a dictionary from (in-)neighbor rank to "
            f"weight, got {type(weights).__name__}"
        )
    if not isinstance(self_weight, float | np.floating):
        raise BadWeights(
            f"{op}: self_weight has to be a float, got {self_weight!r} "
            f"({type(self_weight).__name__})"
        )


class _Names(threading.local):
    """Names in flight, per thread (an SPMD agent is a thread; an MPI rank has one)."""

    def __init__(self) -> None:
        self.in_flight: dict[str, Any] = {}  # name -> its handle


_names = _Names()


def check_name_free(op: str, name: str | None) -> None:
    """Raise :class:`NameInFlight` if an op named ``name`` is in flight (None: no name)."""
    if name is not None and name in _names.in_flight:
        raise NameInFlight(
            f"{op}: an op named {name!r} is still in flight (started and not yet "
            "synchronized); synchronize it first or use another name"
        )


def started(op: str, name: str | None, start: Callable[[], H]) -> H:
    """Return ``start()``'s handle, with ``name`` in flight until :func:`finished`."""
    check_name_free(op, name)
    handle = start()
    if name is not None:
        _names.in_flight[name] = handle
    return handle


def finished(handle: Any) -> None:
    """Take ``handle``'s name out of flight (its op was synchronized)."""
    for name, pending in _names.in_flight.items():
        if pending is handle:
            del _names.in_flight[name]
            return


def forget_names() -> None:
    """Forget every name in flight (init/shutdown)."""
    _names.in_flight.clear()
