"""The torch.distributed runtime: one process per agent, gloo for CPU, NCCL for CUDA.

Collectives map to their torch.distributed namesakes on this world's groups (see
``_world``); neighbor ops are point-to-point transfers grouped per call with
``batch_isend_irecv`` (``_neighbor``). Before data moves, ranks agree on shapes, dtypes,
devices and (dynamic calls) who sends to whom, in one small gloo collective, so a bad call
raises the same error on every rank instead of hanging (see ``_runtime.agree``). Results are those
of the simulator and the MPI runtime: the same plans, the same combine order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ... import _arrays, _settings
from ..._handles import HandleTable
from ..._stall import Guard, Held, State, where
from .._base import launched_size
from .._parts import Capabilities
from .._runtime.backend import DistributedBackend
from .._runtime.neighbor import NeighborOps
from . import _world
from ._collectives import TorchCollectives, TorchValues
from ._machines import TorchMachineLink
from ._neighbor import TorchDataPath
from ._peers import StorePeers, default_store
from ._transport import TorchTransport, _TorchRequest

if TYPE_CHECKING:
    from ..._types import ArrayLike

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
    """One agent per process over torch.distributed (see the module docstring).

    Its parts: ``collectives`` (``TorchCollectives`` on the world's groups),
    ``neighbors`` (the runtime's, over ``TorchDataPath``) and ``machines`` (the
    runtime's, over ``TorchMachineLink``); it has no one-sided windows. CUDA tensors
    are combined on their device when every rank has CUDA and NCCL (else a TypeError).
    """

    name = "torch"
    capabilities = Capabilities(stacked=False, windows=False, cuda=True, overlaps=True)
    transport: TorchTransport
    collectives: TorchCollectives

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
        settings = settings or _settings.Settings()
        if groups is not None:
            rank, n, group, nccl_group = groups
        else:
            rank, n = _world.start(settings)
            # the launcher's count wins over init(size=)
            launched_size(size, n, rank, f"the launcher ({n} processes)")
            group, nccl_group = _world.new_groups(rank, n)
            if settings.rank_dir:  # for fogrun's report of a dead rank
                from ...run._liveness import record

                record(settings.rank_dir, rank)
        super().__init__(n, rank)
        self._agreed: tuple[Any, bool] | None = None  # the last topology all ranks agreed on
        self._settings = settings
        self.group, self.nccl_group = group, nccl_group
        self.transport = TorchTransport(self.group, self._n, self._rank)
        self.stall = self._stall_guard(world=groups is None)
        self.handles = HandleTable()
        values = TorchValues(self.nccl_group is not None)
        path = TorchDataPath(self.transport, self.nccl_group, values)
        self.neighbors = NeighborOps(
            self.transport, path, self.handles, self.stall, self._settings.fusion_threshold
        )
        self.collectives = TorchCollectives(
            self.group,
            self.nccl_group,
            self.transport,
            self.handles,
            self.neighbors.flush,
            self.stall,
            values,
        )
        try:  # refused on every rank alike (a machine layout that cannot be)
            self.machines = self.machine_ops(
                TorchMachineLink(
                    self.transport,
                    local_size,
                    self.group,
                    self.nccl_group,
                    path.p2p_ops,
                    self._new_machine_world,
                )
            )
        except BaseException:
            self.neighbors.close()
            self._destroy_groups()
            raise
        if self.nccl_group is not None and groups is None:
            torch.cuda.set_device(self.machines.local_rank % torch.cuda.device_count())

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
        self.collectives.close()
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
        if timeout is not None:  # the agreements wait under it
            self.transport.guard = guard
        return guard

    def _destroy_groups(self) -> None:
        self.transport.guard = None
        # Local: gloo's sends completed when their bytes were handed over, so no peer
        # loses data; the default group stays for the next world (see _world).
        # Once nothing names a group (the parts let theirs go on close), torch ends its
        # threads and closes its sockets now, not at the next garbage collection.
        _world.destroy_groups(self.nccl_group)
        self.transport.free()  # self.group
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

    # -- agent-local data -----------------------------------------------------------------
    def global_view(self, x: ArrayLike) -> Any:
        value: Any = x if _arrays.is_tensor(x) else _arrays.to_numpy(x)[0]
        return self.collectives.allgather(value[None])
