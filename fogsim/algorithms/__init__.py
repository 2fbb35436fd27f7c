"""Reference decentralized algorithms, written once against the public API.

>>> import fogsim as fs
>>> from fogsim import algorithms as A
>>> ctx = fs.init(size=8, topology=fs.topology.ring_graph)
>>> problem = A.LeastSquares.random(m=10, d=3, seed=0)
>>> result = A.exact_diffusion(problem, alpha=0.02, iters=400)
>>> bool(result.history["distance"][-1] < 1e-10)
True
>>> fs.shutdown()

Every function runs simulated (agent-local values stacked over the n agents, one
weight-matrix product per communication), sharded over P processes (each stacking its
block of agents, ``fs.rank()``) and under ``fogrun``/MPI (one agent per process) without
change, and returns a :class:`Result`: the final agent-local ``x`` and a ``history`` of
per-iteration metrics (``"consensus_error"``, ``"distance"``, ``"grad_norm"``, and
``"bytes"``: each agent's cumulative bytes sent since the run began, averaged over the
agents, as :func:`fogsim.bytes_sent` counts them, so neither ``allreduce`` nor window
ops), computed with ``allreduce`` so they are the same on every agent and every process;
``Result.plot()`` draws them (``against="bytes"``: error against communication).
Sharded, the iterates are one process's bit for bit and the metrics agree to rounding
(their sums are added block by block). ``progress=True`` shows a tqdm bar on the main
process.

The weights (``schedule``) are the current topology's when None (as ``neighbor_allreduce``
uses them), one weight matrix for every step, or an iterator of them such as the dynamic
schedules of :mod:`fogsim.topology` (``W[i, j]``: the weight agent i gives agent j).
Under MPI a weight matrix passed per step costs the ranks a small agreement round each
time; for one fixed ``W``, ``fs.set_topology(W, is_weighted=True)`` and ``schedule=None``
is faster (the same numbers).

* consensus: :func:`consensus` (static or dynamic), :func:`push_sum` (directed graphs);
* optimization of ``sum_i f_i``: :func:`dgd` (ATC and AWC), :func:`exact_diffusion`,
  :func:`gradient_tracking`, :func:`push_diging` (time-varying directed graphs);
* compressed communication: :func:`choco_gossip`, :func:`choco_sgd`;
* adaptation: :func:`diffusion_lms` with a :class:`MovingTarget` stream;
* problems: :class:`LeastSquares`, also S problems at once (``LeastSquares.random(m, d,
  seed=[0, 1, 2])``: iterates ``(n, S, d)``, each metric recorded per problem, shape
  ``(iters + 1, S)``; :mod:`fogsim.experiments` runs seeds so); helpers:
  :func:`push_weights`, :func:`push_sum_estimate` (push-sum's ``x / p``, guarded where
  ``p`` underflows).
"""

from ._result import Result
from .compressed import choco_gossip, choco_sgd
from .consensus import consensus, push_sum, push_sum_estimate, push_weights
from .lms import MovingTarget, diffusion_lms
from .optimization import dgd, exact_diffusion, gradient_tracking, push_diging
from .problems import LeastSquares

__all__ = [
    "LeastSquares",
    "MovingTarget",
    "Result",
    "choco_gossip",
    "choco_sgd",
    "consensus",
    "dgd",
    "diffusion_lms",
    "exact_diffusion",
    "gradient_tracking",
    "push_diging",
    "push_sum",
    "push_sum_estimate",
    "push_weights",
]
