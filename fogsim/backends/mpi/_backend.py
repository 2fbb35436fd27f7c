"""The MPI runtime: one process per agent over mpi4py, raw buffers on the data path.

Collectives map to their MPI namesakes; the static topology lives in a distributed-graph
communicator (``Create_dist_graph_adjacent``) whose ``Neighbor_allgather`` feeds the
weighted combine; dynamic calls use ``Isend``/``Irecv`` set up per call. Before data
moves, ranks agree on shapes, dtypes and (dynamic calls) who sends to whom, so a bad
call raises the same error on every rank instead of hanging (see ``_agree``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ... import _arrays, _settings
from ..._arrays import Kind, to_numpy, wrap_like
from ..._handles import Handle
from .._base import Backend
from ._agree import LocalError, agree, fingerprint
from ._neighbor import NeighborOps
from ._plan import static_rank_plan
from ._windows import WindowOps

__all__ = ["MPIBackend"]


class MPIBackend(NeighborOps, WindowOps, Backend):
    """One agent per MPI process (see the module docstring)."""

    name = "mpi"

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
    ) -> None:
        super().__init__()
        self._settings = settings or _settings.Settings()
        self.comm = MPI.COMM_WORLD.Dup()
        self._n, self._rank = self.comm.Get_size(), self.comm.Get_rank()
        if size is not None and size != self._n:
            self.comm.Free()
            raise ValueError(
                f"init(size={size}) under MPI: the job has {self._n} processes; "
                "the size comes from the launcher (fogrun -np N)"
            )
        self.local_comm = self._split_machines(local_size)
        self.graph_comm: Any = None
        self._static: Any = None
        self._fusion_threshold = self._settings.fusion_threshold
        self._init_neighbor_ops()
        self._init_window_ops()

    def _split_machines(self, local_size: int | None) -> Any:
        if local_size is None:
            return self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self._rank)
        if self._n % local_size:
            raise ValueError(
                f"local_size={local_size} does not divide the {self._n} processes: "
                "emulated machines must all hold the same number of processes"
            )
        return self.comm.Split(color=self._rank // local_size, key=self._rank)

    # -- world ----------------------------------------------------------------------------
    @property
    def size_int(self) -> int:
        return self._n

    def size(self) -> int:
        return self._n

    def rank(self) -> int:
        return self._rank

    def local_size(self) -> int:
        return self.local_comm.Get_size()

    def local_rank(self) -> int:
        return self.local_comm.Get_rank()

    def close(self) -> None:
        self._drain()
        self._free_windows()
        for comm in (self.graph_comm, self.local_comm, self.comm):
            if comm is not None and comm != MPI.COMM_NULL:
                comm.Free()
        self.graph_comm = self.local_comm = self.comm = None

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        topo = self._topology
        indptr, indices, data = topo.offdiag_csr()
        agree(
            self.comm, MPI, fingerprint("topology", self._is_weighted, indptr.tobytes(),
                                        indices.tobytes(), data.tobytes()),
            None, "a different topology",
        )  # fmt: skip
        self._drain()
        if self.graph_comm is not None:
            self.graph_comm.Free()
        self._static = static_rank_plan(topo, self._is_weighted, self._rank)
        self.graph_comm = self.comm.Create_dist_graph_adjacent(
            topo.in_neighbors(self._rank), topo.out_neighbors(self._rank), reorder=False
        )

    def in_neighbor_ranks(self) -> list[int]:
        return self._topology.in_neighbors(self._rank)

    def out_neighbor_ranks(self) -> list[int]:
        return self._topology.out_neighbors(self._rank)

    # -- agent-local data -----------------------------------------------------------------
    def local(self, fn: Callable[[int], Any]) -> Any:
        if not callable(fn):
            raise TypeError(f"local() takes a function of the rank, got {type(fn).__name__}")
        return fn(self._rank)

    def vmap(self, fn: Callable[..., Any], in_axes: int | None | Sequence[int | None] = 0):
        if not callable(fn):
            raise TypeError(f"vmap() takes a function, got {type(fn).__name__}")
        return fn

    def is_main_process(self) -> bool:
        return self._rank == 0

    def global_view(self, x: Any) -> Any:
        arr, kind = to_numpy(x)
        stacked = self.allgather(arr[None])
        return wrap_like(stacked, kind)

    # -- helpers --------------------------------------------------------------------------
    def _value(self, x: Any, op: str, averaging: bool) -> tuple[np.ndarray, Kind]:
        """Return this rank's value as a C-contiguous array (checked for its dtype)."""
        arr, kind = to_numpy(x)
        if averaging:
            _arrays.require_float(arr, op)
        elif arr.dtype.kind not in "biuf":
            raise TypeError(f"{op}: x must hold numbers, got dtype {arr.dtype}")
        return (arr if arr.flags.c_contiguous else arr.copy(order="C")), kind

    def _checked(self, op, x, averaging, shape_of=lambda a: a.shape, extra=(), error=None):
        """Convert ``x`` and agree with every rank on shape and dtype; raise on all ranks.

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        """
        arr, kind, fp, describe = None, _arrays.Kind(False), 0, "an invalid argument"
        try:
            arr, kind = self._value(x, op, averaging)
            if error is None:
                fp = fingerprint(op, arr.dtype.str, shape_of(arr), *extra)
                describe = f"{arr.dtype} {shape_of(arr)}"
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self.comm, MPI, fp, error, f"{describe} in {op}")
        return arr, kind

    # -- collectives ----------------------------------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.allreduce_nonblocking(x, average, name).wait()

    def allreduce_nonblocking(self, x: Any, average: bool = True, name: str | None = None):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        arr, kind = self._checked("allreduce", x, averaging=average)
        out = np.empty_like(arr)
        req = self.comm.Iallreduce(arr, out, op=MPI.SUM)

        def finish() -> Any:
            req.Wait()
            if average:
                np.divide(out, self._n, out=out)
            return wrap_like(out, kind)

        return self.handles.start("allreduce", finish, req.Test, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.broadcast_nonblocking(x, root_rank, name).wait()

    def broadcast_nonblocking(self, x: Any, root_rank: int, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        root = self.check_rank(root_rank, "root_rank")
        self._flush()
        arr, kind = self._checked("broadcast", x, averaging=False)
        out = arr.copy()
        req = self.comm.Ibcast(out, root=root)

        def finish() -> Any:
            req.Wait()
            return wrap_like(out, kind)

        return self.handles.start("broadcast", finish, req.Test, name)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.allgather_nonblocking(x, name).wait()

    def allgather_nonblocking(self, x: Any, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        self._flush()
        arr, kind = self._checked("allgather", x, averaging=False, shape_of=lambda a: a.shape[1:])
        arr = arr.reshape(1) if arr.ndim == 0 else arr
        rows = np.array(self.comm.allgather(arr.shape[0]), dtype=np.int64)
        out = np.empty((int(rows.sum()), *arr.shape[1:]), dtype=arr.dtype)
        counts = rows * int(np.prod(arr.shape[1:], dtype=np.int64))
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        req = self.comm.Iallgatherv(arr, [out, (counts, displs)])

        def finish() -> Any:
            req.Wait()
            return wrap_like(out, kind)

        return self.handles.start("allgather", finish, req.Test, name)

    def barrier(self) -> None:
        self._flush()
        self.comm.Barrier()

    def barrier_nonblocking(self) -> Handle:
        self._flush()
        req = self.comm.Ibarrier()
        return self.handles.start("barrier", req.Wait, req.Test)
