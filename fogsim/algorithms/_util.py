"""What every algorithm shares: the agent axis, the weights of each step, metrics, progress.

Everything here is written against the public API only, so it runs unchanged in simulation
(agent-local values stacked along a leading axis), sharded simulation (the stacked rows of
this process's block, ``len(fs.rank())`` of the world's ``fs.size()``) and under MPI (one
row per rank). Metrics reduce with ``allreduce``, never by reading rows this process lacks.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

import fogsim as fs
from fogsim import clock as _clock
from fogsim import topology as T

if TYPE_CHECKING:
    from fogsim._types import Problem, TopologyLike

__all__ = [
    "Agents",
    "History",
    "Mixer",
    "check_form",
    "check_iters",
    "batch_of",
    "check_step",
    "grad_of",
    "initial_point",
    "optimum",
    "push_weights",
    "show",
    "steps",
]

#: Schedules reuse a few Topology objects; their column check is remembered (at most this many).
_CHECKED_LIMIT = 256


class Agents:
    """The agent axis of this process: ``lead`` is ``(rows,)`` in simulation, else ``()``.

    ``n`` is the world's number of agents (the weight matrices' size); ``rows`` the agents
    stacked here: all ``n`` in one process, the block ``fs.rank()`` when sharded, 1 under MPI.
    """

    def __init__(self) -> None:
        ranks = fs.rank()
        self.n: int = fs.size()
        self.stacked: bool = np.ndim(ranks) > 0
        self.rows: int = len(ranks) if self.stacked else 1
        self.first: int = int(ranks[0]) if self.stacked else int(ranks)
        self.lead: tuple[int, ...] = (self.rows,) if self.stacked else ()

    def array(self, value: Any, argname: str) -> np.ndarray:
        """Return the agent-local ``value`` as a float array, checking its agent axis."""
        try:
            arr = np.asarray(value)
        except Exception as exc:  # noqa: BLE001 - anything np.asarray refuses
            raise TypeError(f"{argname} must be an array, got {type(value).__name__}") from exc
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"{argname} must hold real numbers, got dtype {arr.dtype}")
        arr = arr.astype(np.float64, copy=False)  # the algorithms compute in float64
        if self.stacked and (arr.ndim == 0 or arr.shape[0] != self.rows):
            held = "" if self.rows == self.n else f" this process holds (of {self.n})"
            raise ValueError(
                f"{argname} must be stacked over the {self.rows} simulated agents{held} "
                f"(leading axis {self.rows}), got shape {arr.shape}; build it with fogsim.local"
            )
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{argname} holds values that are not finite")
        return arr

    def local_shape(self, x: np.ndarray) -> tuple[int, ...]:
        """Return the shape of one agent's value."""
        return tuple(np.shape(x)[len(self.lead) :])

    def flat(self, x: Any) -> np.ndarray:
        """Return ``x`` with every agent's value flattened: ``lead + (size,)``."""
        flat: np.ndarray = np.reshape(x, (*self.lead, -1))
        return flat

    def sqnorm(self, x: Any) -> np.ndarray:
        """Return ``||x_i||^2`` per agent (shape ``lead``)."""
        flat = self.flat(x)
        sqnorm: np.ndarray = np.einsum("...i,...i->...", flat, flat)
        return sqnorm

    def mean(self, x: np.ndarray) -> np.ndarray:
        """Return the network average of ``x`` (``lead + (k,)``) as one ``(k,)`` vector."""
        reduced = np.asarray(fs.allreduce(np.ascontiguousarray(x, dtype=np.float64)))
        first: np.ndarray = reduced.reshape(-1, reduced.shape[-1])[0]
        return first


def check_iters(iters: Any) -> int:
    """Return ``iters`` as an int >= 0."""
    if isinstance(iters, bool) or not isinstance(iters, numbers.Integral):
        raise TypeError(f"iters must be an int, got {type(iters).__name__}")
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")
    return int(iters)


def check_step(value: Any, argname: str) -> float:
    """Return a step size as a positive finite float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{argname} must be a real number, got {type(value).__name__}")
    # numbers.Real is no static numeric type (python/mypy#3186): check it as the float it acts as.
    step = cast(float, value)
    if not (np.isfinite(step) and step > 0):
        raise ValueError(f"{argname} must be a finite number > 0, got {value!r}")
    return float(value)


def check_form(form: Any, forms: tuple[str, ...]) -> str:
    """Return ``form`` if it is one of ``forms``."""
    if form not in forms:
        raise ValueError(f"form must be one of {', '.join(map(repr, forms))}, got {form!r}")
    checked: str = form
    return checked


def grad_of(problem: Problem) -> Callable[[Any], Any]:
    """Return the local gradient oracle of ``problem`` (an object with ``grad`` or a function)."""
    grad = getattr(problem, "grad", None)
    oracle: Callable[[Any], Any]
    if callable(grad):
        oracle = grad
    elif callable(problem):
        oracle = problem
    else:
        raise TypeError(
            "problem must have a grad(x) method (e.g. fogsim.algorithms.LeastSquares) or be the "
            f"local gradient function itself, got {type(problem).__name__}"
        )
    return oracle


def initial_point(problem: Problem, x0: Any, agents: Agents) -> np.ndarray:
    """Return ``x0``, or zeros of the problem's dimension when ``x0`` is None (one vector
    per problem of the batch when the problem has a ``batch_shape``)."""
    if x0 is not None:
        return agents.array(x0, "x0").copy()
    dim = getattr(problem, "dim", None)
    if dim is None:
        raise ValueError("x0 is required when the problem has no dim attribute")
    return np.zeros((*agents.lead, *batch_of(problem), int(dim)))


def batch_of(problem: Problem) -> tuple[int, ...]:
    """Return the problem's ``batch_shape`` (S problems solved at once), ``()`` if none."""
    batch = getattr(problem, "batch_shape", ())
    return tuple(int(s) for s in batch)


def optimum(problem: Problem, x_star: Any, agents: Agents) -> np.ndarray | None:
    """Return ``x_star``, else the problem's ``solution()`` if it has one, else None."""
    if x_star is not None:
        try:
            arr = np.asarray(x_star, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"x_star must be an array, got {type(x_star).__name__}") from exc
        if not np.all(np.isfinite(arr)):
            raise ValueError("x_star holds values that are not finite")
        return arr
    solution = getattr(problem, "solution", None)
    return np.asarray(solution(), dtype=np.float64) if callable(solution) else None


def push_weights(topology: TopologyLike) -> T.Topology:
    """Return column-stochastic weights on the pattern of ``topology``.

    Every agent keeps a share and sends one to each out-neighbor, all equal:
    ``w_ij = 1 / (1 + outdeg_j)`` for every edge ``j -> i`` and for ``i = j``.
    """
    # uniform() of the transpose: its rows are these columns, exact (they sum to 1.0 in any
    # order); a circulant pattern stays circulant (lazy, cheap)
    return T.as_topology(topology).transpose().uniform().transpose()


class Mixer:
    """The weight matrix of each step: the current topology, one matrix, or a schedule.

    ``push=True`` asks for column-stochastic (push) weights and checks them; ``combine``
    runs one ``neighbor_allreduce`` with the step's weights, exactly as a user would.
    """

    def __init__(
        self, schedule: Any, agents: Agents, push: bool = False, argname: str = "schedule"
    ) -> None:
        self._n = agents.n
        self._push = push
        self._argname = argname
        self._fixed: T.Topology | None = None
        self._iter: Iterator[Any] | None = None
        self._checked: dict[int, Any] = {}
        self._step = 0
        if schedule is None:
            if push:
                self._fixed = self._current_push_weights()
        elif hasattr(schedule, "__next__"):
            self._iter = schedule
        elif isinstance(schedule, (list, tuple)) and any(
            isinstance(item, (T.Topology, T.DynamicStep)) for item in schedule
        ):
            raise TypeError(
                f"{argname} must be a weight matrix or an iterator of them, got a "
                f"{type(schedule).__name__} of them: pass iter(...) or itertools.cycle(...)"
            )
        else:
            self._fixed = self._weights(schedule)

    def _current_push_weights(self) -> T.Topology | None:
        topo = fs.load_topology()
        if fs.is_topology_weighted():
            if not T.is_column_stochastic(topo, tol=1e-10):
                raise ValueError(
                    "the current topology is weighted but its weights are not column-"
                    "stochastic (push weights); set it with column-stochastic weights, or "
                    "unweighted to push 1/(out-degree + 1) shares, or pass a schedule"
                )
            return None
        if T.is_column_stochastic(topo.uniform(), tol=1e-10):
            return None  # the default weights are push weights already (regular graphs)
        return push_weights(topo)

    def _weights(self, obj: Any) -> T.Topology:
        item = getattr(obj, "weights", obj)  # a DynamicStep carries its matrix
        try:
            topo = T.as_topology(item, size=self._n, argname=self._argname)
        except TypeError as exc:
            raise TypeError(
                f"{self._argname} must give weight matrices (Topology, array, scipy.sparse, "
                f"networkx graph or DynamicStep): {exc}"
            ) from exc
        if self._push:
            key = id(topo)
            if self._checked.get(key) is not topo:
                if not T.is_column_stochastic(topo, tol=1e-10):
                    where = f" step {self._step}" if self._iter is not None else ""
                    raise ValueError(
                        f"{self._argname}{where}: the weights are not column-stochastic "
                        "(columns must sum to 1 for push-sum); convert a pattern with "
                        "fogsim.algorithms.push_weights(...)"
                    )
                if len(self._checked) >= _CHECKED_LIMIT:
                    self._checked.clear()
                self._checked[key] = topo  # holding it keeps its id from being reused
        return topo

    def next(self) -> T.Topology | None:
        """Return the next step's weights (None: the topology's own)."""
        self._step += 1
        if self._iter is None:
            return self._fixed
        try:
            item = next(self._iter)
        except StopIteration:
            raise ValueError(f"{self._argname} ran out after {self._step - 1} steps") from None
        return self._weights(item)

    @staticmethod
    def combine(x: Any, weights: T.Topology | None) -> Any:
        """Return ``W x`` for the step (one neighbor_allreduce)."""
        if weights is None:
            return fs.neighbor_allreduce(x)
        return fs.neighbor_allreduce(x, src_weights=weights)

    @staticmethod
    def combine_nonblocking(x: Any, weights: T.Topology | None) -> fs.Handle:
        """Start ``W x`` for the step; ``fs.wait`` the handle for the result."""
        if weights is None:
            return fs.neighbor_allreduce_nonblocking(x)
        return fs.neighbor_allreduce_nonblocking(x, src_weights=weights)


class History:
    """Per-iteration metrics, index 0 being the initial state; ``metrics`` computes them.

    ``bytes_sent()`` is read at construction, so ``"bytes"`` counts from there: what each
    agent has sent since the run began, whatever the user's own count says; so is the
    clock (:mod:`fogsim.clock`), if one runs, for ``"time"``.

    ``batch``: the shape of a batch of independent problems held in every agent's value
    after the agent axis (``x`` of shape ``lead + batch + (d,)``); each metric but
    ``"bytes"`` and ``"time"`` is then kept per problem, ``(iters + 1, *batch)``.
    """

    def __init__(self, agents: Agents, iters: int, batch: tuple[int, ...] = ()) -> None:
        self._agents = agents
        self._batch = batch
        self._length = iters + 1
        self._sent0 = _sent()
        self._time0 = np.asarray(_clock.now(), dtype=np.float64) if _clock.running() else None
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, k: int, values: dict[str, Any]) -> None:
        for key, value in values.items():
            if key not in self.arrays:
                self.arrays[key] = np.full((self._length, *np.shape(value)), np.nan)
            self.arrays[key][k] = value

    def metrics(
        self, x: np.ndarray, target: Any = None, grad: Callable[[Any], Any] | None = None
    ) -> dict[str, Any]:
        """Return the metrics of the state ``x``, the same on every agent and process.

        ``consensus_error = sqrt(mean_i ||x_i - xbar||^2)`` with ``xbar = mean_i x_i``;
        ``distance = sqrt(mean_i ||x_i - target||^2)``; ``grad_norm = ||mean_i grad_i(xbar)||``;
        ``bytes = mean_i`` (bytes agent i sent since construction, ``fs.bytes_sent()``).
        Two allreduces: the first brings xbar (and the distances), the second the spread
        around it, so no cancellation spoils tiny errors.
        """
        with _clock.paused():  # observing the run takes no simulated time
            if self._batch:
                return self._batched_metrics(x, target, grad)
            return self._metrics(x, target, grad)

    def _metrics(
        self, x: np.ndarray, target: Any = None, grad: Callable[[Any], Any] | None = None
    ) -> dict[str, float]:
        ag = self._agents
        flat = ag.flat(x)
        size = flat.shape[-1]
        sent = (_sent() - self._sent0).astype(np.float64).reshape(*ag.lead, 1)
        if self._time0 is not None:  # the agents' clocks ride with the bytes, averaged
            clock = (np.asarray(_clock.now(), dtype=np.float64) - self._time0).reshape(*ag.lead, 1)
            sent = np.concatenate([clock, sent], axis=-1)
        first_parts = [flat]
        if target is not None:
            first_parts.append(ag.sqnorm(x - target)[..., None])
        second_parts: list[np.ndarray] = []
        # The bytes ride in a reduction that has two columns or more anyway: numpy sums a
        # single column pairwise but several row by row, so adding a column to a
        # one-column reduction would move the other metric by a rounding.
        into_second = len(first_parts) == 1 and size == 1 and grad is not None
        (second_parts if into_second else first_parts).append(sent)
        first = np.asarray(fs.allreduce(np.concatenate(first_parts, axis=-1)))
        xbar = first[..., :size].reshape(np.shape(x))  # agent-local: stacked or this rank's
        parts = [ag.sqnorm(x - xbar)[..., None]]
        if grad is not None:
            parts.append(ag.flat(np.asarray(grad(xbar), dtype=np.float64)))
        grads = parts[-1].shape[-1] if grad is not None else 0
        second = ag.mean(np.concatenate(parts + second_parts, axis=-1))
        row = first.reshape(-1, first.shape[-1])[0]
        out = {"consensus_error": float(np.sqrt(max(second[0], 0.0)))}
        if target is not None:
            out["distance"] = float(np.sqrt(max(row[size], 0.0)))
        if grad is not None:
            out["grad_norm"] = float(np.linalg.norm(second[1 : 1 + grads]))
        out["bytes"] = float(second[-1] if into_second else row[-1])
        if sent.shape[-1] == 2:
            out["time"] = float(second[-2] if into_second else row[-2])
        return out

    def _batched_metrics(
        self, x: np.ndarray, target: Any = None, grad: Callable[[Any], Any] | None = None
    ) -> dict[str, Any]:
        """Return the metrics of each problem of the batch (arrays of shape ``batch``)."""
        ag = self._agents
        lead, batch = ag.lead, self._batch
        count = int(np.prod(batch))
        per = np.reshape(x, (*lead, count, -1))  # each problem's value, flattened
        size = per.shape[-1]

        def sqnorms(v: Any) -> np.ndarray:
            flat = np.reshape(v, (*lead, count, -1))
            out: np.ndarray = np.einsum("...i,...i->...", flat, flat)
            return out

        sent = (_sent() - self._sent0).astype(np.float64).reshape(*lead, 1)
        if self._time0 is not None:
            clock = (np.asarray(_clock.now(), dtype=np.float64) - self._time0).reshape(*lead, 1)
            sent = np.concatenate([clock, sent], axis=-1)
        first_parts = [per.reshape(*lead, count * size)]
        if target is not None:
            first_parts.append(sqnorms(x - target))
        first_parts.append(sent)
        first = np.asarray(fs.allreduce(np.concatenate(first_parts, axis=-1)))
        xbar = first[..., : count * size].reshape(np.shape(x))
        parts = [sqnorms(x - xbar)]
        if grad is not None:
            parts.append(np.reshape(np.asarray(grad(xbar), dtype=np.float64), (*lead, -1)))
        second = ag.mean(np.concatenate(parts, axis=-1))
        row = first.reshape(-1, first.shape[-1])[0]
        out: dict[str, Any] = {
            "consensus_error": np.sqrt(np.maximum(second[:count], 0.0)).reshape(batch)
        }
        if target is not None:
            spread = row[count * size : count * size + count]
            out["distance"] = np.sqrt(np.maximum(spread, 0.0)).reshape(batch)
        if grad is not None:
            grads = second[count:].reshape(count, -1)
            out["grad_norm"] = np.linalg.norm(grads, axis=-1).reshape(batch)
        out["bytes"] = float(row[-1])
        if sent.shape[-1] == 2:
            out["time"] = float(row[-2])
        return out


def _sent() -> np.ndarray:
    """Return the bytes each agent here has sent (``fs.bytes_sent()``) as int64."""
    return np.array(fs.bytes_sent(), dtype=np.int64)


def steps(iters: int, progress: bool, desc: str) -> Iterable[int]:
    """Return the iteration numbers 1..iters, under a tqdm bar when asked (main process)."""
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be a bool, got {type(progress).__name__}")
    if progress and fs.is_main_process():
        from tqdm import tqdm

        bar: Iterable[int] = tqdm(range(1, iters + 1), desc=desc, unit="it", dynamic_ncols=True)
        return bar
    return range(1, iters + 1)


def show(bar: Iterable[int], k: int, iters: int, values: dict[str, Any]) -> None:
    """Put the latest metrics on the progress bar now and then."""
    if hasattr(bar, "set_postfix") and (k % max(1, iters // 100) == 0 or k == iters):
        # a batch of problems shows its worst
        shown = {key: f"{float(np.max(v)):.2e}" for key, v in values.items()}
        bar.set_postfix(shown, refresh=False)
