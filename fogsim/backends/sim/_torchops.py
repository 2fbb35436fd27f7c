"""The simulator's ops on torch tensors, run by torch on the tensors' own device.

A stacked tensor on a device other than the CPU (CUDA, say) never goes to the host: the
ops below combine it with torch operations on its device, so stacked model replicas
train on a GPU. A plan's small arrays (offsets, weights, self weights, the CSR matrix)
move to the device once and are cached per plan (:class:`~._plan.PlanCache`). CPU tensors take
the numpy path unless :func:`use_device_path` sends them here too (the tests do).

The numbers are the numpy path's to about 1e-16 relative in float64, not bit for bit:
a circulant step adds ``self_weight * x`` then each source in ascending agent order as
the kernels do, but each add may be a fused multiply-add, and a CSR step adds the
off-diagonal part, a sparse matrix product, to ``self_weight * x`` at the end. Dtypes
follow the numpy path: averaging ops take floating-point values only; float16 and
bfloat16 are computed in float32 and rounded once on the way out; float32 is computed in
float32 (the numpy path sums it in float64). As on the numpy path, results are new
tensors without autograd history (inputs are detached).

Fault injection (:mod:`fogsim.faults`) works on host arrays: while faults are injected,
neighbor_allreduce copies the step's values to the host and the result back.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _arrays
from ... import timeline as _timeline
from ._plan import CircPlan, Plan, PlanCache, plan_matrix, plan_messages

if TYPE_CHECKING:
    import torch

    from ...topology import Topology
    from ._state import SimState

__all__ = [
    "allgather",
    "allgather_ragged",
    "allreduce",
    "broadcast",
    "combine",
    "global_view",
    "hierarchical_neighbor_allreduce",
    "local_allreduce",
    "neighbor_allgather",
    "neighbor_allreduce",
    "stacked",
    "takes",
    "use_device_path",
]

_forced = False


def use_device_path(on: bool) -> None:
    """Send CPU tensors down the device path too (True), or only other devices' (False).

    For tests: on a machine without a GPU the path a CUDA tensor takes runs on CPU tensors.
    """
    global _forced
    _forced = bool(on)


def takes(x: Any) -> bool:
    """Return whether ``x`` is a tensor this module combines on its own device."""
    if isinstance(x, np.ndarray):  # the numpy path's fast exit
        return False
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return False
    return _forced or x.device.type != "cpu"


# -- values in and out ----------------------------------------------------------------------
def _torch() -> Any:
    return sys.modules["torch"]


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _require_float(t: torch.Tensor, op: str) -> None:
    """Raise the numpy path's TypeError unless ``t`` holds floating-point numbers."""
    torch = _torch()
    if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return
    try:
        dtype = np.dtype(_dtype_name(t.dtype))  # the same message as numpy values get
    except TypeError:
        dtype = None
    if dtype is None:
        raise TypeError(
            f"{op} averages, so x must be float32 or float64 (or half precision: float16, "
            f"bfloat16), got {_dtype_name(t.dtype)}"
        )
    _arrays.require_float(np.empty(0, dtype), op)


def stacked(
    state: SimState, x: torch.Tensor, op: str, averaging: bool, adds: bool | None = None
) -> tuple[torch.Tensor, torch.dtype]:
    """Return ``x`` detached, checked for ``op`` as the numpy path checks it, and its dtype.

    An op that ``adds`` values (default: one that averages) gets half precision as
    float32; :func:`_out` rounds the result back to the returned dtype once.
    """
    torch = _torch()
    t = x.detach()
    if t.dim() == 0:  # a scalar is the same value on every agent
        t = t.reshape(1).expand(state.rows)
    elif t.shape[0] != state.rows:
        raise ValueError(
            f"{op}: x has {t.shape[0]} entries on its leading (agent) axis {state.held}"
        )
    if averaging:
        _require_float(t, op)
    elif t.dtype.is_complex or t.is_quantized:
        raise TypeError(f"{op}: x must hold numbers, got dtype {_dtype_name(t.dtype)}")
    elif adds and t.dtype == torch.bool:
        _arrays.require_numbers(np.dtype(bool), op, sums=True)
    state.shapes.check(x, tuple(t.shape), op)
    if (averaging if adds is None else adds) and t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t, x.dtype


def _out(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round a result computed in float32 back to the half-precision dtype it came in."""
    return t if t.dtype == dtype else t.to(dtype)


def _charge(state: SimState, op: str, t: torch.Tensor, **info: Any) -> None:
    """Charge ``op`` on ``t``'s bytes to the world's cost model, as the numpy path does."""
    if state.cost is None:
        return
    # The numpy path holds bfloat16 values as float32 (numpy has no bfloat16): same bytes.
    itemsize = 4 if t.dtype == _torch().bfloat16 else t.element_size()
    sized = np.broadcast_to(np.zeros((), np.uint8), (t.numel() * itemsize,))  # no memory
    state.charge(op, sized, **info)


# -- neighbor averaging ---------------------------------------------------------------------
def _circulant_arrays(plan: CircPlan, like: torch.Tensor) -> tuple[Any, Any]:
    """Return the self weight and the offset weights, as numbers or tensors on the device."""
    torch = _torch()
    f = plan.form
    sw: Any = float(f.self_weight.reshape(-1)[0]) if f.self_weight.size == 1 else None
    if sw is None:
        sw = torch.tensor(f.self_weight, dtype=like.dtype, device=like.device)[:, None]
    w: Any
    if f.weights.ndim == 2:
        w = torch.tensor(f.weights, dtype=like.dtype, device=like.device)[:, :, None]
    else:
        w = f.weights.tolist()
    return sw, w


def _csr_arrays(plan: Any, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Return the self weights (a column) and the off-diagonal part as a sparse CSR matrix."""
    torch = _torch()
    n, dev, dtype = like.shape[0], like.device, like.dtype
    sw = torch.tensor(plan.self_weight, dtype=dtype, device=dev)[:, None]
    if not plan.indices.size:
        return sw, None
    with warnings.catch_warnings():  # "sparse CSR support is in beta": the user cannot act
        warnings.simplefilter("ignore", UserWarning)
        matrix = torch.sparse_csr_tensor(
            torch.tensor(plan.indptr, dtype=torch.int64, device=dev),
            torch.tensor(plan.indices, dtype=torch.int64, device=dev),
            torch.tensor(plan.data, dtype=dtype, device=dev),
            size=(n, n),
            check_invariants=False,  # a plan's CSR is valid by construction
        )
    return sw, matrix


def combine(cache: PlanCache, plan: Plan, x: torch.Tensor) -> torch.Tensor:
    """Return ``W x`` for the step's ``plan`` and stacked ``x`` of shape (n, m), on x's device."""
    if not isinstance(plan, CircPlan):
        sw, matrix = cache.get(plan, x.device, x.dtype, lambda: _csr_arrays(plan, x))
        product: torch.Tensor = x * sw
        # One sparse product: faster than adding degree slot by degree slot (a gather, a
        # product and an add each), and within 1e-16 of the kernels' sums in float64.
        return product if matrix is None else _torch().addmm(product, matrix, x)
    sw, w = cache.get(plan, x.device, x.dtype, lambda: _circulant_arrays(plan, x))
    acc: torch.Tensor = x * sw
    n, offs = x.shape[0], plan.form.offsets.tolist()
    nk = len(offs)
    # As the kernels: rows [n - offs[p], n - offs[p-1]) wrap around for the offsets k >= p,
    # whose sources have smaller indices, so each segment adds k = p..K-1, then k = 0..p-1.
    bounds = [n, *(n - o for o in offs), 0]
    for p in range(nk, -1, -1):
        lo, hi = bounds[p + 1], bounds[p]
        if lo == hi:
            continue
        part = acc[lo:hi]
        for k in (*range(p, nk), *range(p)):
            shift = offs[k] - n if k >= p else offs[k]
            src = x[lo + shift : hi + shift]
            if isinstance(w, list):
                part.add_(src, alpha=w[k])
            else:
                part.addcmul_(w[k, lo:hi], src)
    return acc


def neighbor_allreduce(
    state: SimState, t: torch.Tensor, dtype: torch.dtype, plan: Plan
) -> torch.Tensor:
    """Return ``W t`` for :func:`stacked`'s ``t``, rounded to ``dtype``."""
    torch = _torch()
    flat = t.reshape(state.rows, -1)
    if state.faults is not None:  # fogsim.faults works on host arrays
        host = flat.cpu().numpy()
        mixed = state.faults.apply(plan_matrix(plan, state.n), host)
        out = torch.as_tensor(np.asarray(mixed, dtype=host.dtype)).to(flat.device)
    elif flat.shape[1]:
        with _timeline.phase("COMPUTE_AVERAGE"):
            out = combine(state.device_plans, plan, flat)
    else:
        out = flat.clone()
    if state.cost is not None:
        _charge(state, "neighbor_allreduce", t, topology=plan_messages(plan, state.n))
    return _out(out.reshape(t.shape), dtype)


def hierarchical_neighbor_allreduce(
    state: SimState, t: torch.Tensor, dtype: torch.dtype, plan: Plan
) -> torch.Tensor:
    """Return each machine's agents the step ``plan`` applied to the machine averages."""
    k = state.local
    machines = state.rows // k
    grid = t.reshape(machines, k, -1)
    mean = grid[:, 0].clone()  # summed in local-rank order, as the numpy path does
    for j in range(1, k):
        mean += grid[:, j]
    mean /= k
    mixed = combine(state.device_plans, plan, mean) if mean.shape[1] else mean
    out = mixed[:, None, :].expand(machines, k, mean.shape[1]).reshape(t.shape)
    if state.cost is not None:
        messages = plan_messages(plan, state.n // k)
        _charge(state, "hierarchical_neighbor_allreduce", t, machine_topology=messages)
    return _out(out, dtype)


# -- collectives ------------------------------------------------------------------------------
def _sum(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over ``dim`` in ``t``'s own dtype (bool: any), as numpy's ``sum(dtype=...)``."""
    if t.dtype == _torch().bool:
        return t.any(dim)
    return t.sum(dim, dtype=t.dtype)


def allreduce(state: SimState, x: torch.Tensor, average: bool) -> torch.Tensor:
    """Return every agent the sum (or average) over the agents."""
    t, dtype = stacked(state, x, "allreduce", averaging=average, adds=True)
    total = _sum(t, 0)
    if average:
        total = total / state.n
    _charge(state, "allreduce", t)
    return _out(total.expand(t.shape).contiguous(), dtype)


def local_allreduce(state: SimState, x: torch.Tensor, average: bool) -> torch.Tensor:
    """Return every agent the sum (or average) over its machine's agents; charged to the
    cost meter as ``local_allreduce`` among the world's ``local`` agents per machine."""
    t, dtype = stacked(state, x, "allreduce", averaging=average, adds=True)
    k = state.local
    grid = t.reshape(state.rows // k, k, *t.shape[1:])
    total = _sum(grid, 1)
    if average:
        total = total / k
    _charge(state, "local_allreduce", t, local_size=k)
    return _out(total[:, None].expand(grid.shape).reshape(t.shape), dtype)


def broadcast(state: SimState, x: torch.Tensor, root: int) -> torch.Tensor:
    """Return every agent the root agent's value."""
    t, dtype = stacked(state, x, "broadcast", averaging=False)
    _charge(state, "broadcast", t)
    return _out(t[root].expand(t.shape).contiguous(), dtype)


def allgather(state: SimState, x: torch.Tensor) -> torch.Tensor:
    """Return every agent all agents' values concatenated along the first dimension."""
    t, dtype = stacked(state, x, "allgather", averaging=False)
    rows = state.rows
    per_agent = t.reshape(rows, -1, *t.shape[2:]) if t.dim() > 1 else t[:, None]
    flat = per_agent.reshape(1, -1, *per_agent.shape[2:])
    _charge(state, "allgather", t)
    return _out(flat.expand(rows, *flat.shape[1:]).contiguous(), dtype)


def allgather_ragged(values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Return each agent the agents' values of different lengths, concatenated."""
    torch = _torch()
    parts = [v.detach().reshape(1) if v.dim() == 0 else v.detach() for v in values]
    trailing = {tuple(p.shape[1:]) for p in parts}
    if len(trailing) > 1:
        raise ValueError(
            f"allgather: agents' values differ beyond the first dimension: {sorted(trailing)}"
        )
    whole = torch.cat(parts)
    # As the numpy path: the values' common type, bfloat16 ones rounded back to bfloat16.
    return [
        whole.to(torch.bfloat16) if v.dtype == torch.bfloat16 else whole.clone() for v in values
    ]


def global_view(state: SimState, x: torch.Tensor) -> torch.Tensor:
    """Return every agent's value, stacked (a copy)."""
    t, dtype = stacked(state, x, "global_view", averaging=False)
    return _out(t.clone(), dtype)


def neighbor_allgather(
    state: SimState,
    t: torch.Tensor,
    indptr: np.ndarray,
    indices: np.ndarray,
    messages: Topology | None,
) -> Any:
    """Return each agent its in-neighbors' values (CSR ``indptr``/``indices``), concatenated.

    Agents with as many in-neighbors each get one stacked tensor, else a list per agent.
    ``messages`` (a topology whose off-diagonal entries are the call's messages, or None:
    no meter) is charged to the cost meter, one agent's value per message.
    """
    torch = _torch()
    per_agent = t[:, None] if t.dim() == 1 else t
    index = state.device_plans.get(
        indices,
        t.device,
        torch.int64,
        lambda: torch.tensor(indices, dtype=torch.int64, device=t.device),
    )
    gathered = per_agent.index_select(0, index)  # (nnz, k, ...)
    if messages is not None:
        _charge(state, "neighbor_allgather", t, topology=messages)
    degrees = np.diff(indptr)
    if degrees.size and np.all(degrees == degrees[0]):
        return gathered.reshape(state.rows, -1, *per_agent.shape[2:])
    chunks = torch.split(gathered, degrees.tolist())
    return [c.reshape(-1, *per_agent.shape[2:]) for c in chunks]
