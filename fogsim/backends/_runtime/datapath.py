"""What the neighbor ops leave to a runtime: its values and how their bytes move.

:class:`~.neighbor.NeighborOps` runs the protocol the same way on every runtime; a
:class:`DataPath` supplies what differs. The base class here is complete for numpy values
over any :class:`~.transport.Transport` (every transfer is one
:meth:`~.transport.Transport.exchange`); a runtime overrides what it does better (MPI:
the static topology's neighbor collective; torch: tensors on their device, NCCL).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np

from ..._arrays import Kind, wrap_like
from ...topology import Topology
from .plan import RankPlan
from .transport import Messages, Request, Transport

__all__ = ["ArrayValue", "DataPath", "Value"]


class Value(Protocol):
    """One rank's ``x``, converted for the data path.

    ``arr`` is its numpy view (None where it lives on a device); ``data`` what travels;
    ``key`` the fingerprint parts beyond dtype and shape (e.g. the device).
    """

    @property
    def arr(self) -> np.ndarray | None: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def data(self) -> Any: ...

    @property
    def key(self) -> tuple[Any, ...]: ...

    @property
    def device(self) -> bool:
        """Whether the value lives on a device (its bytes move over the device transport)."""
        ...

    @property
    def fusion_wrap(self) -> Callable[[np.ndarray], Any] | None:
        """What turns a fused numpy result into the caller's type (None: as is)."""
        ...

    def describe(self, shape: tuple[int, ...]) -> str: ...

    def wrap(self, out: Any) -> Any: ...

    def reshaped(self, shape: tuple[int, ...]) -> Value: ...

    def empty(self, shape: tuple[int, ...]) -> tuple[Any, np.ndarray | None]:
        """Return a new (buffer, numpy view or None) of ``shape`` and this dtype."""
        ...

    def scaled(self, s: float) -> Any:
        """Return what to send: ``x`` times the sender's weight ``s`` (numpy's rounding)."""
        ...


class ArrayValue:
    """A C-contiguous numpy array and the :class:`~fogsim._arrays.Kind` it came as."""

    __slots__ = ("arr", "kind", "dtype", "shape")

    key: tuple[Any, ...] = ()
    device = False

    def __init__(self, arr: np.ndarray, kind: Kind) -> None:
        self.arr, self.kind, self.dtype, self.shape = arr, kind, arr.dtype, arr.shape

    @property
    def data(self) -> np.ndarray:
        return self.arr

    @property
    def fusion_wrap(self) -> Callable[[np.ndarray], Any] | None:
        kind = self.kind
        return partial(wrap_like, kind=kind) if kind.torch or kind.half else None

    def describe(self, shape: tuple[int, ...]) -> str:
        return f"{self.dtype} {shape}"

    def wrap(self, out: Any) -> Any:
        return wrap_like(out, self.kind)

    def reshaped(self, shape: tuple[int, ...]) -> ArrayValue:
        return ArrayValue(self.arr.reshape(shape), self.kind)

    def empty(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        arr = np.empty(shape, dtype=self.dtype)
        return arr, arr

    def scaled(self, s: float) -> np.ndarray:
        return self.arr if s == 1.0 else np.multiply(self.arr, self.dtype.type(s))


ToArray = Callable[[Any, str, bool], tuple[np.ndarray, Kind]]


class DataPath:
    """Numpy values over point-to-point messages of ``p2p`` (see the module docstring).

    ``to_array(x, op, averaging)`` converts and checks a value (the runtime's rules; a
    path with values of its own overrides :meth:`value` instead);
    ``wait(test, block)`` waits for a fused batch (a stall guard's ``wait``; None: block).
    """

    #: Whether small nonblocking static calls may be queued and sent together.
    fuses = True
    #: Whether a static transfer of the size agreed last (:attr:`agreed`) may start beside
    #: its agreement, as raw bytes (see ``_runtime.static``); :meth:`repair` then takes
    #: part in it for a rank whose call differs.
    overlaps = False

    def __init__(
        self,
        p2p: Transport,
        to_array: ToArray | None,
        wait: Callable[[Callable[[], bool], Callable[[], Any]], None] | None = None,
    ) -> None:
        self.p2p = p2p
        self._to_array = to_array
        self.batch_wait = wait
        self.srcs: np.ndarray = np.empty(0, np.int64)
        self.dsts: np.ndarray = np.empty(0, np.int64)
        #: bytes of values handed to the transport, once per destination (the neighbor
        #: ops count them here; metadata is not counted): ``fogsim.bytes_sent``
        self.sent = 0
        #: The byte size of the last static transfer every rank agreed on (-1: none since
        #: the topology was set); the same on every rank, as agreements are.
        self.agreed = -1

    def value(self, x: Any, op: str, averaging: bool) -> Value:
        """Return ``x`` converted; raise TypeError/ValueError for what ``op`` cannot take."""
        assert self._to_array is not None, "a path without to_array converts its own values"
        arr, kind = self._to_array(x, op, averaging)
        return ArrayValue(arr, kind)

    def on_topology(self, topology: Topology, srcs: np.ndarray, dsts: np.ndarray) -> None:
        """Take the static topology's in-neighbors ``srcs`` (ascending) and ``dsts``."""
        self.srcs, self.dsts = srcs, dsts
        self.agreed = -1

    def start(self, sends: Messages, recvs: Messages, device: bool, blocking: bool) -> Request:
        """Start one call's messages (``device``: its buffers live on a device)."""
        return self.p2p.exchange(sends, recvs)

    def start_static(self, send: np.ndarray, recv: np.ndarray) -> Request:
        """Start sending ``send`` to every out-neighbor and receiving row ``k`` of ``recv``
        from in-neighbor ``k``."""
        sends = [(send, int(j)) for j in self.dsts]
        recvs = [(recv[k, ...], int(j)) for k, j in enumerate(self.srcs)]
        return self.start(sends, recvs, False, False)

    def static_allgather(self, send: np.ndarray, recv: np.ndarray) -> None:
        """:meth:`start_static`, blocking (agreed before)."""
        sends = [(send, int(j)) for j in self.dsts]
        recvs = [(recv[k, ...], int(j)) for k, j in enumerate(self.srcs)]
        self.start(sends, recvs, False, True).wait()

    def combine_device(
        self,
        value: Value,
        plan: RankPlan,
        recv: Any,
        weights: np.ndarray,
        select: np.ndarray | None,
    ) -> Any:
        """Return the weighted combine of a value held on a device."""
        raise NotImplementedError("this data path holds no values on a device")

    def repair(self) -> None:
        """Take part, with :attr:`agreed` bytes of no meaning, in the static transfer that
        other ranks started beside an agreement this rank failed (only where
        :attr:`overlaps`; see ``Transport.repair``)."""

    def close(self) -> None:
        """Release what the path holds."""
