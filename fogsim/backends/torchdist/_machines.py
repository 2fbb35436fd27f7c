"""Machine-level ops of the torch.distributed runtime, on point-to-point transfers.

Inside a machine, values move by ``batch_isend_irecv`` between its local ranks; the
exchange among machines is a rank-level dynamic ``neighbor_allreduce`` in which only each
machine's local rank 0 sends and receives, so the usual agreement (the same error on
every rank, never a hang) covers the machine weights too. The additions are those of the
simulator and the MPI runtime, in the same order, so all three give the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch.distributed as dist

from ... import _arrays
from ...hierarchy._decomposed import digits, piece_bounds
from ...hierarchy._machines import layout_error
from .._weights import is_matrix, machine_words
from ._agree import LocalError
from ._neighbor import as_bytes
from ._values import Value

__all__ = ["MachineOps"]


def _sum_rows(rows: Any, k: int) -> Any:
    """``rows[0] + rows[1] + ... + rows[k-1]``, one addition at a time (numpy or torch)."""
    total = rows[0].copy() if isinstance(rows, np.ndarray) else rows[0].clone()
    for j in range(1, k):
        total += rows[j]
    return total


class MachineOps:
    """Mixin of :class:`TorchBackend`: machine layout, hierarchical and decomposed ops."""

    _n: int
    _rank: int
    _local_rank: int
    _local_size: int

    def _init_machine_ops(self) -> None:
        self._machine_error = layout_error(self._comm.allgather((self._local_size,
                                                                 self._local_rank)))  # fmt: skip

    def check_machines(self, op: str) -> None:
        if self._machine_error is not None:
            raise ValueError(f"{op}: {self._machine_error}")

    # -- within a machine -----------------------------------------------------------------
    def _gather_to_root(self, value: Value) -> Any:
        """Local rank 0: the machine's values stacked in local-rank order; others: None."""
        k, base = self._local_size, self._rank - self._local_rank
        group = self._data_group(value)
        if self._local_rank == 0:
            buf, buf_arr = value.empty((k, *value.shape))
            buf[0].copy_(value.tensor)
            ops = [dist.P2POp(dist.irecv, as_bytes(buf[j]), base + j, group) for j in range(1, k)]
            self._p2p(ops, value.cuda, blocking=True).Wait()
            return buf if buf_arr is None else buf_arr
        ops = [dist.P2POp(dist.isend, as_bytes(value.tensor), base, group)]
        self._p2p(ops, value.cuda, blocking=True).Wait()
        return None

    def _broadcast_from_root(self, value: Value, out: Any) -> Any:
        """Local rank 0's ``out`` on every rank of the machine (others pass None)."""
        k, base = self._local_size, self._rank - self._local_rank
        group = self._data_group(value)
        if self._local_rank == 0:
            tensor = out if value.arr is None else _as_tensor(out)
            ops = [dist.P2POp(dist.isend, as_bytes(tensor), base + j, group) for j in range(1, k)]
            self._p2p(ops, value.cuda, blocking=True).Wait()
            return out
        buf, buf_arr = value.empty(value.shape)
        self._p2p([dist.P2POp(dist.irecv, as_bytes(buf), base, group)], value.cuda,
                  blocking=True).Wait()  # fmt: skip
        return buf if buf_arr is None else buf_arr

    # -- the ops --------------------------------------------------------------------------
    def hierarchical_neighbor_allreduce(
        self, x: Any, self_weight: Any = None, src_machine_weights: Any = None,
        dst_machine_weights: Any = None, enable_topo_check: bool = True, name: str | None = None,
    ) -> Any:  # fmt: skip
        op = "hierarchical_neighbor_allreduce"
        self._start_machine_op(op, name, enable_topo_check)
        self._flush()
        value = self._checked(op, x, averaging=True)
        k = self._local_size
        mean = value.tensor if value.arr is None else value.arr
        if k > 1:
            rows = self._gather_to_root(value)
            if rows is not None:
                mean = _sum_rows(rows, k)
                mean /= k
        args, check = self._machine_args(self_weight, src_machine_weights, dst_machine_weights,
                                         enable_topo_check)  # fmt: skip
        with machine_words():
            mixed = self.neighbor_allreduce(mean, *args, enable_topo_check=check)
        out = self._broadcast_from_root(value, mixed if self._local_rank == 0 else None) if (
            k > 1
        ) else mixed
        return value.wrap(out)

    def _machine_args(self, self_weight, src, dst, check) -> tuple[tuple, bool]:
        """This rank's arguments of the rank-level exchange among local ranks 0."""
        k = self._local_size
        static = src is None and dst is None and self_weight is None
        # the same on every rank: the senders of a static step follow from the topology
        check = False if static else check
        if self._local_rank != 0:  # takes no part: keeps its value, sends nothing
            return (1.0, {}, {}), check
        topo = self.load_machine_topology()
        m = self._rank // k
        if static:  # the machine topology's weights
            w = (topo if self._machine_weighted else topo.uniform()).to_dense()
            return (float(w[m, m]), {int(j) * k: float(w[m, j]) for j in topo.in_neighbors(m)},
                    {int(j) * k: 1.0 for j in topo.out_neighbors(m)}), False  # fmt: skip
        if is_matrix(src):  # one machine-level matrix for the step
            w = np.asarray(src.to_dense() if hasattr(src, "to_dense") else src, dtype=float)
            if w.shape != (topo.size, topo.size):
                raise ValueError(
                    f"src_machine_weights is a {w.shape} matrix; expected one row and column "
                    f"per machine ({topo.size} x {topo.size})"
                )
            sw = float(w[m, m]) if self_weight is None else self_weight
            srcs = {int(j) * k: float(w[m, j]) for j in np.flatnonzero(w[m]) if j != m}
            dsts = {int(i) * k: 1.0 for i in np.flatnonzero(w[:, m]) if i != m}
            return (sw, srcs, dsts), check
        to_ranks = _to_ranks(k)
        if dst is None and isinstance(src, dict):  # senders: the machine topology's
            full = {int(j): 0.0 for j in topo.in_neighbors(m)}
            full.update(src)
            return (self_weight, to_ranks(full),
                    {int(j) * k: 1.0 for j in topo.out_neighbors(m)}), check  # fmt: skip
        return (self_weight, to_ranks(src), to_ranks(dst)), check

    def local_allreduce(self, x: Any, average: bool = True, name: str | None = None) -> Any:
        self._start_machine_op("allreduce(is_hierarchical_local=True)", name, average=average)
        self._flush()
        value = self._checked("allreduce-local", x, averaging=average, summing=True)
        k = self._local_size
        total = (value.tensor.clone() if value.arr is None else value.arr.copy())
        if k > 1:
            rows = self._gather_to_root(value)
            total = None
            if rows is not None:
                total = _sum_rows(rows, k)
                if average:
                    total /= k
            total = self._broadcast_from_root(value, total)
        return value.wrap(total)

    def decomposed_allreduce(self, x, average, name, factors):
        _arrays.check_name(name)
        if not isinstance(average, bool):
            raise TypeError(f"average must be a bool, got {type(average).__name__}")
        self._flush()
        factors, error = self._decomposition(factors)
        value = self._checked("allreduce-decomposed", x, averaging=average, summing=True,
                              extra=(factors,), error=error and LocalError(error))  # fmt: skip
        flat, flat_arr = value.empty((int(np.prod(value.shape, dtype=np.int64)),))
        flat.copy_(value.tensor.reshape(-1))
        buf = flat if flat_arr is None else flat_arr
        group = self._data_group(value)
        lo, hi, stages, stride = 0, buf.shape[0], [], 1
        for p, d in zip(factors, digits(self._rank, factors), strict=True):  # reduce-scatter
            members = [self._rank + (j - d) * stride for j in range(p)]
            bounds = piece_bounds(lo, hi, p)
            size = int(bounds[d + 1] - bounds[d])
            recv, recv_arr = value.empty((p, size))
            recv[d].copy_(flat[bounds[d] : bounds[d + 1]])
            ops = [dist.P2POp(dist.irecv, as_bytes(recv[j]), members[j], group)
                   for j in range(p) if j != d]  # fmt: skip
            ops += [dist.P2POp(dist.isend, as_bytes(flat[bounds[j] : bounds[j + 1]].clone()),
                               members[j], group) for j in range(p) if j != d]  # fmt: skip
            self._p2p(ops, value.cuda, blocking=True).Wait()
            lo, hi = int(bounds[d]), int(bounds[d + 1])
            rows = recv if recv_arr is None else recv_arr
            buf[lo:hi] = _sum_rows(rows, p) if p > 1 else rows[0]
            stages.append((members, bounds, d))
            stride *= p
        for members, bounds, d in reversed(stages):  # all-gather
            mine = flat[bounds[d] : bounds[d + 1]].clone()
            ops = [dist.P2POp(dist.isend, as_bytes(mine), members[j], group)
                   for j in range(len(members)) if j != d]  # fmt: skip
            ops += [dist.P2POp(dist.irecv, as_bytes(flat[bounds[j] : bounds[j + 1]]),
                               members[j], group)
                    for j in range(len(members)) if j != d]  # fmt: skip
            self._p2p(ops, value.cuda, blocking=True).Wait()
        if average:
            buf /= self._n
        return value.wrap(buf.reshape(value.shape))


def _as_tensor(arr: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr))


def _to_ranks(k: int):
    """Map a machine-level ``{machine: weight}`` (or machine list) to local ranks 0."""

    def convert(weights: Any) -> Any:
        if weights is None:
            return None
        if isinstance(weights, dict):
            return {_machine(j) * k: w for j, w in weights.items()}
        if isinstance(weights, list | tuple):
            return [_machine(j) * k for j in weights]
        return weights  # anything else: the rank-level checks word the error

    return convert


def _machine(j: Any) -> Any:
    return int(j) if isinstance(j, int | np.integer) and not isinstance(j, bool) else j
