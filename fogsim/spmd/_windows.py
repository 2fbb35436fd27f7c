"""Window ops of an SPMD agent, run by the simulator's windows at each rendezvous.

At ``win_create`` the agents' registered arrays (or tensors) are stacked into one array
that the simulator's window owns. Before each op that reads it the agents' arrays are
copied in (an agent may change its own in place between ops, as under MPI), and after an
op that changes it (``win_update``, a put or accumulate with ``self_weight``) the rows are
copied back into the agents' own arrays, in place, so a tensor registered with
``win_create`` holds what the MPI runtime would leave in it. Copies are bit for bit, of the
agents' own elements (see :func:`fogsim.backends._windows.window_view`): the simulator
computes half precision in float32 and rounds it once, as in every mode. Every op meets
all agents, so the agents run their window ops in lock step: the simulator's default
schedule, which equals an MPI run with a barrier after every window op. Mutexes hold
nothing (every op runs atomically); versions, ``p`` and window names are read without a
rendezvous.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from .._arrays import to_numpy
from ..backends._windows import (
    WindowFormat,
    WindowPart,
    check_flag,
    check_update_args,
    window_view,
)
from ..backends.sim import SimBackend
from ..backends.sim._windows import SimWindowOps
from ._collect import agree, label, per_agent_weights, rows, self_weights
from ._errors import disagreement
from ._world import World

__all__ = ["SpmdWindowOps"]

_T = TypeVar("_T")

#: A simulator window op that writes into neighbors' buffers: ``win_put`` or
#: ``win_accumulate`` (value, name, self_weight, dst_weights, require_mutex).
Send = Callable[[Any, str, Any, Any, bool], bool]


class Registered:
    """The agents' registered values of one window and the stacked copy the simulator owns.

    ``raws`` are views of the agents' own memory and ``stacked`` holds them stacked, in the
    same elements (:func:`window_view`); ``fmts`` say how windows hold each agent's dtype.
    """

    __slots__ = ("objs", "raws", "fmts", "stacked")

    def __init__(
        self, objs: list[Any], raws: list[np.ndarray], fmts: list[WindowFormat], stacked: np.ndarray
    ) -> None:
        self.objs, self.raws, self.fmts, self.stacked = objs, raws, fmts, stacked

    def value(self) -> Any:
        """Return the stacked value as the simulator's window takes it (over ``stacked``)."""
        return self.fmts[0].holder(self.stacked)

    def copy_in(self) -> None:
        """Take the agents' current values (they may have changed them in place)."""
        np.stack(self.raws, out=self.stacked)

    def copy_out(self, ranks: Sequence[int] | None = None) -> None:
        """Write the simulator's values back into the agents' own arrays, in place."""
        for i in range(len(self.raws)) if ranks is None else ranks:
            self.raws[i][...] = self.stacked[i]


def _views(op: str, xs: Sequence[Any]) -> tuple[list[np.ndarray], list[WindowFormat]]:
    """Return views of the agents' values and their formats (see :func:`window_view`)."""
    raws, fmts = [], []
    for rank, x in enumerate(xs):
        try:
            raw, fmt = window_view(x, op)
        except TypeError as exc:
            raise TypeError(f"{exc} (agent {rank})") from None
        raws.append(raw)
        fmts.append(fmt)
    return raws, fmts


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (
        a.ctypes.data == b.ctypes.data and a.shape == b.shape and a.strides == b.strides
    )


class SpmdWindowOps(WindowPart):
    """The window part of one SPMD agent: each op a rendezvous (see the module docstring).

    Built by :class:`~fogsim.spmd._backend.SpmdBackend` with the run's :class:`World` (where
    the agents meet; it holds the simulator and the registered arrays) and this agent's
    rank. The simulator is read from the world at each call, never kept: it is the one the
    agents' last ``fogsim.init()`` made.
    """

    def __init__(self, world: World, rank: int) -> None:
        self._world = world
        self._rank = rank

    def _meet(
        self, op: str, args: object, execute: Callable[[World, Sequence[Any]], Sequence[_T]]
    ) -> _T:
        mine: _T = self._world.meet(self._rank, op, args, execute)
        return mine

    @property
    def _sim_windows(self) -> SimWindowOps:
        return _windows(self._world)

    # -- create, free -----------------------------------------------------------------------
    def win_create(self, x: Any, name: str, zero_init: bool) -> bool:
        return self._meet(label("win_create", name), (x, name, zero_init), _win_create)

    def win_free(self, name: str | None) -> bool:
        return self._meet(label("win_free", name), name, _win_free)

    def win_names(self) -> list[str]:
        return self._sim_windows.win_names()

    # -- put, accumulate, get ---------------------------------------------------------------
    def win_put(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        check_flag(require_mutex, "require_mutex", "win_put")
        return self._meet(label("win_put", name), (x, name, self_weight, dst_weights), _win_put)

    def win_accumulate(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        check_flag(require_mutex, "require_mutex", "win_accumulate")
        return self._meet(
            label("win_accumulate", name), (x, name, self_weight, dst_weights), _win_accumulate
        )

    def win_get(self, name: str, src_weights: Any, require_mutex: bool) -> bool:
        check_flag(require_mutex, "require_mutex", "win_get")
        return self._meet(label("win_get", name), (name, src_weights), _win_get)

    # -- update -----------------------------------------------------------------------------
    def win_update(
        self,
        name: str,
        self_weight: Any,
        neighbor_weights: Any,
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any:
        check_update_args(self_weight, neighbor_weights, reset, clone, require_mutex)
        args = (name, self_weight, neighbor_weights, reset, clone)
        return self._meet(label("win_update", name), args, _win_update)

    def win_update_then_collect(self, name: str, require_mutex: bool) -> Any:
        check_flag(require_mutex, "require_mutex", "win_update_then_collect")
        return self._meet(label("win_update_then_collect", name), name, _win_collect)

    # -- mutexes, versions, p ---------------------------------------------------------------
    def win_mutex(self, name: str, for_self: bool, ranks: Any) -> Any:
        """Return a context manager that holds nothing: every op runs atomically for all."""
        return self._sim_windows.win_mutex(name, for_self, ranks)

    def get_win_version(self, name: str) -> dict[int, int]:
        versions: list[dict[int, int]] = self._sim_windows.get_win_version(name)
        return versions[self._rank]

    def win_associated_p(self, name: str) -> float:
        return float(self._sim_windows.win_associated_p(name)[self._rank])

    def set_win_ops_with_associated_p(self, enabled: bool) -> None:
        self._meet("set_win_ops_with_associated_p", enabled, _set_with_p)


# -- what runs once per rendezvous ------------------------------------------------------------
def _windows(world: World) -> SimWindowOps:
    """The window part of the simulator that runs the agents' ops."""
    sim: SimBackend = world.sim
    return sim.windows


def _registered(world: World, name: Any, op: str) -> Registered:
    reg: Registered | None = world.windows.get(name) if isinstance(name, str) else None
    if reg is None:
        _windows(world).window(name, op)  # raises the simulator's error: bad name, no window
        raise AssertionError(f"{op}: window {name!r} is the simulator's but no agent's")
    return reg


def _win_create(world: World, args: Sequence[Any]) -> list[bool]:
    op = "win_create"
    xs, names, zero_inits = zip(*args, strict=True)
    name = names[0]
    zero_init = agree(op, list(zero_inits), "zero_init")
    raws, fmts = _views(op, xs)
    message = disagreement(
        [(f.label, r.shape) for r, f in zip(raws, fmts, strict=True)],
        "passed",
        lambda k: f"{k[0]} {k[1]}",
    )
    if message is not None:
        raise ValueError(f"{op}: the agents' values must have one dtype and shape, but {message}")
    for rank, raw in enumerate(raws):
        if not raw.flags.c_contiguous or not raw.flags.writeable:
            raise ValueError(f"win_create: x must be C-contiguous and writeable (agent {rank})")
    reg = Registered(list(xs), raws, fmts, np.stack(raws))
    _windows(world).win_create(reg.value(), name, zero_init)
    world.windows[name] = reg
    return [True] * world.size


def _win_free(world: World, names: Sequence[Any]) -> list[bool]:
    name = names[0]
    _windows(world).win_free(name)
    if name is None:
        world.windows.clear()
    else:
        world.windows.pop(name, None)
    return [True] * world.size


def _fill(values: Sequence[Any], neighbors: Callable[[int], list[int]]) -> list[Any]:
    """Per-agent weights where an agent's None means every neighbor, weight 1."""
    if all(v is None for v in values) or all(v is not None for v in values):
        return list(values)
    return [neighbors(i) if v is None else v for i, v in enumerate(values)]


def _push(world: World, args: Sequence[Any], op: str, send: Send) -> list[bool]:
    xs, names, sws, dsts = zip(*args, strict=True)
    name = names[0]
    reg = _registered(world, name, op)
    raws, fmts = _views(op, xs)
    want, want_fmt = reg.raws[0], reg.fmts[0]
    for rank, (raw, fmt) in enumerate(zip(raws, fmts, strict=True)):
        if fmt.label != want_fmt.label or raw.shape != want.shape:
            raise ValueError(
                f"{op}: agent {rank}'s x is {fmt.label} {raw.shape} but window {name!r} holds "
                f"{want_fmt.label} {want.shape}"
            )
    sw = self_weights(op, sws, default=1.0)
    topo = world.sim.load_topology()
    dst = per_agent_weights(
        op, _fill(dsts, topo.out_neighbors), "dst_weights", world.size, allow_matrix=False
    )
    own = [_same_memory(a, r) for a, r in zip(raws, reg.raws, strict=True)]
    reg.copy_in()
    if all(own):  # the usual call: each agent passes its registered value
        send(reg.value(), name, sw, dst, False)
        if sw is not None:
            reg.copy_out()
        return [True] * world.size
    target = np.stack(raws)
    send(want_fmt.holder(target), name, sw, dst, False)
    if sw is not None:  # x was scaled in place
        for raw, row in zip(raws, target, strict=True):
            raw[...] = row
        mine = [i for i, o in enumerate(own) if o]
        if mine:  # a registered x that was scaled is what these agents expose now
            reg.stacked[mine] = target[mine]
            _windows(world).window(name).expose(np.asarray(mine))
    return [True] * world.size


def _win_put(world: World, args: Sequence[Any]) -> list[bool]:
    return _push(world, args, "win_put", _windows(world).win_put)


def _win_accumulate(world: World, args: Sequence[Any]) -> list[bool]:
    return _push(world, args, "win_accumulate", _windows(world).win_accumulate)


def _win_get(world: World, args: Sequence[Any]) -> list[bool]:
    names, srcs = zip(*args, strict=True)
    name = names[0]
    _registered(world, name, "win_get")
    topo = world.sim.load_topology()
    src = per_agent_weights(
        "win_get", _fill(srcs, topo.in_neighbors), "src_weights", world.size, allow_matrix=False
    )
    _windows(world).win_get(name, src, False)
    return [True] * world.size


def _default_weights(world: World, i: int) -> tuple[float, dict[int, float]]:
    """Agent i's weights of ``win_update`` without weights (the topology's, as used)."""
    topo = world.sim.load_topology()
    used = topo if world.sim.is_topology_weighted() else topo.uniform()
    indptr, indices, data = used.offdiag_csr()
    lo, hi = indptr[i], indptr[i + 1]
    return float(used.self_weights[i]), dict(
        zip(indices[lo:hi].tolist(), data[lo:hi].tolist(), strict=True)
    )


def _win_update(world: World, args: Sequence[Any]) -> list[Any]:
    op = "win_update"
    names, sws, nws, resets, clones = zip(*args, strict=True)
    name = names[0]
    reg = _registered(world, name, op)
    reset = agree(op, list(resets), "reset")
    clone = agree(op, list(clones), "clone")
    own_sws, own_nws = list(sws), list(nws)
    if any(s is None for s in own_sws) and not all(s is None for s in own_sws):
        for i, s in enumerate(own_sws):  # these agents use the topology's weights
            if s is None:
                own_sws[i], own_nws[i] = _default_weights(world, i)
    sw = self_weights(op, own_sws)
    nw = per_agent_weights(op, own_nws, "neighbor_weights", world.size, allow_matrix=False)
    reg.copy_in()
    out = _windows(world).win_update(name, sw, nw, reset, clone, False)
    if clone:
        return rows(to_numpy(out)[0], [fmt.kind for fmt in reg.fmts])
    reg.copy_out()
    return list(reg.objs)


def _win_collect(world: World, names: Sequence[Any]) -> list[Any]:
    name = names[0]
    reg = _registered(world, name, "win_update_then_collect")
    reg.copy_in()
    _windows(world).win_update_then_collect(name, True)
    reg.copy_out()
    return list(reg.objs)


def _set_with_p(world: World, values: Sequence[Any]) -> list[None]:
    enabled = agree("set_win_ops_with_associated_p", list(values), "enabled")
    _windows(world).set_win_ops_with_associated_p(enabled)
    return [None] * world.size
