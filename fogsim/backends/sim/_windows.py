"""One-sided window ops of the simulator, vectorized over agents, with modelled asynchrony.

Each window is a :class:`~fogsim.backends.sim._window.SimWindow` (its buffers, versions and
``p`` for every agent at once). Arithmetic follows the MPI runtime's exactly, so a lock-step
run is bit-identical to it: a put, accumulate or get scales by the weight cast to the data
dtype (one rounded product); ``win_update`` sums ``sw_i x_i + sum_j w_ij b[i<-j]`` in
float64 (float64 weights, widened values, ascending sender order, as
``fogsim._core.combine_rows``) and rounds once to the data dtype, looping over degree
slots, never over agents. Half precision is held and computed in float32 and rounded once
into ``x`` (see :class:`fogsim.backends._windows.WindowFormat`).

Asynchrony (:class:`fogsim._asynchrony.Asynchrony`, see :func:`fogsim.set_asynchrony`):
one clock for all windows; a round ends at every ``win_update``, its active agents are drawn
at its first window op, and only they act. A message (one per edge of a put, accumulate
or get) due ``d > 0`` rounds later waits in the window's queue, batched per send op and
delay, and is delivered at the start of its round in send order. ``barrier()`` lets every
agent catch up: it delivers everything in flight (in send order) and makes every agent
active for the rest of the round. The default schedule is lock-step: every agent acts,
every message lands at once.

With a clock (:mod:`fogsim.clock`, attached by the backend as ``clock``) messages take
time instead of rounds: each leaves its origin at the origin's clock and waits in the
window's flight list until its receiver's clock reaches its landing time; reads (update,
get, versions, inspection) land what has arrived by then. ``activation="clock"`` picks each
round's agents by their clocks (the earliest act). With no clock, none of this runs.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..._arrays import is_tensor
from ..._asynchrony import Asynchrony
from ...topology import Topology, as_topology
from .._base import check_rank
from .._weights import is_matrix
from .._windows import WindowPart, check_flag, check_update_args, window_view
from ._plan import rank_rows, self_weights, slot_add
from ._window import ACCUMULATE, GET, PUT, SimWindow


@runtime_checkable
class MessageClock(Protocol):
    """What times the window ops' messages (a :class:`fogsim.clock.Clock`): the agents'
    clocks, who is still busy computing, a message's landing, a barrier."""

    busy: np.ndarray | None

    @property
    def time(self) -> np.ndarray: ...

    def send(
        self,
        op: str,
        senders: np.ndarray,
        receivers: np.ndarray,
        origin: np.ndarray,
        nbytes: float,
    ) -> np.ndarray | None: ...

    def barrier(self, landed: float = ...) -> None: ...


__all__ = ["MessageClock", "SimWindowOps"]


class SimWindowOps(WindowPart):
    """The simulator's window part: the window ops of ``n`` agents (see the module docstring).

    :class:`SimBackend` builds it with the world's size and tells it each topology it
    installs (:meth:`on_topology`): a window takes its edges and default weights from the
    topology current at ``win_create``.
    """

    def __init__(self, n: int) -> None:
        self._n = n
        self._topology: Topology | None = None
        self._is_weighted = False
        self._windows: dict[str, SimWindow] = {}
        self._with_p = False
        self._asynchrony = Asynchrony(self._n)
        self._round = 0
        self._active: np.ndarray | None = None  # ascending active ranks; None: all
        self._active_mask: np.ndarray | None = None
        self._drawn = False  # whether this round's active set is drawn yet
        self._by_clock = False  # the "clock" activation
        #: the world's clock (fogsim.clock), set by the backend: messages then take time
        self.clock: MessageClock | None = None

    def on_topology(self, topology: Topology, is_weighted: bool) -> None:
        """Create the next windows on ``topology`` (its weights when ``is_weighted``)."""
        self._topology, self._is_weighted = topology, is_weighted

    def attach_clock(self, clock: MessageClock | None) -> None:
        """Time the messages on ``clock`` from now on (None: rounds again); what is in
        flight on the clock this replaces lands at once."""
        if clock is not self.clock:
            for win in self._windows.values():
                win.deliver_landed(None)
        self.clock = clock

    @property
    def asynchrony(self) -> Asynchrony:
        """The model of asynchrony in use (see :meth:`set_asynchrony`)."""
        return self._asynchrony

    # -- lookup, arguments --------------------------------------------------------------------
    def window(self, name: Any, op: str = "window") -> SimWindow:
        """Return the window ``name``'s state; raise naming ``op`` when there is none.

        Its properties are read-only views, for tests and debugging. With a clock, the
        messages that have landed by their receivers' clocks are in its buffers.
        """
        win = self._win(name, op)
        if self.clock is not None:
            win.deliver_landed(self.clock.time)
        return win

    def _win(self, name: Any, op: str) -> SimWindow:
        if not isinstance(name, str):
            raise TypeError(f"{op}: name must be a str, got {type(name).__name__}")
        win = self._windows.get(name)
        if win is None:
            raise ValueError(
                f"{op}: no window {name!r} (windows: {list(self._windows)}); "
                "create it with win_create first"
            )
        return win

    def _operand(self, win: SimWindow, x: Any, op: str) -> np.ndarray:
        """Return a view of ``x``'s memory (see :func:`window_view`), checked against ``win``."""
        raw, fmt = window_view(x, op)
        if fmt.label != win.fmt.label or raw.shape != win.shape:
            raise ValueError(
                f"{op}: x is {fmt.label} {raw.shape} but window {win.name!r} holds "
                f"{win.fmt.label} {win.shape}"
            )
        return raw

    def _edges(
        self, win: SimWindow, obj: Any, argname: str, op: str, by_sender: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Return the buffers (ascending edge ids) a weight argument names, and its weights.

        ``obj``: None (every edge, weight 1), n per-agent dicts or rank lists (rows of the
        sender when ``by_sender``, else of the receiver) or one matrix ``M[i, j]`` for the
        edge ``j -> i`` (its diagonal is ignored).
        """
        n = self._n
        if obj is None:
            return win.all_edges, np.ones(win.all_edges.size)
        if is_matrix(obj):
            indptr, indices, data = as_topology(obj, size=n, argname=argname).offdiag_csr()
            recv = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            send = indices.astype(np.int64)
        else:
            indptr, indices, data = rank_rows(obj, n, argname)
            owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
            other = indices.astype(np.int64)
            recv, send = (other, owner) if by_sender else (owner, other)
        keys = recv * n + send
        pos = np.minimum(np.searchsorted(win.keys, keys), max(win.keys.size - 1, 0))
        bad = np.flatnonzero(win.keys[pos] != keys) if win.keys.size else np.arange(keys.size)
        if bad.size:
            i, j = int(recv[bad[0]]), int(send[bad[0]])
            where = f"{argname}[{i}, {j}]" if is_matrix(obj) else None
            if by_sender:
                outs = win.recv[win.send == j].tolist()
                raise ValueError(
                    f"{op}: {where or f'{argname}[{j}]'} names rank {i}, which is not an "
                    f"out-neighbor of agent {j} in window {win.name!r} (out-neighbors {outs})"
                )
            ins = win.send[win.recv == i].tolist()
            raise ValueError(
                f"{op}: {where or f'{argname}[{i}]'} names rank {j}, which is not an "
                f"in-neighbor of agent {i} in window {win.name!r} (in-neighbors {ins})"
            )
        order = np.argsort(pos, kind="stable")
        return pos[order], data[order]

    # -- rounds -------------------------------------------------------------------------------
    def _active_ranks(self) -> np.ndarray | None:
        """Return this round's active ranks (None: all), drawing them at its first op."""
        if not self._drawn:
            if self._by_clock:
                self._active = self._earliest()
            else:
                self._active = self._asynchrony.draw_active()
            if self._active is None:
                self._active_mask = None
            else:
                self._active_mask = np.zeros(self._n, dtype=bool)
                self._active_mask[self._active] = True
            self._drawn = True
        return self._active

    def _earliest(self) -> np.ndarray | None:
        """The ``"clock"`` activation: the agents whose clocks are the earliest act (they
        finish their computation first); the others stay busy in theirs (not charged again
        by ``fogsim.clock.compute`` until they act). None: every agent."""
        clock = self.clock
        if clock is None:
            raise ValueError(
                "set_asynchrony('clock') activates agents by their clocks, but no clock runs: "
                "call fogsim.clock.start(platform) first"
            )
        t = clock.time
        mask = t <= t.min()
        if mask.all():
            clock.busy = None
            return None
        clock.busy = ~mask
        return np.flatnonzero(mask)

    def _mask(self) -> np.ndarray:
        """This round's active agents as a mask (only while not every agent acts)."""
        assert self._active_mask is not None
        return self._active_mask

    def _end_round(self) -> None:
        self._round += 1
        self._drawn = False
        for win in self._windows.values():
            win.deliver_due(self._round)

    def _send(
        self,
        win: SimWindow,
        kind: str,
        edges: np.ndarray,
        vals: np.ndarray,
        pvals: np.ndarray | None,
        op: str,
    ) -> None:
        """Send one message per edge: land it now, later (delayed) or never (lost)."""
        if self.clock is not None:
            self._send_timed(self.clock, win, kind, edges, vals, pvals, op)
            return
        delays = self._asynchrony.draw_delays(edges.size)
        lost = self._asynchrony.draw_lost(edges.size)
        if delays is None and lost is None:
            win.apply(kind, edges, vals, pvals)
            return
        keep = np.ones(edges.size, bool) if lost is None else ~lost
        now = keep if delays is None else keep & (delays == 0)
        win.apply(kind, edges[now], vals[now], None if pvals is None else pvals[now])
        if delays is None:
            return
        for d in np.unique(delays[keep & (delays > 0)]).tolist():
            sel = keep & (delays == d)
            win.enqueue(
                self._round + d, kind, edges[sel], vals[sel], None if pvals is None else pvals[sel]
            )

    def _send_timed(
        self,
        clock: MessageClock,
        win: SimWindow,
        kind: str,
        edges: np.ndarray,
        vals: np.ndarray,
        pvals: np.ndarray | None,
        op: str,
    ) -> None:
        """Send one message per edge in virtual time: it leaves at its origin's clock (the
        sender's; a get's reader) and lands after its time on the network, or is lost."""
        if self._asynchrony.max_delay:
            raise ValueError(
                f"{op}: set_asynchrony(max_delay=...) delays messages by rounds, but a clock "
                "runs (fogsim.clock), whose network delays them in time: set max_delay=0"
            )
        send, recv = win.send[edges], win.recv[edges]
        origin = recv if kind == GET else send
        landing = clock.send(op, send, recv, origin, win.raw.nbytes / self._n)
        lost = self._asynchrony.draw_lost(edges.size)
        if lost is not None:  # sent (the origin spent the time), lost on the way
            keep = ~lost
            edges, vals = edges[keep], vals[keep]
            pvals = None if pvals is None else pvals[keep]
            landing = None if landing is None else landing[keep]
        if landing is None:  # a paused clock: they land at once
            win.apply(kind, edges, vals, pvals)
        else:
            win.launch(landing, kind, edges, vals, pvals)

    def barrier(self) -> None:
        """Land every message in flight (in send order); all agents act until the round ends.

        Every agent catches up at a barrier, so ``barrier(); win_update_then_collect()``
        collects everything, whatever the activation rule. With a clock, every agent
        leaves it at the last arrival or landing plus the barrier's time.
        """
        clock = self.clock
        if clock is not None:
            landed = max((w.latest_landing() for w in self._windows.values()), default=-np.inf)
            clock.barrier(landed)
        for win in self._windows.values():
            win.deliver_all()
            win.deliver_landed(None)
        self._active = self._active_mask = None
        self._drawn = True

    # -- create, free -------------------------------------------------------------------------
    def win_create(self, x: Any, name: str, zero_init: bool = False) -> bool:
        if not isinstance(name, str) or not name:
            raise TypeError(f"win_create: name must be a non-empty str, got {name!r}")
        check_flag(zero_init, "zero_init", "win_create")
        if name in self._windows:
            raise ValueError(f"win_create: a window named {name!r} exists already")
        raw, fmt = window_view(x, "win_create")
        if raw.ndim == 0 or raw.shape[0] != self._n:
            raise ValueError(
                f"win_create: x has shape {raw.shape}; stack one value per agent along a "
                f"leading axis of {self._n} (see fogsim.local)"
            )
        if not raw.flags.c_contiguous or not raw.flags.writeable:
            raise ValueError("win_create: x must be C-contiguous and writeable")
        topo = self._topology
        assert topo is not None, "the backend installs a topology before any window op"
        default = topo if self._is_weighted else topo.uniform()
        self._windows[name] = SimWindow(name, x, raw, fmt, topo, default, zero_init)
        return True

    def win_free(self, name: str | None) -> bool:
        # Messages still in flight to a freed window are dropped with it; with a clock the
        # free is collective: every agent leaves it once the window's messages have landed.
        freed = list(self._windows) if name is None else [self._win(name, "win_free").name]
        clock = self.clock
        if clock is not None and freed:
            clock.barrier(max(self._windows[w].latest_landing() for w in freed))
        for w in freed:
            del self._windows[w]
        return True

    def win_names(self) -> list[str]:
        return list(self._windows)

    # -- put, accumulate, get -----------------------------------------------------------------
    def win_put(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._push("win_put", PUT, x, name, self_weight, dst_weights, require_mutex)

    def win_accumulate(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._push(
            "win_accumulate", ACCUMULATE, x, name, self_weight, dst_weights, require_mutex
        )

    def _push(
        self,
        op: str,
        kind: str,
        x: Any,
        name: str,
        self_weight: Any,
        dst_weights: Any,
        require_mutex: bool,
    ) -> bool:
        win = self._win(name, op)
        raw = self._operand(win, x, op)
        check_flag(require_mutex, "require_mutex", op)
        sw = self_weights(self_weight, self._n)
        edges, w = self._edges(win, dst_weights, "dst_weights", op, by_sender=True)
        if sw is not None and not raw.flags.writeable:
            raise ValueError(f"{op}: x is read-only, so self_weight cannot scale it in place")
        active = self._active_ranks()
        if active is not None:
            keep = self._mask()[win.send[edges]]
            edges, w = edges[keep], w[keep]
        src = win.send[edges]
        flat = win.fmt.decode(raw).reshape(win.raw.shape)
        vals = flat[src] * w.astype(win.dtype)[:, None]
        pvals = w * win.p[src] if self._with_p else None
        self._send(win, kind, edges, vals, pvals, op)
        if sw is not None:
            rows = slice(None) if active is None else active
            scaled = flat[rows] * sw.astype(win.dtype)[rows][:, None]
            raw[rows] = win.fmt.encode(scaled).reshape(scaled.shape[:1] + win.shape[1:])
            if self._with_p:
                win.p[rows] *= sw[rows]
        win.expose(active)
        return True

    def win_get(self, name: str, src_weights: Any, require_mutex: bool) -> bool:
        win = self._win(name, "win_get")
        check_flag(require_mutex, "require_mutex", "win_get")
        edges, w = self._edges(win, src_weights, "src_weights", "win_get", by_sender=False)
        if self.clock is not None:
            win.deliver_landed(self.clock.time)
        if self._active_ranks() is not None:
            keep = self._mask()[win.recv[edges]]
            edges, w = edges[keep], w[keep]
        src = win.send[edges]
        vals = win.exposed[src] * w.astype(win.dtype)[:, None]
        pvals = w * win.exposed_p[src] if self._with_p else None
        self._send(win, GET, edges, vals, pvals, "win_get")
        return True

    # -- update -------------------------------------------------------------------------------
    def win_update(
        self,
        name: str,
        self_weight: Any,
        neighbor_weights: Any,
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any:
        win = self._win(name, "win_update")
        if not check_update_args(self_weight, neighbor_weights, reset, clone, require_mutex):
            sw, edges, w = win.self_weight, win.all_edges, win.weights
        else:
            given = self_weights(self_weight, self._n)
            assert given is not None  # self_weight was given
            sw = given
            edges, w = self._edges(
                win, neighbor_weights, "neighbor_weights", "win_update", by_sender=False
            )
        return self._update(win, sw, edges, w, reset, clone)

    def win_update_then_collect(self, name: str, require_mutex: bool) -> Any:
        win = self._win(name, "win_update_then_collect")
        check_flag(require_mutex, "require_mutex", "win_update_then_collect")
        edges = win.all_edges
        return self._update(win, np.ones(self._n), edges, np.ones(edges.size), True, False)

    def _update(
        self,
        win: SimWindow,
        sw: np.ndarray,
        edges: np.ndarray,
        w: np.ndarray,
        reset: bool,
        clone: bool,
    ) -> Any:
        """``x_i <- sw_i x_i + sum_j w_ij b[i<-j]`` for the active i; then end the round."""
        n = self._n
        rows = self._active_ranks()
        if self.clock is not None:  # what has landed by each reader's clock
            win.deliver_landed(self.clock.time)
        recv = win.recv[edges]
        counts = np.bincount(recv, minlength=n)
        if rows is not None:
            keep = self._mask()[recv]
            edges, w, counts, sw = edges[keep], w[keep], counts[rows], sw[rows]
        indptr = np.concatenate([[0], np.cumsum(counts)])
        flat = win.fmt.decode(win.raw if rows is None else win.raw[rows])
        acc = np.multiply(flat, sw[:, None], dtype=np.float64)  # float64, rounded once
        slot_add(acc, indptr, edges, w, win.buf)
        out = acc.astype(win.dtype, copy=False)
        if self._with_p:
            p = (win.p if rows is None else win.p[rows]) * sw
            slot_add(p, indptr, edges, w, win.q)
            win.p[slice(None) if rows is None else rows] = p
        if reset:
            win.buf[edges] = 0
            win.q[edges] = 0.0
        win.ver[edges] = 0
        if clone:
            if rows is None:
                result = out
            else:
                result = win.fmt.decode(win.raw).copy()
                result[rows] = out
            value = win.fmt.wrap(result.reshape(win.shape))
        else:
            win.raw[slice(None) if rows is None else rows] = win.fmt.encode(out)
            value = win.obj
        win.expose(rows)
        self._end_round()
        return value

    # -- mutexes, versions, p, asynchrony -----------------------------------------------------
    def win_mutex(self, name: str, for_self: bool, ranks: Any) -> Any:
        """Return a context manager that holds nothing: every simulated op is atomic."""
        self._win(name, "win_mutex")
        check_flag(for_self, "for_self", "win_mutex")
        if ranks is not None:
            if is_tensor(ranks):
                ranks = ranks.tolist()
            for r in np.ravel(np.asarray(ranks, dtype=object)).tolist():
                if isinstance(r, list | tuple | np.ndarray):  # ragged per-agent lists
                    for s in np.ravel(np.asarray(r, dtype=object)).tolist():
                        check_rank(s, self._n, "ranks")
                else:
                    check_rank(r, self._n, "ranks")
        return contextlib.nullcontext()

    def get_win_version(self, name: str) -> list[dict[int, int]]:
        win = self.window(name, "get_win_version")
        ver, send, ptr = win.ver.tolist(), win.send.tolist(), win.indptr.tolist()
        rows = zip(ptr[:-1], ptr[1:], strict=True)
        return [dict(zip(send[a:b], ver[a:b], strict=True)) for a, b in rows]

    def win_associated_p(self, name: str) -> np.ndarray:
        return self._win(name, "win_associated_p").p.copy()

    def set_win_ops_with_associated_p(self, enabled: bool) -> None:
        self._with_p = check_flag(enabled, "enabled", "set_win_ops_with_associated_p")

    def set_asynchrony(self, activation: str, **options: Any) -> None:
        """Model asynchrony from now on (see :func:`fogsim.set_asynchrony`).

        The current round's active set is drawn afresh; messages in flight stay in flight.
        """
        asynchrony = Asynchrony(self._n, activation, **options)
        if activation == "clock" and self.clock is None:
            raise ValueError(
                "set_asynchrony('clock') activates agents by their clocks, but no clock runs: "
                "call fogsim.clock.start(platform) first"
            )
        self._asynchrony = asynchrony
        self._by_clock = activation == "clock"
        self._drawn = False
        if self.clock is not None:
            self.clock.busy = None

    def close(self) -> None:
        self.win_free(None)
