"""Starting torch.distributed: who this process is, and where the ranks meet.

The default process group is torch's, process-wide: it is created by the first
``init(backend="torch")`` (unless the script created it already) and kept until the
interpreter exits, so ``shutdown()`` then ``init()`` needs no second rendezvous. Each
fogsim world makes its own groups on top of it (:func:`new_groups`) and frees them on
``shutdown()`` (:func:`destroy_groups`); so does the world of machines the hierarchical ops
run on (:func:`new_subgroups`).

Rank and size come from torchrun (``RANK``/``WORLD_SIZE``) or an MPI launcher
(``PMI_RANK``/``PMI_SIZE``, ``OMPI_COMM_WORLD_*``, ...); a process started alone is a
world of one. The ranks meet at ``MASTER_ADDR`` (default ``127.0.0.1``) on a port chosen
in this order:

1. ``FOGSIM_TORCH_PORT``, else ``MASTER_PORT`` (under torchrun, whose variables are all
   set, through ``init_method="env://"``, which also reuses torchrun's own store);
2. alone (world of one): any free port;
3. under an MPI launcher with mpi4py: rank 0 opens the store on a free port the kernel
   picks and broadcasts it (with its host name when the job spans hosts) over
   ``MPI_COMM_WORLD``: no collision, no race;
4. else ``29500 + crc32(job id) % 1000``, the job id being Slurm's, PMIx's or Open MPI's,
   else the parent process id (the MPI proxy that started this host's ranks). Jobs
   spanning hosts without mpi4py must set ``MASTER_ADDR`` and ``MASTER_PORT``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import socket
import zlib
from datetime import timedelta
from typing import Any

from ... import _settings

__all__ = [
    "BASE_PORT",
    "Endpoint",
    "default_port",
    "destroy_groups",
    "new_groups",
    "new_subgroups",
    "start",
]

#: First port of the derived range (torch's customary MASTER_PORT).
BASE_PORT = 29500
_PORT_SPAN = 1000
_LOCALHOST = "127.0.0.1"
_STORE_TIMEOUT = timedelta(minutes=5)  # for the ranks to meet; ops keep torch's default


class Endpoint:
    """Where and how this process joins: rank, size and the rendezvous."""

    __slots__ = ("rank", "size", "addr", "port", "how")

    def __init__(self, rank: int, size: int, addr: str | None, port: int | None, how: str):
        self.rank, self.size, self.addr, self.port, self.how = rank, size, addr, port, how

    def __repr__(self) -> str:
        return f"Endpoint(rank={self.rank}, size={self.size}, {self.how} {self.addr}:{self.port})"


def default_port(job_id: str | None, parent_pid: int | None = None) -> int:
    """Return the derived port ``29500 + crc32(job id) % 1000`` (job id: else the parent pid)."""
    if job_id is None:
        job_id = f"ppid:{os.getppid() if parent_pid is None else parent_pid}"
    return BASE_PORT + zlib.crc32(job_id.encode()) % _PORT_SPAN


def endpoint(settings: _settings.Settings) -> Endpoint:
    """Return how this process joins, from the launcher's variables (no communication)."""
    rank, size = 0, 1
    if settings.torchrun:  # torchrun always sets both (the settings' defaults otherwise)
        if settings.torch_rank is not None:
            rank = settings.torch_rank
        if settings.torch_world_size is not None:
            size = settings.torch_world_size
    elif settings.launcher_size is not None:
        rank, size = settings.launcher_rank or 0, settings.launcher_size
    if not 0 <= rank < size:
        what = f"RANK={rank}" if settings.torchrun else f"the launcher's rank {rank}"
        raise ValueError(f"{what} is out of range for a job of {size} processes")
    addr = settings.master_addr or _LOCALHOST
    if settings.torch_port is not None:
        return Endpoint(rank, size, addr, settings.torch_port, "tcp")
    if settings.torchrun:
        return Endpoint(rank, size, addr, settings.master_port, "env")
    if settings.master_port is not None:
        return Endpoint(rank, size, addr, settings.master_port, "tcp")
    if size == 1:
        return Endpoint(rank, size, _LOCALHOST, 0, "store")
    if settings.launcher_size is not None and importlib.util.find_spec("mpi4py") is not None:
        return Endpoint(rank, size, settings.master_addr, None, "mpi")  # None: rank 0 decides
    return Endpoint(rank, size, addr, default_port(settings.job_id), "tcp")


def _backend_string() -> str:
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available() and dist.is_nccl_available():
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def start(settings: _settings.Settings) -> tuple[int, int]:
    """Return (rank, size), starting torch's default process group unless it runs."""
    import torch.distributed as dist

    if not dist.is_available():
        raise ValueError("backend 'torch' needs torch.distributed, which this torch lacks")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    ep = endpoint(settings)
    backend = _backend_string()
    if ep.how == "env":
        dist.init_process_group(backend, init_method="env://")
    elif ep.how == "tcp":
        dist.init_process_group(
            backend, init_method=f"tcp://{ep.addr}:{ep.port}", rank=ep.rank, world_size=ep.size
        )
    else:
        store = _store(ep) if ep.how == "store" else _store_over_mpi(ep)
        dist.init_process_group(backend, store=store, rank=ep.rank, world_size=ep.size)
    # Destroyed at exit only because fogsim created it; a script's own group is its own.
    atexit.register(_destroy_default)
    return dist.get_rank(), dist.get_world_size()


def _store(ep: Endpoint) -> Any:
    import torch.distributed as dist

    return dist.TCPStore(
        ep.addr or _LOCALHOST,
        0,
        ep.size,
        is_master=True,
        wait_for_workers=False,
        timeout=_STORE_TIMEOUT,
    )


def _store_over_mpi(ep: Endpoint) -> Any:
    """Rank 0 serves the store on a port the kernel picks; MPI tells the others where."""
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != ep.size or comm.Get_rank() != ep.rank:
        raise ValueError(
            f"the MPI launcher's variables say rank {ep.rank} of {ep.size} but MPI_COMM_WORLD "
            f"says {comm.Get_rank()} of {comm.Get_size()}"
        )
    hosts = comm.allgather(socket.gethostname())
    store = None
    where: tuple[str, int] | str | None = None
    if ep.rank == 0:
        addr = ep.addr if ep.addr is not None else _LOCALHOST if len(set(hosts)) == 1 else hosts[0]
        try:
            store = dist.TCPStore(
                addr, 0, ep.size, is_master=True, wait_for_workers=False, timeout=_STORE_TIMEOUT
            )
            where = (addr, store.port)
        except Exception as exc:  # noqa: BLE001 - told to every rank below
            where = f"{type(exc).__name__}: {exc}"
    where = comm.bcast(where, root=0)
    if isinstance(where, str):
        raise ValueError(f"rank 0 could not open the torch rendezvous store: {where}")
    if store is None:
        store = dist.TCPStore(where[0], where[1], ep.size, is_master=False, timeout=_STORE_TIMEOUT)
    return store


def _destroy_default() -> None:
    """Wait for every rank, then destroy the default group while the interpreter lives.

    Without the barrier a rank could tear down its gloo pairs (and rank 0 the store)
    while another still exchanges on them; gloo's threads then died at interpreter exit
    now and then ("terminate called without an active exception"). A rank that died
    makes the barrier fail at once (its connections close): nothing waits on it.
    """
    import gc

    import torch.distributed as dist

    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.barrier()
        dist.destroy_process_group()
    gc.collect()  # the groups' C++ objects go now, not during finalization


def new_groups(rank: int, size: int) -> tuple[Any, Any]:
    """Return this world's gloo group and its NCCL group (None unless every rank has CUDA).

    Collective: every rank calls it once per world, in the same order.
    """
    import torch
    import torch.distributed as dist

    group = dist.new_group(backend="gloo")
    has_cuda = torch.cuda.is_available() and dist.is_nccl_available()
    flag = torch.tensor([1 if has_cuda else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if not flag.item():
        return group, None
    return group, dist.new_group(backend="nccl")


def new_subgroups(ranks: list[int], nccl: bool) -> tuple[Any, Any]:
    """Return the gloo group of ``ranks`` and its NCCL group (if ``nccl``); None outside.

    Collective over the whole job: every process calls it, in the same order.
    """
    import torch.distributed as dist

    group = dist.new_group(ranks=ranks, backend="gloo")
    nccl_group = dist.new_group(ranks=ranks, backend="nccl") if nccl else None
    if dist.get_rank() not in ranks:
        return None, None
    return group, nccl_group


def destroy_groups(*groups: Any) -> None:
    """Destroy ``groups`` (None: skipped) made by :func:`new_groups` or :func:`new_subgroups`.

    Local. torch's ``destroy_process_group`` leaves the group's tag behind, an empty list in
    its table of tags: removed here, so that a process making and freeing worlds in a loop
    keeps flat memory.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not dist.is_initialized():
        return
    tags = getattr(getattr(distributed_c10d, "_world", None), "tags_to_pg", None)
    for group in groups:
        if group is None:
            continue
        tag = None if tags is None else distributed_c10d._world.pg_to_tag.get(group)
        dist.destroy_process_group(group)
        if tag is not None and tags is not None and not tags.get(tag, True):
            del tags[tag]
