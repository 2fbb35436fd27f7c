"""Compare two runs' records op by op; say where they first differ, in words.

Each op's input is compared where the op's result depends on it (a broadcast's on its
root's value only: the other agents' values are not compared), then its output. A differing
input is named first, since that is where the runs parted, even when the output happens to
agree (uniform weights average some differences away; other weights would not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._record import Record

__all__ = ["MODE_NAMES", "compare"]

#: How a report names each mode (``{n}``: the number of agents).
MODE_NAMES = {"sim": "simulated", "spmd": "as {n} SPMD agents", "mpi": "as {n} MPI processes"}
#: "Equal to round-off": relative and absolute tolerances by the values' precision. Batched and
#: per-agent kernels (a stacked bmm, one agent's mm) may round differently.
_TOLERANCES = {8: (1e-12, 1e-14), 4: (1e-5, 1e-7), 2: (1e-2, 1e-4)}


def _tolerances(dtype: np.dtype[Any]) -> tuple[float, float]:
    if dtype.kind not in "fc":
        return 0.0, 0.0  # integers and booleans: equal
    return _TOLERANCES.get(
        np.dtype(dtype).itemsize // (2 if dtype.kind == "c" else 1), _TOLERANCES[8]
    )


def _shape(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)} values of different shapes"
    return str(tuple(value.shape))


def _read(value: Any, reads: tuple[int, ...] | None) -> Any:
    """The rows of ``value`` (stacked agents) that the op reads."""
    if reads is None:
        return value
    if isinstance(value, list):
        return [value[r] for r in reads if r < len(value)]
    if value.ndim and all(r < value.shape[0] for r in reads):
        return value[list(reads)]
    return value


class _Pair:
    """The two runs being compared: their names in reports and the number of agents."""

    def __init__(self, modes: tuple[str, str], size: int) -> None:
        self.a, self.b = (MODE_NAMES[m].format(n=size) for m in modes)
        self.modes, self.size = modes, size


def _differ_values(
    where: str, what: str, a: Any, b: Any, pair: _Pair, agents: tuple[int, ...] | None
) -> str | None:
    """Say how ``a`` (first run) and ``b`` (second run) differ, or None when they agree."""
    if isinstance(a, list) or isinstance(b, list):
        if _shape(a) != _shape(b):
            return f"{where}: its {what} is {_shape(a)} {pair.a}, {_shape(b)} {pair.b}"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            agent = k if agents is None else agents[k]
            found = _differ_values(where, f"{what} of agent {agent}", x, y, pair, None)
            if found:
                return found
        return None
    if a.shape != b.shape:
        text = f"{where}: its {what} is {tuple(a.shape)} {pair.a} but {tuple(b.shape)} {pair.b}"
        n = pair.size
        stacked = a if pair.modes[0] == "sim" else b
        if "sim" in pair.modes and stacked.ndim and stacked.shape[0] != n:
            text += (
                f": the simulated run has {stacked.shape[0]} agents, not {n}; in simulation "
                f"the script's fs.init(size=...) wins over -np (check with -np "
                f"{stacked.shape[0]}, or leave size= out)"
            )
        elif "sim" in pair.modes and a.ndim and b.ndim and a.shape[0] == b.shape[0] == n:
            stacked, per_agent = (a, b) if pair.modes[0] == "sim" else (b, a)
            text += (
                f": each agent's value is {tuple(stacked.shape[1:])} simulated, "
                f"{tuple(per_agent.shape[1:])} per agent. Per-agent code that is not "
                "batch-friendly (e.g. A.T @ (A @ w - b) on stacked A and w) broadcasts "
                "over the agent axis in the simulator: write it with batched "
                "operations (np.einsum, A @ w[..., None]) or wrap it in "
                "fs.vmap"
            )
        return text
    if a.dtype != b.dtype:
        return f"{where}: {what} dtype {a.dtype} {pair.a}, {b.dtype} {pair.b}"
    rtol, atol = _tolerances(a.dtype)
    if a.size and not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
        gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
        row = int(np.argmax(gap.reshape(gap.shape[0], -1).max(axis=1))) if a.ndim else 0
        agent = row if agents is None else agents[row]
        name = what if " of agent " in what else f"{what} of agent {agent}"
        return f"{where}: {name} differs by up to {np.nanmax(gap):.3g} (shape {tuple(a.shape)})"
    return None


def _differ(i: int, first: Record, second: Record, pair: _Pair) -> str | None:
    """Describe how op ``i`` differs between the two runs, or None when it agrees."""
    op, site, x, out, reads = first
    op2, site2, x2, out2, _ = second
    where = f"op {i + 1} ({op}) at {site}"
    if op != op2:
        return f"op {i + 1} differs: {pair.a} it is {op} at {site}, {pair.b} {op2} at {site2}"
    if site != site2:  # the same op from another line (e.g. a hook): compare the values
        where = f"op {i + 1} ({op}) at {site} {pair.a}, {site2} {pair.b}"
    given = _differ_values(where, "input", _read(x, reads), _read(x2, reads), pair, reads)
    return given or _differ_values(where, "output", out, out2, pair, None)


def compare(
    first: list[Record], second: list[Record], modes: tuple[str, str], size: int
) -> tuple[int, str | None]:
    """Compare the runs in ``modes`` op by op: (ops compared, the first difference or None)."""
    pair = _Pair(modes, size)
    for i, (a, b) in enumerate(zip(first, second, strict=False)):
        found = _differ(i, a, b, pair)
        if found:
            return i + 1, found
    if len(first) != len(second):
        shorter, longer = (pair.a, pair.b) if len(first) < len(second) else (pair.b, pair.a)
        k = min(len(first), len(second))
        extra = (second if len(first) < len(second) else first)[k]
        return k, (
            f"the script made {len(first)} ops {pair.a} and {len(second)} {pair.b}: "
            f"{shorter} it stopped before op {k + 1} ({extra[0]} at {extra[1]}), which ran "
            f"{longer}"
        )
    return len(first), None
