"""Drawn cases of neighbor averaging, run the same way in the simulator and under MPI.

A case is plain JSON data (drawn by hypothesis in ``test_properties_mpi.py``): a world size
``n``, an adjacency ``A[i][j]`` (j sends to i), a dtype, a per-agent shape, a seed, and what
kind of call to make. :func:`run` makes the call on the world that is current: in simulation
with stacked per-agent arguments, distributed with this rank's row of them. Both sides derive
everything from the case, so the simulator's result is the reference for the MPI one.
"""

from __future__ import annotations

import numpy as np

import fogsim as fs
from fogsim import topology as T

KINDS = ("static_weighted", "static_uniform", "step_matrix", "dynamic", "schedule", "fused")
BAD = (
    "nan_weight",
    "inf_self",
    "unknown_rank",
    "negative_rank",
    "unlisted_sender",
    "int_dtype",
    "src_without_self",
    "shape_differs",
)
#: What the message of each bad call must name (the argument, or what differs).
BAD_NAMES = {
    "nan_weight": ("finite",),
    "inf_self": ("self_weight",),
    "unknown_rank": ("src_weights",),
    "negative_rank": ("dst_weights",),
    "unlisted_sender": ("agent",),
    "int_dtype": ("float",),
    "src_without_self": ("self_weight",),
    "shape_differs": ("(5,)", "(3,)"),  # both shapes
}
SCHEDULES = ("one_peer_exponential_two", "random_matching", "inner_outer_exponential_two")
_DTYPES = {"float64": np.float64, "float32": np.float32}


def _data(case: dict, shape=None, dtype=None, seed=None) -> np.ndarray:
    n = case["n"]
    shape = tuple(case["shape"] if shape is None else shape)
    dtype = _DTYPES[case["dtype"]] if dtype is None else dtype
    rng = np.random.default_rng(case["seed"] if seed is None else seed)
    return rng.standard_normal((n, *shape)).astype(dtype)


def _adjacency(case: dict) -> np.ndarray:
    A = np.array(case["adjacency"], dtype=bool).reshape(case["n"], case["n"])
    np.fill_diagonal(A, False)
    return A


def _dynamic_weights(case: dict) -> tuple[np.ndarray, list[dict], list[dict]]:
    n, A = case["n"], _adjacency(case)
    rng = np.random.default_rng(case["seed"] + 1)
    R = rng.uniform(-1, 1, (n, n)) * A  # negative weights are allowed: they are finite
    S = rng.uniform(0.1, 2, (n, n)) * A
    sw = rng.uniform(0, 1, n)
    src = [{int(j): float(R[i, j]) for j in np.flatnonzero(A[i])} for i in range(n)]
    dst = [{int(i): float(S[i, j]) for i in np.flatnonzero(A[:, j])} for j in range(n)]
    return sw, src, dst


def _mine(stacked, simulated: bool):
    """The argument for this world: all agents' (simulation) or this rank's."""
    if stacked is None or simulated:
        return stacked
    return stacked[fs.rank()]


def run(case: dict) -> list[np.ndarray]:
    """Make the case's calls on the current world; return the results (stacked or own row)."""
    simulated = np.ndim(fs.rank()) == 1
    n, kind = case["n"], case["kind"]
    data = _data(case)
    x = _mine(data, simulated)
    A = _adjacency(case)
    if kind in ("static_weighted", "static_uniform", "step_matrix"):
        W = np.random.default_rng(case["seed"] + 2).uniform(0.05, 1, (n, n))
        W *= A | np.eye(n, dtype=bool)
        if kind == "step_matrix":
            return [fs.neighbor_allreduce(x, src_weights=W)]
        fs.set_topology(W, is_weighted=kind == "static_weighted")
        return [fs.neighbor_allreduce(x), fs.neighbor_allreduce(x, name="named")]
    if kind == "dynamic":
        sw, src, dst = _dynamic_weights(case)
        return [
            fs.neighbor_allreduce(
                x,
                self_weight=_mine(sw, simulated),
                src_weights=_mine(src, simulated),
                dst_weights=_mine(dst, simulated),
            )
        ]
    if kind == "schedule":
        build = getattr(T, case["schedule"])
        kwargs = {"seed": case["seed"]} if case["schedule"] == "random_matching" else {}
        if case["schedule"] == "inner_outer_exponential_two":
            kwargs = {"local_size": case["local_size"]}
        outs, schedule = [], build(n, **kwargs)
        for _ in range(case["steps"]):
            step = next(schedule)
            if case["by_ranks"]:  # the per-agent form: send and receive lists
                recv = [step.recv_ranks(i) for i in range(n)]
                src = [
                    {int(j): float(step.weights.to_dense()[i, j]) for j in recv[i]}
                    for i in range(n)
                ]
                sw = np.array([step.weights.to_dense()[i, i] for i in range(n)])
                dst = [list(step.send_ranks(i)) for i in range(n)]
                x = fs.neighbor_allreduce(
                    x,
                    self_weight=_mine(sw, simulated),
                    src_weights=_mine(src, simulated),
                    dst_weights=_mine(dst, simulated),
                )
            else:
                x = fs.neighbor_allreduce(x, src_weights=step.weights)
            outs.append(x)
        return outs
    if kind == "fused":
        fs.set_topology(T.exponential_two_graph(n) if case["exp2"] else A.astype(float))
        values = [
            _data(case, shape, _DTYPES[dtype], case["seed"] + k)
            for k, (dtype, shape) in enumerate(case["tensors"])
        ]
        handles = [fs.neighbor_allreduce_nonblocking(_mine(v, simulated)) for v in values]
        return [fs.wait(h) for h in handles]
    raise ValueError(f"unknown case kind {kind!r}")


def outcome(case: dict, **world) -> tuple[list[np.ndarray] | None, Exception | None]:
    """Run the case on a fresh ``fs.Context(**world)``: (its results, None) for a valid case,
    (None, None) for a bad one that did not raise, (None, the ValueError/TypeError) else."""
    context = fs.Context(**world)
    try:
        with context:
            if case.get("bad"):
                run_bad(case)
                return None, None
            return [np.asarray(r) for r in run(case)], None
    except (ValueError, TypeError) as exc:
        return None, exc
    finally:
        context.close()


def run_bad(case: dict) -> None:
    """Make the case's bad call (``case["bad"]`` on agent ``case["agent"]``); it must raise."""
    simulated = np.ndim(fs.rank()) == 1
    n, bad, i = case["n"], case["bad"], case["agent"]
    A = _adjacency(case)
    src = [{int(j): 0.5 for j in np.flatnonzero(A[r])} for r in range(n)]
    dst = [{int(r): 1.0 for r in np.flatnonzero(A[:, j])} for j in range(n)]
    sw = np.full(n, 0.5)
    data = _data(case)
    if bad == "nan_weight":
        if n > 1:
            src[i] = {**src[i], (i + 1) % n: float("nan")}
            dst[(i + 1) % n] = {**dst[(i + 1) % n], i: 1.0}
        else:
            sw[0] = float("nan")
    elif bad == "inf_self":
        sw[i] = float("inf")
    elif bad == "unknown_rank":
        src[i] = {**src[i], n + 3: 0.5}
    elif bad == "negative_rank":
        dst[i] = {**dst[i], -1: 1.0}
    elif bad == "unlisted_sender":
        j = (i + 1) % n
        src[i] = {k: w for k, w in src[i].items() if k != j}
        dst[j] = {**dst[j], i: 1.0}  # j sends to i, which does not expect it
    elif bad == "int_dtype":
        data = np.arange(n * 2).reshape(n, 2)
    elif bad == "src_without_self":
        sw, dst = None, None
    elif bad == "shape_differs":  # agent i's value is longer than the others'
        rows = [np.ones(5 if r == i else 3) for r in range(n)]
        x = rows if simulated else rows[fs.rank()]
        fs.neighbor_allreduce(x)
        return
    fs.neighbor_allreduce(
        _mine(data, simulated),
        self_weight=_mine(sw, simulated),
        src_weights=_mine(src, simulated),
        dst_weights=_mine(dst, simulated),
    )
