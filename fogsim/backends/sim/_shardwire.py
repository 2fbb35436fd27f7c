"""Per-agent arguments of the sharded simulator as JSON data, for the processes to gather.

Block-sized ``self_weight`` vectors, ``src_weights``/``dst_weights`` (lists of dicts rank ->
weight, or of rank lists), ``src_ranks``/``dst_ranks`` and ragged ``allgather`` values go
to every process of a sharded simulation through
:meth:`~fogsim.backends._runtime.transport.Transport.allgather_json`, never pickled.
:func:`encode` keeps what the plan parsers tell apart: lists and tuples, dicts with the
types of their keys, Python numbers, numpy scalars and arrays with their dtypes (bytes in
base64), all bit for bit. A value of any other type becomes a refusal that :func:`decode`
raises as a TypeError on every process, so no process waits for a message another could
not send; a message :func:`encode` did not make raises
:class:`~fogsim.backends._wire.BadMessage`.
"""

from __future__ import annotations

import base64
import numbers
from typing import Any

import numpy as np

from ... import _arrays
from .._wire import BadMessage

__all__ = ["decode", "encode"]

#: numpy dtype kinds that travel: fixed-size values, read back from bytes (no objects).
_KINDS = frozenset("biufcSUMm")


def encode(value: Any) -> Any:
    """Return ``value`` as JSON data that :func:`decode` turns back into an equal value."""
    if value is None or type(value) in (bool, int, float, str):
        return value  # json writes a float's repr: the same double comes back, nan too
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if _arrays.is_tensor(value):
        value = _arrays.to_numpy(value, allow_cuda=True)[0]
    if isinstance(value, np.ndarray | np.generic) and value.dtype.kind in _KINDS:
        arr = np.asarray(value)  # tobytes() writes C order whatever the layout
        tag = "array" if isinstance(value, np.ndarray) else "scalar"
        data = base64.b64encode(arr.tobytes()).decode("ascii")
        return {tag: [arr.dtype.str, list(arr.shape), data]}
    if isinstance(value, bool | numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Complex):
        return {"complex": [complex(value).real, complex(value).imag]}
    return {"refused": type(value).__name__}


def decode(data: Any, argname: str, sender: str) -> Any:
    """Return the value :func:`encode` made ``data`` from (``sender`` sent it).

    Raise TypeError when the sender could not encode its value, naming ``argname``.
    """
    try:
        return _decode(data, argname, sender)
    except _Refused:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as exc:  # binascii.Error too
        raise BadMessage(
            f"{sender} sent {argname} in a form fogsim does not write: {exc}"
        ) from None


class _Refused(TypeError):
    """What a sender could not encode (see :func:`encode`)."""


def _decode(data: Any, argname: str, sender: str) -> Any:
    if isinstance(data, list):
        return [_decode(v, argname, sender) for v in data]
    if not isinstance(data, dict):
        return data
    if len(data) != 1:
        raise ValueError(f"{len(data)} tags")
    ((tag, body),) = data.items()
    if tag == "tuple":
        return tuple(_decode(v, argname, sender) for v in body)
    if tag == "dict":
        return {_decode(k, argname, sender): _decode(v, argname, sender) for k, v in body}
    if tag in ("array", "scalar"):
        dtype, shape, text = body
        kind = np.dtype(dtype)
        if kind.kind not in _KINDS:
            raise ValueError(f"dtype {dtype!r}")
        arr = np.frombuffer(base64.b64decode(text, validate=True), kind)
        arr = arr.reshape([int(d) for d in shape]).copy()
        return arr if tag == "array" else arr[()]
    if tag == "complex":
        return complex(float(body[0]), float(body[1]))
    if tag == "refused":
        raise _Refused(
            f"{argname} on {sender} holds a {body!s:.40}, which the processes of a sharded "
            "simulation cannot exchange: give numbers, numpy arrays, lists, tuples and dicts"
        )
    raise ValueError(f"tag {tag!r}")
