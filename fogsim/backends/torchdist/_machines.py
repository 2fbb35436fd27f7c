"""Machine-level ops of the torch.distributed runtime, as the MPI runtime runs them.

Inside a machine, values move by point-to-point transfers between its local ranks. The
exchange among machines runs on a second torch world, one process per machine (the local
ranks 0, on process groups of their own, made on the first hierarchical call): there a
machine is a rank, so the machine-level arguments get the rank-level checks and
agreement of ``neighbor_allreduce`` and their errors name machines, as under MPI. Each
local rank 0 then tells its machine the outcome (an error report, or the result), so
an error raises on every rank instead of leaving one waiting. The additions are those of
the simulator and the MPI runtime, in the same order, so all three give the same bits.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ... import _arrays
from ...topology import Topology
from .._base import Backend
from .._decomposed import digits, piece_bounds
from .._layout import layout_error
from .._runtime.agree import LocalError
from .._runtime.backend import MachineOps
from .._runtime.transport import Transport
from .._weights import exchange_between_machines
from . import _world
from ._neighbor import as_bytes, p2p
from ._values import Value

__all__ = ["TorchMachineOps"]

_UNSET = object()  # the machines' groups are made on the first hierarchical call


def _sum_rows(rows: Any, k: int) -> Any:
    """``rows[0] + rows[1] + ... + rows[k-1]``, one addition at a time (numpy or torch)."""
    total = rows[0].copy() if isinstance(rows, np.ndarray) else rows[0].clone()
    for j in range(1, k):
        total += rows[j]
    return total


class TorchMachineOps(MachineOps):
    """The machine-level part of :class:`TorchBackend` (see the module docstring).

    Built from what it needs: the world's ``transport`` (the machine layout is gathered on
    it), ``local_size`` (None: by host name), the world's gloo ``group`` and ``nccl_group``
    (None without NCCL), the backend's ``checked``, ``flush``, ``p2p`` (start a list of
    ``dist.P2POp`` as one batch), ``data_group``, ``start_op``
    (``Backend._start_machine_op``) and ``decomposition`` (``Backend._decomposition``),
    readers of the machine topology in use, and ``new_world``, which makes the machines'
    world from ``(rank, size, gloo group, NCCL group)``. Its construction is collective.
    """

    def __init__(
        self,
        transport: Transport,
        local_size: int | None,
        group: Any,
        nccl_group: Any,
        checked: Callable[..., Value],
        flush: Callable[[], None],
        p2p: Callable[[list[Any], bool, bool], Any],
        data_group: Callable[[Value], Any],
        start_op: Callable[..., None],
        decomposition: Callable[[Any], tuple[tuple[int, ...] | None, Exception | None]],
        machine_topology: Callable[[], Topology],
        machine_weighted: Callable[[], bool],
        new_world: Callable[[tuple[int, int, Any, Any]], Backend],
    ) -> None:
        self._transport, self._rank, self._n = transport, transport.rank, transport.size
        self.group, self.nccl_group = group, nccl_group
        self._checked, self._flush, self._p2p = checked, flush, p2p
        self._data_group, self._start_machine_op = data_group, start_op
        self._decomposition = decomposition
        self._topology, self._weighted = machine_topology, machine_weighted
        self._new_world = new_world
        self.local_rank, self.local_size = self._layout(local_size)
        layout = transport.allgather_json([self.local_size, self.local_rank])
        # why the machine-level ops cannot run here, or None
        self.error = layout_error([(int(k), int(lr)) for k, lr in layout])
        self._roots_groups: Any = _UNSET  # (gloo, NCCL) of the local ranks 0; None elsewhere
        self._machines_world: Backend | None = None  # the local ranks 0 as one world (on use)

    def _layout(self, local_size: int | None) -> tuple[int, int]:
        """Return (local rank, local size): by host name, or emulated blocks of local_size."""
        if local_size is not None:
            if self._n % local_size:
                raise ValueError(
                    f"local_size={local_size} does not divide the {self._n} processes: "
                    "emulated machines must all hold the same number of processes"
                )
            return self._rank % local_size, local_size
        hosts = self._transport.allgather_json(socket.gethostname())
        mine = [r for r, h in enumerate(hosts) if h == hosts[self._rank]]
        return mine.index(self._rank), len(mine)

    def close(self) -> None:
        """Close the machines' world, or destroy the local ranks 0's groups made here."""
        # The machines' world owns the roots' groups: closing it destroys them.
        world, groups = self._machines_world, self._roots_groups
        self._machines_world, self._roots_groups = None, _UNSET
        self.group = self.nccl_group = None  # destroyed by the backend: let them go
        if world is not None:
            world.close()
        elif groups is not _UNSET and groups is not None:
            _world.destroy_groups(*groups)

    def bytes_sent(self, reset: bool) -> int:
        """The bytes this rank sent in the machines' world (hierarchical steps)."""
        world = self._machines_world
        return 0 if world is None else int(world.bytes_sent(reset))

    def check(self, op: str) -> None:
        """Raise a ValueError naming ``op`` when the machines are not alike."""
        if self.error is not None:
            raise ValueError(f"{op}: {self.error}")

    # The machine topology needs nothing when it is set: the machines' world re-wires on
    # its next op.

    # -- within a machine -----------------------------------------------------------------
    def _gather_to_root(self, value: Value) -> Any:
        """Local rank 0: the machine's values stacked in local-rank order; others: None."""
        k, base = self.local_size, self._rank - self.local_rank
        group = self._data_group(value)
        if self.local_rank == 0:
            buf, buf_arr = value.empty((k, *value.shape))
            buf[0].copy_(value.tensor)
            ops = [p2p(dist.irecv, as_bytes(buf[j]), base + j, group) for j in range(1, k)]
            self._p2p(ops if buf.numel() else [], value.cuda, True).Wait()
            return buf if buf_arr is None else buf_arr
        ops = [p2p(dist.isend, as_bytes(value.tensor), base, group)]
        self._p2p(ops if value.nbytes else [], value.cuda, True).Wait()
        return None

    def _broadcast_from_root(self, value: Value, out: Any) -> Any:
        """Local rank 0's ``out`` on every rank of the machine (others pass None)."""
        k, base = self.local_size, self._rank - self.local_rank
        group = self._data_group(value)
        if self.local_rank == 0:
            tensor = out if value.arr is None else torch.from_numpy(np.ascontiguousarray(out))
            ops = [p2p(dist.isend, as_bytes(tensor), base + j, group) for j in range(1, k)]
            self._p2p(ops if value.nbytes else [], value.cuda, True).Wait()
            return out
        buf, buf_arr = value.empty(value.shape)
        ops = [p2p(dist.irecv, as_bytes(buf), base, group)] if value.nbytes else []
        self._p2p(ops, value.cuda, True).Wait()
        return buf if buf_arr is None else buf_arr

    def _tell_machine(self, report: tuple[str, str] | None) -> None:
        """Local rank 0: send its error ``report`` (None: none) to the machine; all raise it.

        On the gloo group whatever the data's device: a length, then the message.
        """
        k, base = self.local_size, self._rank - self.local_rank
        if self.local_rank == 0:
            text = b"" if report is None else "\n".join(report).encode()
            length = torch.tensor([len(text)], dtype=torch.int64)
            ops = [p2p(dist.isend, length, base + j, self.group) for j in range(1, k)]
            if text:
                payload = torch.frombuffer(bytearray(text), dtype=torch.uint8)
                ops += [p2p(dist.isend, payload, base + j, self.group) for j in range(1, k)]
            self._p2p(ops, False, True).Wait()
        else:
            length = torch.zeros(1, dtype=torch.int64)
            self._p2p([p2p(dist.irecv, length, base, self.group)], False, True).Wait()
            if length.item():
                payload = torch.empty(int(length.item()), dtype=torch.uint8)
                self._p2p([p2p(dist.irecv, payload, base, self.group)], False, True).Wait()
                kind, message = bytes(payload.numpy()).decode().split("\n", 1)
                report = (kind, message)
        if report is not None:
            raise (TypeError if report[0] == "TypeError" else ValueError)(report[1])

    # -- among machines -------------------------------------------------------------------
    def _is_machine_root(self) -> bool:
        """Return whether this is its machine's local rank 0.

        Collective over the job on the first call, which makes the local ranks 0's groups.
        """
        if self._roots_groups is _UNSET:
            roots = list(range(0, self._n, self.local_size))
            self._roots_groups = _world.new_subgroups(roots, self.nccl_group is not None)
        return self.local_rank == 0

    def _machine_world(self) -> Backend:
        """The local ranks 0, one per machine, as one world with the machine topology.

        Collective over those ranks only (built on first use, after :meth:`_is_machine_root`).
        """
        topo, weighted = self._topology(), self._weighted()
        if self._machines_world is None:
            gloo, nccl = self._roots_groups
            rank, size = self._rank // self.local_size, self._n // self.local_size
            self._machines_world = self._new_world((rank, size, gloo, nccl))
            self._roots_groups = None  # owned by the machines' world now
        world = self._machines_world
        if world._topology is not topo or world.is_topology_weighted() != weighted:
            world.set_topology(topo, weighted)
        return world

    # -- the ops --------------------------------------------------------------------------
    def hierarchical_neighbor_allreduce(
        self,
        x: Any,
        self_weight: Any,
        src_machine_weights: Any,
        dst_machine_weights: Any,
        enable_topo_check: bool,
        name: str | None,
    ) -> Any:
        """Gather and average on local rank 0; exchange among machines; broadcast back."""
        op = "hierarchical_neighbor_allreduce"
        self._start_machine_op(op, name, enable_topo_check)
        self._flush()
        value = self._checked(op, x, averaging=True, name=name)
        root = self._is_machine_root()
        k = self.local_size
        mean = value.tensor if value.arr is None else value.arr
        if k > 1:
            rows = self._gather_to_root(value)
            if root:
                mean = _sum_rows(rows, k)
                mean /= k
        out, report = None, None
        if root:  # every machine's local rank 0 runs the exchange, then tells its machine
            out, error = exchange_between_machines(
                self._machine_world(),
                mean,
                self_weight,
                src_machine_weights,
                dst_machine_weights,
                enable_topo_check,
            )
            if error is not None:
                if k == 1:
                    raise error
                report = (type(error).__name__, str(error))
        if k == 1:
            return value.wrap(out)
        self._tell_machine(report)
        return value.wrap(self._broadcast_from_root(value, out))

    def local_allreduce(self, x: Any, average: bool, name: str | None) -> Any:
        """Return the average (or sum) of ``x`` over this agent's machine."""
        self._start_machine_op("allreduce(is_hierarchical_local=True)", name, average=average)
        self._flush()
        value = self._checked("allreduce-local", x, averaging=average, summing=True, name=name)
        k = self.local_size
        if k == 1:
            return value.wrap(value.tensor.clone() if value.arr is None else value.arr.copy())
        rows = self._gather_to_root(value)
        total = None
        if rows is not None:
            total = _sum_rows(rows, k)
            if average:
                total /= k
        return value.wrap(self._broadcast_from_root(value, total))

    def decomposed_allreduce(
        self, x: Any, average: bool, name: str | None, factors: tuple[int, ...] | None
    ) -> Any:
        """Reduce-scatter then all-gather over stages of ranks differing in one digit.

        Point-to-point on the job's groups: a stage's members are known from the factors,
        so no group is made per stage.
        """
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        factors, error = self._decomposition(factors)
        value = self._checked(
            "allreduce-decomposed",
            x,
            averaging=average,
            summing=True,
            extra=(factors,),
            error=error and LocalError(error),
            name=name,
        )
        assert factors is not None  # the agreement raised the error on every rank
        flat, flat_arr = value.empty((int(np.prod(value.shape, dtype=np.int64)),))
        flat.copy_(value.tensor.reshape(-1))
        buf = flat if flat_arr is None else flat_arr
        group = self._data_group(value)
        lo, hi, stages, stride = 0, buf.shape[0], [], 1
        for p, d in zip(factors, digits(self._rank, factors), strict=True):  # reduce-scatter
            members = [self._rank + (j - d) * stride for j in range(p)]
            bounds = piece_bounds(lo, hi, p)
            pieces = [flat[bounds[j] : bounds[j + 1]] for j in range(p)]
            recv, recv_arr = value.empty((p, pieces[d].numel()))
            recv[d].copy_(pieces[d])
            # every member knows every piece's length: empty ones do not move
            ops = [
                p2p(dist.irecv, as_bytes(recv[j]), members[j], group)
                for j in range(p)
                if j != d and recv.numel()
            ]
            ops += [
                p2p(dist.isend, as_bytes(pieces[j]), members[j], group)
                for j in range(p)
                if j != d and pieces[j].numel()
            ]
            self._p2p(ops, value.cuda, True).Wait()
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            buf[lo:hi] = _sum_rows(recv if recv_arr is None else recv_arr, p)
            stages.append((members, pieces, d))
            stride *= p
        for members, pieces, d in reversed(stages):  # all-gather, into the pieces of flat
            ops = [
                p2p(dist.isend, as_bytes(pieces[d]), members[j], group)
                for j in range(len(members))
                if j != d and pieces[d].numel()
            ]
            ops += [
                p2p(dist.irecv, as_bytes(pieces[j]), members[j], group)
                for j in range(len(members))
                if j != d and pieces[j].numel()
            ]
            self._p2p(ops, value.cuda, True).Wait()
        if average:
            buf /= self._n
        return value.wrap(buf.reshape(value.shape))
