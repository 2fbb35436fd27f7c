"""Agreement before data moves, over a torch.distributed group.

The rules and the wording are the MPI runtime's (:func:`fogsim.backends.mpi._agree.agree`):
one small reduction of fingerprints and error flags, and only when something is off an
exchange of descriptions, so both runtimes raise the same errors. That function speaks
mpi4py's two calls; :class:`GroupComm` provides them over a gloo group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..mpi._agree import LocalError, fingerprint
from ..mpi._agree import agree as _agree

__all__ = ["GroupComm", "LocalError", "agree", "fingerprint"]


class GroupComm:
    """The mpi4py calls :func:`agree` makes (``Allreduce``/``Iallreduce`` in place with MAX,
    and ``allgather`` of Python objects), over the CPU (gloo) group ``group`` of ``size``
    ranks.
    """

    IN_PLACE = MAX = None  # mpi4py's names, as agree() passes them back

    def __init__(self, group: Any, size: int) -> None:
        self.group, self.size = group, size

    def Allreduce(self, _in_place: Any, buf: np.ndarray, op: Any = None) -> None:
        dist.all_reduce(torch.from_numpy(buf), op=dist.ReduceOp.MAX, group=self.group)

    def Iallreduce(self, _in_place: Any, buf: np.ndarray, op: Any = None) -> Any:
        work = dist.all_reduce(torch.from_numpy(buf), op=dist.ReduceOp.MAX, group=self.group,
                               async_op=True)  # fmt: skip
        return _Request(work)

    def allgather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out


class _Request:
    """An mpi4py-like request (``Test``/``Wait``) on a torch ``Work``."""

    __slots__ = ("work",)

    def __init__(self, work: Any) -> None:
        self.work = work

    def Test(self) -> bool:
        return bool(self.work.is_completed())

    def Wait(self) -> None:
        self.work.wait()


def agree(comm: GroupComm, fp: int, error: LocalError | None,
          describe: str | Callable[[], str]) -> None:  # fmt: skip
    """Raise the same exception on every rank unless all fingerprints match and no error."""
    _agree(comm, comm, fp, error, describe)
