"""The sweep: cached runs, in parallel through joblib, seeds stacked where asked."""

from __future__ import annotations

import contextlib
import json
import logging
import numbers
import os
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fogsim import _context

from ._cache import Cache, Outcome, outcome_of
from ._configs import Config, Value, check_configs, config_key, run_name
from ._results import Results

__all__ = ["RunFunction", "SweepError", "sweep"]

#: A run: a configuration in, a Result or a dict of metrics out (a list of them, stacked).
RunFunction = Callable[[dict[str, Any]], Any]

logger = logging.getLogger("fogsim.experiments")

_ERRORS = ("raise", "skip")


class SweepError(RuntimeError):
    """Some runs of a sweep failed; the others are in ``results`` (and in the cache).

    Attributes
    ----------
    failures : list of (dict, str)
        Each failed configuration and its traceback's text.
    results : Results
        The runs that finished.
    """

    def __init__(self, failures: list[tuple[Config, str]], results: Results) -> None:
        self.failures = failures
        self.results = results
        first_config, first_text = failures[0]
        last_line = first_text.strip().splitlines()[-1] if first_text.strip() else ""
        super().__init__(
            f"{len(failures)} of {len(results.configs) + len(failures)} runs failed (the "
            f"others are cached; sweep again to retry these); the first, {first_config}: "
            f"{last_line}"
        )


@dataclass(frozen=True)
class _Task:
    """Configurations run by one call of the run function: one, or a group of seeds."""

    indices: tuple[int, ...]
    configs: tuple[Config, ...]
    seeds: tuple[Value, ...] | None = None  # stacked: the seeds, in the order of indices
    seed_key: str = "seed"


def sweep(
    run: RunFunction,
    configs: Sequence[Config],
    *,
    cache: str | os.PathLike[str] | None = None,
    version: str | None = None,
    n_jobs: int = 1,
    backend: str | None = None,
    progress: bool = True,
    stack_seeds: bool = False,
    seed_key: str = "seed",
    on_error: str = "raise",
) -> Results:
    """Run ``run(config)`` for every configuration; return the :class:`Results`.

    Parameters
    ----------
    run : callable
        ``run(config) -> Result | dict``: one simulated run (a module-level function, so
        that worker processes can unpickle it; :func:`optimize` is one). It returns a
        :class:`fogsim.algorithms.Result` (its ``history`` is kept) or a dict of numbers
        and 1-d arrays, one value per iteration. Each run should start its own simulated
        world: :func:`world` does so without touching a world the caller has open.
    configs : sequence of dict
        The configurations, e.g. from :func:`grid`: str keys, JSON scalar values, no two
        alike.
    cache : str or path, optional
        A folder holding one file per finished run (created if absent). A run found there
        (same configuration, same ``run`` name, same ``version``) is read, not computed, so
        a sweep interrupted or partly failed resumes where it stopped.
    version : str, optional
        Part of every cache key: change it when ``run``'s code changes its numbers.
    n_jobs : int
        Runs at once (joblib's meaning: ``-1`` all CPUs). 1 with no ``backend`` runs them
        one after the other in this process.
    backend : str, optional
        A joblib backend for ``joblib.parallel_config``: ``"loky"`` (processes, the
        default when ``n_jobs != 1``), ``"multiprocessing"``, ``"dask"`` (a
        ``dask.distributed.Client`` must be open: ``pip install dask distributed``) or
        ``"ray"`` (registered here; ``pip install ray``), or any registered one.
        ``"threading"`` only for runs written with :func:`world` (``fogsim.init`` is
        process-wide).
    progress : bool
        One tqdm bar over the runs (cached ones counted at the start).
    stack_seeds : bool
        Configurations that differ only in ``seed_key`` run as one simulation: ``run`` is
        called with ``config[seed_key]`` a list of seeds and must return a list of
        results, one per seed, in order (as :func:`optimize` does: state ``(n, S, d)``).
        Said on the bar and in the log, and kept in ``Results.stacked``.
    seed_key : str
        The seed axis (for ``stack_seeds`` and for averaging in :meth:`Results.summary`
        and :meth:`Results.plot`).
    on_error : {"raise", "skip"}
        A run that raises does not stop the sweep: the others run and are cached; then
        ``"raise"`` raises a :class:`SweepError` naming the failures (its ``results``
        holds the rest), ``"skip"`` returns the rest with ``Results.failures`` set.
        Failed runs are not cached: the next sweep tries them again.

    Raises
    ------
    TypeError, ValueError
        A bad argument, named.
    SweepError
        Some runs failed (``on_error="raise"``).
    """
    if not callable(run):
        raise TypeError(f"run must be a function of one config, got {type(run).__name__}")
    checked = check_configs(configs)
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral):
        raise TypeError(f"n_jobs must be an int, got {type(n_jobs).__name__}")
    if n_jobs == 0:
        raise ValueError("n_jobs must be >= 1, or negative as joblib counts (-1: all CPUs), got 0")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a joblib backend's name, got {type(backend).__name__}")
    for argname, flag in (("progress", progress), ("stack_seeds", stack_seeds)):
        if not isinstance(flag, bool):
            raise TypeError(f"{argname} must be a bool, got {type(flag).__name__}")
    if not isinstance(seed_key, str):
        raise TypeError(f"seed_key must be a str, got {type(seed_key).__name__}")
    if version is not None and not isinstance(version, str):
        raise TypeError(f"version must be a str or None, got {type(version).__name__}")
    if on_error not in _ERRORS:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    store = None if cache is None else Cache(_path(cache))

    name = run_name(run)
    keys = [config_key(c, name, version) for c in checked]
    outcomes: list[Outcome | None] = [
        None if store is None else store.load(k, c, name, version)
        for k, c in zip(keys, checked, strict=True)
    ]
    todo = [i for i, o in enumerate(outcomes) if o is None]
    tasks = _tasks(checked, todo, seed_key if stack_seeds else None)
    stacked = [t for t in tasks if t.seeds is not None]
    note = ""
    if stacked:
        merged = sum(len(t.indices) for t in stacked)
        note = (
            f"fogsim.experiments: stacked seeds: {merged} runs in {len(stacked)} simulations "
            f"(seeds as an extra axis of the state)"
        )
        logger.info(note)

    failures: list[tuple[int, str]] = []
    from tqdm import tqdm

    bar = tqdm(
        total=len(checked),
        initial=len(checked) - len(todo),
        desc="sweep",
        unit="run",
        disable=not progress,
        dynamic_ncols=True,
    )
    if note and progress:
        bar.write(note)
    before = _context.peek()
    try:
        for task, done in _execute(run, tasks, n_jobs, backend):
            for index, (ok, value) in zip(task.indices, done, strict=True):
                if ok:
                    outcome: Outcome = value
                    outcomes[index] = outcome
                    if store is not None:
                        store.save(keys[index], checked[index], name, version, outcome)
                else:
                    failures.append((index, value))
                bar.update(1)
            if failures:
                bar.set_postfix(failed=len(failures), refresh=False)
    finally:
        bar.close()
    if before is not None and before.closed:
        warnings.warn(
            "the run function closed the fogsim world that was open before the sweep (it "
            "called fogsim.init or fogsim.shutdown in this process); start its world with "
            "fogsim.experiments.world(...) to leave the caller's alone",
            RuntimeWarning,
            stacklevel=2,
        )
    kept = [i for i, o in enumerate(outcomes) if o is not None]
    results = Results(
        [checked[i] for i in kept],
        [o for o in outcomes if o is not None],
        seed_key=seed_key,
        computed=len(todo) - len(failures),
        cached=len(checked) - len(todo),
        stacked=[
            {"config": _without(t.configs[0], seed_key), "seeds": list(t.seeds or ())}
            for t in stacked
        ],
        failures=[(checked[i], text) for i, text in sorted(failures)],
    )
    if failures and on_error == "raise":
        raise SweepError(results.failures, results)
    return results


def _path(cache: Any) -> str | os.PathLike[str]:
    if not isinstance(cache, (str, os.PathLike)):
        raise TypeError(f"cache must be a folder's path, got {type(cache).__name__}")
    return cache


def _without(config: Config, key: str) -> Config:
    return {k: v for k, v in config.items() if k != key}


def _tasks(configs: list[Config], todo: list[int], seed_key: str | None) -> list[_Task]:
    """Return the calls to make: one per configuration, or one per group of seeds."""
    if seed_key is None:
        return [_Task((i,), (configs[i],)) for i in todo]
    groups: dict[str, list[int]] = {}
    singles: list[_Task] = []
    for i in todo:
        config = configs[i]
        if seed_key not in config:
            singles.append(_Task((i,), (config,)))
            continue
        base = json.dumps(_without(config, seed_key), sort_keys=True)
        groups.setdefault(base, []).append(i)
    tasks = singles
    for members in groups.values():
        if len(members) == 1:
            tasks.append(_Task((members[0],), (configs[members[0]],)))
        else:
            seeds = tuple(configs[i][seed_key] for i in members)
            tasks.append(_Task(tuple(members), tuple(configs[i] for i in members), seeds, seed_key))
    tasks.sort(key=lambda t: t.indices[0])
    return tasks


def _execute(
    run: RunFunction, tasks: list[_Task], n_jobs: int, backend: str | None
) -> Iterator[tuple[_Task, list[tuple[bool, Any]]]]:
    """Yield each task with its per-configuration ``(ok, Outcome or traceback)``, as done."""
    if not tasks:
        return
    if n_jobs == 1 and backend is None:
        for task in tasks:
            yield task, _perform(run, task)
        return
    import joblib

    engine = contextlib.nullcontext() if backend is None else _engine(backend, n_jobs)
    with engine:
        parallel = joblib.Parallel(n_jobs=n_jobs, return_as="generator_unordered")
        calls = (joblib.delayed(_perform_indexed)(run, task, k) for k, task in enumerate(tasks))
        for k, done in parallel(calls):
            yield tasks[k], done


def _engine(backend: str, n_jobs: int) -> contextlib.AbstractContextManager[Any]:
    """Return joblib's configuration for ``backend``, registering Ray's when asked for."""
    import joblib

    if backend == "ray":
        try:
            from ray.util.joblib import register_ray
        except ImportError as exc:
            raise ImportError(
                "backend='ray' needs Ray (pip install ray) and, on a cluster, ray.init(...)"
            ) from exc
        register_ray()
    elif backend == "dask":
        try:
            import dask.distributed  # noqa: F401 - joblib's dask backend needs it
        except ImportError as exc:
            raise ImportError(
                "backend='dask' needs dask.distributed (pip install dask distributed) and a "
                "client: from dask.distributed import Client; client = Client(...)"
            ) from exc
    cm: contextlib.AbstractContextManager[Any] = joblib.parallel_config(
        backend=backend, n_jobs=n_jobs
    )
    return cm


def _perform_indexed(run: RunFunction, task: _Task, k: int) -> tuple[int, list[tuple[bool, Any]]]:
    return k, _perform(run, task)


def _perform(run: RunFunction, task: _Task) -> list[tuple[bool, Any]]:
    """Run one task (in a worker, or here); failures come back as their traceback's text."""
    try:
        if task.seeds is None:
            config = task.configs[0]
            return [(True, outcome_of(run(dict(config)), f"run({config})"))]
        seed_key = task.seed_key
        base: dict[str, Any] = dict(task.configs[0])
        base[seed_key] = list(task.seeds)
        values = run(base)
        if not isinstance(values, (list, tuple)) or len(values) != len(task.seeds):
            raise TypeError(
                f"with stack_seeds=True, run(config) with config[{seed_key!r}] a list of "
                f"{len(task.seeds)} seeds must return a list of {len(task.seeds)} results, got "
                f"{type(values).__name__}"
            )
        return [
            (True, outcome_of(v, f"run({c}) (stacked)"))
            for v, c in zip(values, task.configs, strict=True)
        ]
    except Exception:  # noqa: BLE001 - a failed run is reported, the sweep goes on
        text = traceback.format_exc()
        return [(False, text)] * len(task.indices)
