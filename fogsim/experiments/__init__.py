"""Experiments over seeds and grids: cached, parallel sweeps of simulated runs.

Write one run as a function of a configuration (a dict of JSON scalars), make the grid,
sweep it; the results come back as a tidy table and as plots of the mean over seeds::

    import fogsim as fs
    from fogsim import algorithms as A
    from fogsim.experiments import grid, sweep, world

    def run(config):                      # module-level: worker processes import it
        with world(8, fs.topology.ring_graph):
            problem = A.LeastSquares.random(m=10, d=5, seed=config["seed"])
            return A.dgd(problem, alpha=config["alpha"], iters=200)

    configs = grid(alpha=[0.01, 0.03], seed=range(5))      # 10 runs
    results = sweep(run, configs, cache="runs/", n_jobs=4)
    results.to_csv("runs.csv")                            # one row per run per iteration
    results.summary("distance", by=["alpha"])             # mean and std over seeds
    results.plot("distance", hue="alpha")                 # mean line, std band

* :func:`grid` is the cartesian product of its axes (the first slowest, the last
  fastest), in ``itertools.product`` order.
* :func:`sweep` runs what the ``cache`` folder lacks (one JSON file per configuration,
  keyed by a hash of the configuration, the run's name and ``version``, written
  atomically), so a sweep that was stopped, or in which some runs failed, resumes on the
  next call; ``n_jobs`` runs in parallel through joblib and ``backend="dask"`` or
  ``"ray"`` on a cluster; one tqdm bar. A run that raises does not stop the others; the
  sweep raises :class:`SweepError` at the end (``on_error="skip"``: returns the rest).
* Each run starts its own world: :func:`world` makes one current for the block (this
  thread only), leaving a world the caller has open alone.
* :class:`Results`: ``rows`` (tidy: axes, ``iteration``, metrics), ``runs`` (final
  values), :meth:`~Results.to_csv`, :meth:`~Results.to_pandas` (with pandas installed),
  :meth:`~Results.summary`, :meth:`~Results.select`, :meth:`~Results.plot` against
  ``"iteration"``, ``"bytes"`` or ``"time"`` (with a :mod:`fogsim.clock`).
* Seeds stacked: ``sweep(..., stack_seeds=True)`` runs the configurations that differ
  only in ``seed`` as one simulation whose state is ``(n, S, d)``; ``run`` then gets the
  seeds as a list and returns one result per seed. :func:`optimize` (the built-in run: a
  reference algorithm on random least squares, over algorithm, topology, step size,
  heterogeneity and seed) does so through :class:`fogsim.algorithms.LeastSquares`'s
  batches, and :func:`unstack` splits a batched result for runs of your own. The sweep
  says when it stacks (on the bar, in the ``fogsim.experiments`` log, in
  ``Results.stacked``). Stacked and separate runs agree to rounding.
* One command: ``python -m fogsim.experiments SPEC.json`` (or ``fogsim experiments
  SPEC.json``) sweeps a grid written in JSON (see :func:`main`).
"""

from __future__ import annotations

from ._configs import grid
from ._main import main
from ._results import Results
from ._runner import ALGORITHMS, DEFAULTS, TOPOLOGIES, optimize, unstack, world
from ._sweep import SweepError, sweep

__all__ = [
    "ALGORITHMS",
    "DEFAULTS",
    "TOPOLOGIES",
    "Results",
    "SweepError",
    "grid",
    "main",
    "optimize",
    "sweep",
    "unstack",
    "world",
]
