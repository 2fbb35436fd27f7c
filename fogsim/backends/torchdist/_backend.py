"""The torch.distributed runtime: one process per agent, gloo for CPU, NCCL for CUDA.

Collectives map to their torch.distributed namesakes on this world's groups (see
``_world``); neighbor ops are point-to-point transfers grouped per call with
``batch_isend_irecv`` (``_neighbor``). Before data moves, ranks agree on shapes, dtypes,
devices and (dynamic calls) who sends to whom, in one small gloo collective, so a bad call
raises the same error on every rank instead of hanging (see ``_agree``). Results are those
of the simulator and the MPI runtime: the same plans, the same combine order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ... import _arrays, _settings
from ... import timeline as _timeline
from ..._handles import Handle, HandleTable
from ..._stall import Guard, Held, State, where
from .._base import launched_size
from .._parts import Capabilities
from .._runtime.agree import GUARDS, LocalError, agree, fingerprint, named, purpose
from .._runtime.backend import DistributedBackend
from .._runtime.neighbor import NeighborOps
from . import _world
from ._machines import TorchMachineOps
from ._neighbor import TorchDataPath, _Transfer, as_bytes
from ._peers import StorePeers, default_store
from ._transport import TorchTransport, _TorchRequest
from ._values import Value, as_value

__all__ = ["TorchBackend"]

_worlds = 0  # torch worlds this process has made (they name their stall-report keys)
_SLICE = timedelta(milliseconds=50)  # longest sleep on a Work between two stall checks


def _work_of(block: Callable[[], Any]) -> Any:
    """Return the torch ``Work`` whose ``wait`` (or its request's) ``block`` is, else None."""
    owner = getattr(block, "__self__", None)
    if isinstance(owner, _TorchRequest):
        owner = owner.work
    return owner if isinstance(owner, dist.Work) else None


def _done_within(work: Any) -> bool:
    """Sleep on ``work`` for at most :data:`_SLICE`; return whether it has completed."""
    try:
        work.wait(timeout=_SLICE)
    except RuntimeError:  # the slice ended, or the work failed
        if not work.is_completed():
            return False
        work.wait()  # done since the slice ended (returns), or failed: its own error
    return True


class _WorkGuard(Guard):
    """The stall guard of a torch world: a wait sleeps on the gloo ``Work``, it does not poll.

    gloo moves data on its own threads, so :meth:`Guard.wait`'s polling (which drives
    MPI's progress in the MPI runtime) only takes the cores from them, in this process
    and in the other ranks on the same cores: with 4 ranks on 2 cores the agreements'
    polling made a gradient-allreduce training step 4x slower (270 ms against 63 ms,
    BENCHMARKS.md). Here the wait blocks on the Work's condition variable for at most
    :data:`_SLICE` at a time and, between slices, answers other ranks and reports a stall
    as Guard does; a Work that failed raises its own error. Waits on anything but a torch
    Work keep Guard's loop.
    """

    def wait(
        self, test: Callable[[], bool], block: Callable[[], Any], held: Held | None = None
    ) -> None:
        work = _work_of(block)
        if work is None or self.timeout is None or self.size == 1:
            super().wait(test, block, held)
            return
        start = time.monotonic()
        deadline, reported = start + self.timeout, False
        here: list[tuple[str, str | None]] = []

        def state() -> State:
            if not here:
                here.append(where())
            return (*here[0], time.monotonic() - start)

        while not _done_within(work):
            if self.peers is not None:
                self.peers.serve(state)
            if not reported and time.monotonic() >= deadline:
                reported = True
                self.stalled(state)


class TorchBackend(DistributedBackend):
    """One agent per process over torch.distributed (see the module docstring)."""

    name = "torch"
    capabilities = Capabilities(stacked=False, windows=False, overlaps=True)

    def __init__(
        self,
        size: int | None = None,
        local_size: int | None = None,
        settings: _settings.Settings | None = None,
        groups: tuple[int, int, Any, Any] | None = None,
    ) -> None:
        """``groups``: ``(rank, size, gloo group, NCCL group or None)`` of a world on part
        of the job (the machines' world of the hierarchical ops), which it then owns;
        None: a world of the whole job, on groups of its own.
        """
        super().__init__()
        self._agreed: tuple | None = None  # the last topology every rank agreed on
        self._settings = settings or _settings.Settings()
        if groups is not None:
            self._rank, self._n, self.group, self.nccl_group = groups
        else:
            self._rank, self._n = _world.start(self._settings)
            # the launcher's count wins over init(size=)
            launched_size(size, self._n, self._rank, f"the launcher ({self._n} processes)")
            self.group, self.nccl_group = _world.new_groups(self._rank, self._n)
            if self._settings.rank_dir:  # for fogrun's report of a dead rank
                from ...run._liveness import record

                record(self._settings.rank_dir, self._rank)
        self._transport = TorchTransport(self.group, self._n, self._rank)
        self.stall = self._stall_guard(world=groups is None)
        try:
            self.machines = TorchMachineOps(
                self._transport,
                local_size,
                self.group,
                self.nccl_group,
                self._checked,
                self._flush,
                self._p2p,
                self._data_group,
                self._start_machine_op,
                self._decomposition,
                self.load_machine_topology,
                self.is_machine_topology_weighted,
                self._new_machine_world,
            )
        except BaseException:
            self._destroy_groups()
            raise
        if self.nccl_group is not None and groups is None:
            torch.cuda.set_device(self.machines.local_rank % torch.cuda.device_count())
        self.handles = HandleTable()
        self._path = TorchDataPath(self._transport, self.nccl_group, self._value)
        self.neighbors = NeighborOps(
            self._transport, self._path, self.handles, self.stall, self._settings.fusion_threshold
        )

    def _new_machine_world(self, groups: tuple[int, int, Any, Any]) -> TorchBackend:
        """The machines' world: one agent per local rank 0, on ``groups``, which it owns."""
        return TorchBackend(local_size=1, settings=self._settings, groups=groups)

    # -- world ----------------------------------------------------------------------------
    def close(self) -> None:
        error: Exception | None = None
        try:
            self.neighbors.flush()
        except (TypeError, ValueError) as exc:
            error = exc
        while len(self.handles):  # complete every handle, even past one that fails
            try:
                self.handles.drain()
            except Exception as exc:  # noqa: BLE001 - re-raised once the world is closed
                error = error or exc
        self.neighbors.close()
        self.machines.close()
        self._destroy_groups()
        if error is not None:
            raise error

    def _stall_guard(self, world: bool) -> Guard:
        """The world's stall guard, answering over the store (sub-worlds: none)."""
        global _worlds
        timeout = self._settings.stall_timeout if world and self._n > 1 else None
        if world:  # every process makes its worlds in the same order: a common prefix
            _worlds += 1
        store = default_store() if timeout is not None else None
        peers = (
            None
            if store is None
            else StorePeers(store, self._rank, self._n, f"fogsim/stall/{_worlds}/")
        )
        guard = _WorkGuard(self._rank, self._n, timeout, self._settings.stall_warn_only, peers)
        if timeout is not None:
            GUARDS[id(self._transport)] = guard
        return guard

    def _destroy_groups(self) -> None:
        GUARDS.pop(id(self._transport), None)
        # Local: gloo's sends completed when their bytes were handed over, so no peer
        # loses data; the default group stays for the next world (see _world).
        # The parts hold the backend's bound methods (a reference cycle), and the gloo
        # group through the transport: once nothing names a group, torch ends its threads
        # and closes its sockets now, not at the next garbage collection.
        _world.destroy_groups(self.nccl_group)
        self._transport.free()  # self.group
        self.group = self.nccl_group = None

    # -- topology -------------------------------------------------------------------------
    def _on_topology(self) -> None:
        topo = self._topology
        assert topo is not None
        try:
            self.neighbors.on_topology(topo, self._is_weighted)
        except ValueError:
            if self._agreed is not None:  # keep the world on the topology all ranks share
                self._topology, self._is_weighted = self._agreed
            raise
        self._agreed = (topo, self._is_weighted)

    def _p2p(self, ops: list, cuda: bool, blocking: bool) -> _Transfer:
        """Start the ``dist.P2POp`` list ``ops`` as one batch (every rank calls this)."""
        return self._path.p2p_ops(ops, cuda, blocking)

    # -- agent-local data -----------------------------------------------------------------
    def global_view(self, x: Any) -> Any:
        if not _arrays.is_tensor(x):
            x, _ = _arrays.to_numpy(x)
        return self.allgather(x[None])

    # -- helpers --------------------------------------------------------------------------
    def _value(self, x: Any, op: str, averaging: bool, summing: bool = False) -> Value:
        """Return this rank's ``x`` as a :class:`Value` (checked for dtype and device)."""
        value = as_value(x, op, averaging, summing)
        if value.cuda and self.nccl_group is None:
            raise TypeError(
                f"{op}: x is a CUDA tensor, but not every rank has CUDA and NCCL; pass CPU "
                "tensors or numpy arrays, or run every rank on a GPU"
            )
        return value

    def _checked(
        self,
        op,
        x,
        averaging,
        summing=False,
        shape_of=lambda s: s,
        extra=(),
        error=None,
        name=None,
        said="",
    ) -> Value:
        """Convert ``x`` and agree with every rank on shape, dtype, device, ``name`` and
        ``extra`` (``said``: how ``extra`` reads in a disagreement's message).

        ``error`` is a problem already found on this rank (it is raised everywhere too).
        Nothing moves before the agreement, so a call that differs never starts a transfer.
        """
        value, fp, describe = None, 0, "an invalid argument"
        try:
            value = self._value(x, op, averaging, summing)
            if error is None:
                shape = shape_of(value.shape)
                fp = fingerprint(
                    op, value.dtype.str, shape, value.cuda, averaging, repr(name), *extra
                )
                describe = f"{value.dtype} {shape}" + (" on cuda" if value.cuda else "")
                describe += named(name) + purpose(op, averaging)
        except (TypeError, ValueError) as exc:
            error = error or LocalError(exc)
        agree(self._transport, fp, error, f"{describe} in {op}{said}")
        assert value is not None  # agree raised on every rank otherwise
        return value

    def _data_group(self, value: Value) -> Any:
        return self.nccl_group if value.cuda else self.group

    def _start(self, op: str, work: Any, finish: Callable[[], Any], name: str | None):
        """Return a handle completing ``work`` (None: nothing moved) with ``finish``."""
        if work is None:
            return Handle.completed(op, finish(), name)

        def complete() -> Any:
            with _timeline.phase("COMMUNICATE"):
                work.wait()
            return finish()

        return self.handles.start(op, complete, work.is_completed, name)

    # -- collectives ----------------------------------------------------------------------
    def allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        return self.allreduce_nonblocking(x, average, name).wait()

    def allreduce_nonblocking(self, x: Any, average: bool = True, name: str | None = None):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        value = self._checked("allreduce", x, averaging=average, summing=True, name=name)
        out, out_arr = value.empty(value.shape)
        out.copy_(value.tensor)
        work = None
        if out.numel():
            work = dist.all_reduce(
                out, op=dist.ReduceOp.SUM, group=self._data_group(value), async_op=True
            )

        def finish() -> Any:
            if average:
                if out_arr is not None:
                    np.divide(out_arr, self._n, out=out_arr)
                else:
                    out.div_(self._n)
            return value.wrap(out if out_arr is None else out_arr)

        return self._start("allreduce", work, finish, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.broadcast_nonblocking(x, root_rank, name).wait()

    def broadcast_nonblocking(self, x: Any, root_rank: int, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        root, error = self.checked_root(root_rank)
        self._flush()
        value = self._checked(
            "broadcast", x, False, extra=(root,), error=error, name=name, said=f" from root {root}"
        )
        out, out_arr = value.empty(value.shape)
        out.copy_(value.tensor)
        work = None
        if out.numel():
            work = dist.broadcast(
                as_bytes(out), group=self._data_group(value), async_op=True, group_src=root
            )
        result = out if out_arr is None else out_arr
        return self._start("broadcast", work, lambda: value.wrap(result), name)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.allgather_nonblocking(x, name).wait()

    def allgather_nonblocking(self, x: Any, name: str | None = None) -> Handle:
        _arrays.check_name(name)
        self._flush()
        value = self._checked("allgather", x, averaging=False, shape_of=lambda s: s[1:], name=name)
        if value.shape == ():
            value = value.reshaped((1,))
        rows = self._all_rows(value.shape[0])
        most, trailing = int(rows.max()), value.shape[1:]
        # gloo gathers equal sizes only: every rank sends `most` rows, padded if shorter.
        buf, buf_arr = value.empty((self._n, most, *trailing))
        send = value.tensor
        if rows[self._rank] < most:
            send = buf[self._rank].clone()
            send[: value.shape[0]] = value.tensor
        work = None
        if buf.numel():
            outs = [as_bytes(part) for part in buf.unbind(0)]
            work = dist.all_gather(
                outs, as_bytes(send), group=self._data_group(value), async_op=True
            )

        def finish() -> Any:
            if np.all(rows == most):
                out = (
                    buf.reshape(-1, *trailing)
                    if buf_arr is None
                    else buf_arr.reshape(-1, *trailing)
                )
            elif buf_arr is not None:
                out = np.concatenate([buf_arr[r, : rows[r]] for r in range(self._n)])
            else:
                out = torch.cat([buf[r, : rows[r]] for r in range(self._n)])
            return value.wrap(out)

        return self._start("allgather", work, finish, name)

    def _all_rows(self, mine: int) -> np.ndarray:
        """Return every rank's first-dimension length (blocking, on the gloo group)."""
        rows = torch.empty(self._n, dtype=torch.int64)
        dist.all_gather(
            list(rows.split(1)), torch.tensor([mine], dtype=torch.int64), group=self.group
        )
        return rows.numpy()

    def barrier(self) -> None:
        self._flush()
        work = dist.barrier(group=self.group, async_op=True)
        self.stall.wait(work.is_completed, work.wait)

    def barrier_nonblocking(self) -> Handle:
        self._flush()
        work = dist.barrier(group=self.group, async_op=True)
        return self._start("barrier", work, lambda: None, None)
