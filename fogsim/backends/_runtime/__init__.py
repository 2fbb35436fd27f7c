"""The distributed runtime's protocol, written once over a small :class:`Transport`.

One process per agent (MPI, torch.distributed) follows the same protocol for every op:
parse the call into this rank's :class:`~.plan.RankPlan` (whom to hear, whom to tell,
which weights), :func:`~.agree.agree` with the other ranks on a fingerprint of what must
match (the topology check; every rank raises the same error, or none does), then move the
bytes and combine. This package holds the parts that do not depend on how bytes move:

* :mod:`.transport` -- the :class:`Transport` interface (nonblocking point-to-point send
  and receive of raw buffers, one batch of them with one request, a small-metadata
  reduction and allgather, a barrier) and,
  apart, the :class:`WindowTransport` capability for one-sided windows;
* :mod:`.collectives` -- what every collective does before data moves (the checks, the
  agreement), :class:`~.collectives.RuntimeCollectives`, the base of each runtime's
  collectives part;
* :mod:`.agree` -- agreement before data moves;
* :mod:`.plan` -- one rank's plan of a ``neighbor_allreduce`` call and the send tables;
* :mod:`.exchange` -- the small exchanges of a dynamic call (send tables, the pair check of
  ``neighbor_allgather``, the lengths of blocks that may differ);
* :mod:`.neighbor` -- the neighbor ops (:class:`~.neighbor.NeighborOps`, a part each
  backend builds in its constructor), over :mod:`.static` (the static topology's
  transfers and tensor fusion) and a :class:`~.datapath.DataPath`, what a runtime
  supplies (its values, how their bytes move);
* :mod:`.machines` -- the machine-level ops (:class:`~.machines.MachineOps`) over a
  runtime's :class:`~.machines.MachineLink` (how values move within a machine);
* :mod:`.windows` -- the one-sided window ops (:class:`~.windows.WindowOps`) over a
  :class:`WindowTransport`;
* :mod:`.backend` -- :class:`~.backend.DistributedBackend`, the base of the MPI and torch
  backends, which forwards the public ops to their parts;
* :mod:`.inprocess` -- a transport between threads of one process, for tests: it shows
  what a transport must provide, and runs the protocol without a launcher.

``backends/mpi`` implements :class:`Transport` with mpi4py (:class:`MpiTransport`) and
``backends/torchdist`` with torch.distributed (:class:`TorchTransport`); neither imports
the other.
"""

from .transport import Request, Transport, WindowTransport

__all__ = ["Request", "Transport", "WindowTransport"]
