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
   set; when torchrun serves the store itself, ``TORCHELASTIC_USE_AGENT_STORE=True``,
   through ``init_method="env://"``, which reuses it);
2. alone (world of one): any free port;
3. under an MPI launcher with mpi4py: rank 0 opens the store on a free port the kernel
   picks and broadcasts it (with its host name when the job spans hosts) over
   ``MPI_COMM_WORLD``: no collision, no race;
4. else ``29500 + crc32(job id) % 1000``, the job id being Slurm's, PMIx's or Open MPI's,
   else the parent process id (the MPI proxy that started this host's ranks). Jobs
   spanning hosts without mpi4py must set ``MASTER_ADDR`` and ``MASTER_PORT``.

What listens, and where (the store answers anyone who connects, without authentication,
so it must not face a network it need not):

* rank 0's store (torch's TCPStore) listens on the address the ranks meet at, only: on
  one host ``127.0.0.1``; across hosts ``MASTER_ADDR``, which must then be an address of
  rank 0's host on the network the hosts share (under an MPI launcher without it, the
  address rank 0's host name resolves to; a loopback one is refused). fogsim opens the
  listening socket itself and hands it to the store (``master_listen_fd``): torch's own
  would listen on every interface. Under torchrun with its agent's store, that store is
  torchrun's (``--master-addr``/``--rdzv-endpoint``), not fogsim's.
* gloo listens on the interface ``GLOO_SOCKET_IFNAME`` names (torch's variable; several,
  comma-separated). When every rank runs on one host (one host name under MPI, a loopback
  ``MASTER_ADDR``, or torchrun's ``LOCAL_WORLD_SIZE`` equal to ``WORLD_SIZE``) and it is
  not set, fogsim sets it to the loopback interface before the groups are made; across
  hosts without it, gloo uses the address each rank's host name resolves to. NCCL's
  bootstrap follows ``NCCL_SOCKET_IFNAME``, which fogsim leaves alone.

Nothing fogsim sends between ranks is pickled (see :mod:`fogsim.backends._wire`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import importlib.util
import ipaddress
import os
import socket
import zlib
from datetime import timedelta
from typing import Any

from ... import _settings
from .._wire import BadMessage, mpi_allgather_json, mpi_bcast_json

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
    """Where and how this process joins: rank, size and the rendezvous.

    ``one_host``: whether every rank runs on this host (None: MPI tells, at the start).
    """

    __slots__ = ("rank", "size", "addr", "port", "how", "one_host")

    def __init__(
        self,
        rank: int,
        size: int,
        addr: str | None,
        port: int | None,
        how: str,
        one_host: bool | None = False,
    ):
        self.rank, self.size, self.addr, self.port, self.how = rank, size, addr, port, how
        self.one_host = one_host

    def __repr__(self) -> str:
        return f"Endpoint(rank={self.rank}, size={self.size}, {self.how} {self.addr}:{self.port})"


def default_port(job_id: str | None, parent_pid: int | None = None) -> int:
    """Return the derived port ``29500 + crc32(job id) % 1000`` (job id: else the parent pid)."""
    if job_id is None:
        job_id = f"ppid:{os.getppid() if parent_pid is None else parent_pid}"
    return BASE_PORT + zlib.crc32(job_id.encode()) % _PORT_SPAN


def _is_loopback(addr: str) -> bool:
    """Whether ``addr`` is ``localhost`` or a loopback address (no name lookup)."""
    if addr.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


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
    one_host = (
        size == 1
        or _is_loopback(addr)
        or (settings.torchrun and settings.torch_local_world_size == size)
    )
    if settings.torch_port is not None:
        return Endpoint(rank, size, addr, settings.torch_port, "tcp", one_host)
    if settings.torchrun:
        how = "env" if settings.torch_agent_store else "tcp"
        return Endpoint(rank, size, addr, settings.master_port, how, one_host)
    if settings.master_port is not None:
        return Endpoint(rank, size, addr, settings.master_port, "tcp", one_host)
    if size == 1:
        return Endpoint(rank, size, _LOCALHOST, 0, "tcp", True)
    if settings.launcher_size is not None and importlib.util.find_spec("mpi4py") is not None:
        # None: rank 0 decides, from the ranks' host names
        return Endpoint(rank, size, settings.master_addr, None, "mpi", None)
    return Endpoint(rank, size, addr, default_port(settings.job_id), "tcp", one_host)


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
    if ep.how == "env":  # torchrun's agent serves the store
        _gloo_interface(settings, bool(ep.one_host))
        dist.init_process_group(backend, init_method="env://")
    else:
        if ep.how == "mpi":
            store, one_host = _store_over_mpi(ep)
        else:
            assert ep.addr is not None and ep.port is not None
            store, one_host = _tcp_store(ep.addr, ep.port, ep.rank, ep.size), bool(ep.one_host)
        _gloo_interface(settings, one_host)
        dist.init_process_group(backend, store=store, rank=ep.rank, world_size=ep.size)
    # Destroyed at exit only because fogsim created it; a script's own group is its own.
    atexit.register(_destroy_default)
    return dist.get_rank(), dist.get_world_size()


def _loopback_interface() -> str:
    """The name of this host's loopback interface (``lo`` on Linux, ``lo0`` elsewhere)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return "lo" if "lo" in names else next((n for n in names if n.startswith("lo")), "lo")


def _gloo_interface(settings: _settings.Settings, one_host: bool) -> None:
    """Keep gloo on the loopback interface when every rank runs on this host, unless the
    user named one (gloo reads ``GLOO_SOCKET_IFNAME`` whenever it makes a group)."""
    if one_host and settings.gloo_socket_ifname is None:
        _settings.export("GLOO_SOCKET_IFNAME", _loopback_interface())


def _listen(addr: str, port: int) -> socket.socket:
    """Return a socket listening on ``addr`` (an address or name of this host) only."""
    error: OSError | None = None
    for family, kind, proto, _, where in socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store
            sock.bind(where)
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error or OSError(f"{addr!r} names no address")


def _serve_store(addr: str, port: int, size: int) -> Any:
    """Rank 0's store, listening on ``addr`` only (port 0: one the kernel picks)."""
    import torch.distributed as dist

    try:
        sock = _listen(addr, port)
    except OSError as exc:
        hint = ""
        if exc.errno == errno.EADDRNOTAVAIL:
            hint = "; MASTER_ADDR must be an address of rank 0's host"
        raise ValueError(
            f"rank 0 cannot listen on {addr}:{port} for the torch rendezvous: {exc}{hint}"
        ) from None
    port = sock.getsockname()[1]
    # The store owns the descriptor from here (it closes it when it goes): detached, so
    # that Python never closes it as well (on a failed start it is left open, not doubly
    # closed).
    fd = sock.detach()
    return dist.TCPStore(
        addr,
        port,
        size,
        is_master=True,
        wait_for_workers=False,
        timeout=_STORE_TIMEOUT,
        master_listen_fd=fd,
    )


def _tcp_store(addr: str, port: int, rank: int, size: int) -> Any:
    """The store at ``addr:port``: served by rank 0, reached by the others."""
    import torch.distributed as dist

    if rank == 0:
        return _serve_store(addr, port, size)
    return dist.TCPStore(addr, port, size, is_master=False, timeout=_STORE_TIMEOUT)


def _store_over_mpi(ep: Endpoint) -> tuple[Any, bool]:
    """Rank 0 serves the store on a port the kernel picks; MPI tells the others where.

    Return the store and whether every rank runs on one host. Host names and the address
    travel as JSON over MPI's buffer calls (:mod:`fogsim.backends._wire`).
    """
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != ep.size or comm.Get_rank() != ep.rank:
        raise ValueError(
            f"the MPI launcher's variables say rank {ep.rank} of {ep.size} but MPI_COMM_WORLD "
            f"says {comm.Get_rank()} of {comm.Get_size()}"
        )
    hosts = [str(h) for h in mpi_allgather_json(comm, socket.gethostname())]
    one_host = len(set(hosts)) == 1
    store = None
    where: list[Any] | str | None = None
    if ep.rank == 0:
        addr = ep.addr if ep.addr is not None else _LOCALHOST if one_host else hosts[0]
        try:
            if ep.addr is None and not one_host and _resolves_to_loopback(addr):
                raise ValueError(
                    f"the ranks span hosts {sorted(set(hosts))}, and rank 0's host name "
                    f"{addr!r} resolves to a loopback address; set MASTER_ADDR to rank 0's "
                    "address on the network the hosts share"
                )
            store = _serve_store(addr, 0, ep.size)
            where = [addr, int(store.port)]
        except Exception as exc:  # noqa: BLE001 - told to every rank below
            where = f"{type(exc).__name__}: {exc}"
    where = mpi_bcast_json(comm, where)
    if isinstance(where, str):
        raise ValueError(f"rank 0 could not open the torch rendezvous store: {where}")
    if not (isinstance(where, list) and len(where) == 2 and type(where[1]) is int):
        raise BadMessage(f"rank 0 sent {where!r:.80} for the rendezvous's address")
    if store is None:
        store = dist.TCPStore(
            str(where[0]), where[1], ep.size, is_master=False, timeout=_STORE_TIMEOUT
        )
    return store, one_host


def _resolves_to_loopback(name: str) -> bool:
    """Whether every address ``name`` resolves to is a loopback one (False: unknown)."""
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None)}
    except OSError:
        return False
    return bool(found) and all(_is_loopback(str(a).split("%")[0]) for a in found)


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
