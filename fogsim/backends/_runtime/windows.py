"""One-sided window ops of a distributed runtime, with passive-target synchronization.

Written once over the one-sided transport (:class:`~.transport.WindowTransport`, whose
model is MPI-3 RMA's; the MPI runtime's is ``mpi._rma.MpiRma``). Each named window owns
four RMA windows of the world, all kept in one passive-target epoch (MPI's ``Lock_all``)
from creation to ``win_free`` (no target ever takes part in a transfer):

* ``data``: ``1 + d`` slots of the registered value's size. Slot 0 is this agent's
  *exposed* value (its registered ``x`` after its own last window op; what ``win_get``
  reads), slot ``1 + k`` the buffer for in-neighbor ``srcs[k]``;
* ``p``: the same slots for the push-sum weight ``p`` (float64);
* ``version``: one int64 counter per buffer, incremented atomically by every write;
* ``mutex``: one int64 lock word, 0 when free, else ``1 + `` the holder's rank.
  A compare-and-swap takes it (0 -> ``1 + rank``; a failed swap returns who holds it)
  and gives it back (``1 + rank`` -> 0: only its holder finds that value). A rank waits
  for a held mutex under the stall guard (`fogsim._stall`): polling with a back-off, and
  after ``FOGSIM_STALL_TIMEOUT`` seconds reporting which rank holds it and what that rank
  is doing. Several are always taken in ascending rank order, so agents cannot deadlock,
  and they are reentrant per agent (``win_mutex`` around ``win_put(require_mutex=True)``).

Every write to a buffer is an accumulate (``SUM``, or ``REPLACE`` for puts, resets and this
agent's own writes, which go through RMA to itself), so concurrent writes to one buffer are
atomic per element. A blocking op is complete at its targets when it returns (BlueFog's
semantics), by these rules of MPI-3 RMA in the unified memory model:

* completion: every write, data and ``p`` first and then the version count (an atomic
  ``SUM`` of 1), is flushed (``Flush(target)``: complete at origin *and* target) before the
  op returns, and each origin buffer is kept alive until its ``Flush`` (RMA calls are
  nonblocking: the transport may read the buffer until then, so a temporary must not be
  freed first);
* remote writes, then local loads: an agent reads its own window memory (versions in
  ``get_win_version``, buffers and ``p`` in ``win_update``) only after ``Win.Sync`` at the
  time of the read, i.e. after the process synchronization (``fogsim.barrier``) that orders
  the writers' flushed ops before it. ``win_associated_p`` reads no window memory (this
  agent's ``p`` is kept in Python);
* local stores, then remote writes: the initial stores into window memory at creation are
  followed by ``Win.Sync`` and then the creation barrier, so no neighbor's first write can
  be overwritten by them (a version count of 0 after a completed put).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np

from ... import _core
from ..._stall import Guard
from ...topology import Topology
from .._windows import WindowFormat, WindowPart, check_flag, check_update_args, window_view
from .agree import LocalError, agree, fingerprint
from .plan import RankPlan, rank_weights, scalar_weight, static_rank_plan
from .transport import RmaWindow, Transport, WindowTransport

__all__ = ["WindowOps"]

_BACKOFF_START, _BACKOFF_MAX = 1e-6, 1e-3  # seconds between attempts to take a mutex
_INT64 = np.dtype(np.int64)


class _Window:
    """The state of one named window on this agent."""

    def __init__(
        self,
        rma: WindowTransport,
        name: str,
        obj: Any,
        raw: np.ndarray,
        fmt: WindowFormat,
        srcs: np.ndarray,
        dsts: np.ndarray,
        remote_slot: dict[int, int],
        zero_init: bool,
        me: int,
        guard: Guard,
    ) -> None:
        # raw: the caller's memory, read with fmt.decode and written with fmt.encode; the
        # window memory holds fmt.dtype (float32 for half precision)
        self.name, self.obj, self.raw, self.fmt = name, obj, raw, fmt
        self.me, self.guard = me, guard  # this agent's rank; what its mutex waits run under
        self.srcs, self.dsts, self.remote_slot = srcs, dsts, remote_slot
        self.slot_of = {int(j): k for k, j in enumerate(srcs)}
        self.m = raw.size
        d = len(srcs)
        self.data = rma.allocate((1 + d) * self.m, fmt.dtype)
        self.pwin = rma.allocate(1 + d, np.dtype(np.float64))
        self.version = rma.allocate(max(d, 1), _INT64)
        self.mutex = rma.allocate(1, _INT64)
        self.mem: np.ndarray = self.data.memory.reshape(1 + d, self.m)
        self.pmem: np.ndarray = self.pwin.memory
        self.vmem: np.ndarray = self.version.memory
        self.mem[0] = self.value()
        self.mem[1:] = 0 if zero_init else self.value()
        self.pmem[0], self.pmem[1:] = 1.0, 0.0  # neighbours' p: nothing received yet
        self.vmem[:], self.mutex.memory[:] = 0, 0
        self.p = 1.0
        self.held: dict[int, int] = {}  # rank -> how many times this agent holds its mutex
        for win in self.windows:
            win.open()  # Lock_all, then Sync: the stores above, before any remote write

    @property
    def windows(self) -> tuple[RmaWindow, ...]:
        return (self.data, self.pwin, self.version, self.mutex)

    def free(self) -> None:
        for win in self.windows:
            win.free()
        self.mem = self.pmem = self.vmem = np.empty(0)  # the freed memory is gone

    # -- mutexes ------------------------------------------------------------------------
    def acquire(self, ranks: list[int]) -> None:
        taken: list[int] = []
        try:
            for r in sorted(set(ranks)):
                if not self.held.get(r):
                    self._take(r)
                self.held[r] = self.held.get(r, 0) + 1
                taken.append(r)
        except BaseException:  # a stall report: give back what this call took
            self.release(taken)
            raise

    def _take(self, r: int) -> None:
        """Take rank ``r``'s mutex, waiting under the stall guard while another holds it."""
        me = self.me
        holder = [self.mutex.compare_and_swap(0, 1 + me, r, 0) - 1]  # -1: it was free
        if holder[0] < 0:
            return

        def free() -> bool:
            holder[0] = self.mutex.compare_and_swap(0, 1 + me, r, 0) - 1
            return holder[0] < 0

        def block() -> None:  # no stall limit: back off while another rank holds it
            pause = _BACKOFF_START
            while not free():
                time.sleep(pause)
                pause = min(2 * pause, _BACKOFF_MAX)

        def held() -> tuple[str, int]:
            return f"the mutex of window {self.name!r} on rank {r}", holder[0]

        self.guard.wait(free, block, held)

    def release(self, ranks: list[int]) -> None:
        for r in sorted(set(ranks), reverse=True):
            self.held[r] -= 1
            if self.held[r]:
                continue
            del self.held[r]
            self.mutex.compare_and_swap(1 + self.me, 0, r, 0)  # this agent's: 1 + its rank

    @contextmanager
    def holding(self, ranks: list[int], enabled: bool = True) -> Iterator[None]:
        if not enabled:
            yield
            return
        self.acquire(ranks)
        try:
            yield
        finally:
            self.release(ranks)

    @contextmanager
    def win_mutex(self, ranks: list[int]) -> Iterator[None]:
        """:meth:`holding`, for ``with fogsim.win_mutex(...)``, whose mutexes are taken
        where no public function runs: a stall report reads the op and ``name`` here."""
        name = self.name  # noqa: F841 - read from the stack (fogsim._stall.where)
        with self.holding(ranks):
            yield

    # -- own memory -----------------------------------------------------------------------
    def value(self) -> np.ndarray:
        """Return the registered value, flat, in the window's dtype (a view unless half)."""
        return self.fmt.decode(self.raw.reshape(-1))

    def expose(self, me: int) -> None:
        """Copy the registered value and p to slot 0, what neighbors' win_get reads."""
        value, p = self.value(), np.array([self.p])  # origin buffers alive until their flush
        self.data.accumulate(value, me, 0, replace=True)
        self.pwin.accumulate(p, me, 0, replace=True)
        self.data.flush(me)
        self.pwin.flush(me)

    def count(self, rank: int, slot: int) -> None:
        """Add one write to the version of buffer ``slot`` at ``rank`` (atomically).

        Call it after the write it counts is flushed: once it returns, the count is complete
        at ``rank`` too, so a reader that counts a write also sees it.
        """
        one = np.ones(1, np.int64)  # the origin buffer stays alive until the flush
        self.version.accumulate(one, rank, slot, replace=False)
        self.version.flush(rank)


class WindowOps(WindowPart):
    """The window part of a runtime with a one-sided transport (see the module docstring).

    Built from what it needs: ``transport`` agrees on collective calls among the ranks,
    ``rma`` allocates the windows, ``topology`` and ``weighted`` read the topology in use
    (a window's neighbors are those of the topology it was created on), ``drain``
    completes the runtime's pending nonblocking calls before a window is made,
    ``check_rank`` checks the ranks given to ``win_mutex``, and a rank waits for a mutex
    under the world's stall ``guard``.
    """

    def __init__(
        self,
        transport: Transport,
        rma: WindowTransport,
        topology: Callable[[], Topology],
        weighted: Callable[[], bool],
        drain: Callable[[], None],
        check_rank: Callable[[Any, str], int],
        guard: Guard,
    ) -> None:
        self._transport, self._rma, self._guard = transport, rma, guard
        self._n, self._rank = transport.size, transport.rank
        self._topology, self._weighted = topology, weighted
        self._drain, self._check_rank = drain, check_rank
        self._windows: dict[str, _Window] = {}
        self._with_p = False
        self._plan: tuple[Topology, bool, RankPlan] | None = None  # win_update's default

    def close(self) -> None:
        for win in self._windows.values():
            win.free()
        self._windows.clear()

    # -- lookup and arguments ---------------------------------------------------------------
    def _window(self, name: Any, op: str) -> _Window:
        if not isinstance(name, str):
            raise TypeError(f"{op}: name must be a str, got {type(name).__name__}")
        win = self._windows.get(name)
        if win is None:
            raise ValueError(
                f"{op}: agent {self._rank} has no window {name!r} (windows: "
                f"{list(self._windows)}); create it with win_create first"
            )
        return win

    def _partners(
        self, obj: Any, allowed: np.ndarray, argname: str, op: str, kind: str
    ) -> list[tuple[int, float]]:
        """Return [(rank, weight)] ascending from a dict/list, checked against ``allowed``."""
        if obj is None:
            return [(int(j), 1.0) for j in allowed]
        ranks, weights = rank_weights(obj, self._n, self._rank, argname)
        bad = ranks[~np.isin(ranks, allowed)]
        if bad.size:
            raise ValueError(
                f"{op}: {argname} names rank {bad[0]}, which is not an {kind} of agent "
                f"{self._rank} in the window's topology ({kind}s {allowed.tolist()})"
            )
        return list(zip(ranks.tolist(), weights.tolist(), strict=True))

    def _operand(self, win: _Window, x: Any, op: str) -> np.ndarray:
        """Return a view of ``x``'s memory (see :func:`window_view`), checked against ``win``."""
        raw, fmt = window_view(x, op)
        if fmt.label != win.fmt.label or raw.shape != win.raw.shape:
            raise ValueError(
                f"{op}: x is {fmt.label} {raw.shape} on agent {self._rank} but window "
                f"{win.name!r} holds {win.fmt.label} {win.raw.shape}"
            )
        return raw

    def _static_plan(self) -> RankPlan:
        """Return this agent's plan of the topology in use (cached while it stays)."""
        topo, weighted = self._topology(), self._weighted()
        cached = self._plan
        if cached is None or cached[0] is not topo or cached[1] != weighted:
            cached = self._plan = (topo, weighted, static_rank_plan(topo, weighted, self._rank))
        return cached[2]

    # -- create and free (collective) ---------------------------------------------------------
    def win_create(self, x: Any, name: str, zero_init: bool) -> bool:
        error, view, fp, describe = None, None, 0, "an invalid argument"
        try:
            if not isinstance(name, str) or not name:
                raise TypeError(f"win_create: name must be a non-empty str, got {name!r}")
            check_flag(zero_init, "zero_init", "win_create")
            if name in self._windows:
                raise ValueError(f"win_create: a window named {name!r} exists already")
            raw, fmt = window_view(x, "win_create")
            if not raw.flags.c_contiguous or not raw.flags.writeable:
                raise ValueError("win_create: x must be C-contiguous and writeable")
            fp = fingerprint("win_create", name, fmt.label, raw.shape, zero_init)
            describe = f"window {name!r} of {fmt.label} {raw.shape}"
            view = raw, fmt
        except (TypeError, ValueError) as exc:
            error = LocalError(exc)
        agree(self._transport, fp, error, describe)
        assert view is not None  # agree raised on every rank otherwise
        self._drain()
        topo, me = self._topology(), self._rank
        srcs = np.asarray(topo.in_neighbors(me), dtype=np.int64)
        dsts = np.asarray(topo.out_neighbors(me), dtype=np.int64)
        remote_slot = {int(j): topo.in_neighbors(int(j)).index(me) for j in dsts}
        self._windows[name] = _Window(
            self._rma, name, x, *view, srcs, dsts, remote_slot, zero_init, me, self._guard
        )
        # every window is initialized before anyone writes to it: a barrier (a reduction
        # of nothing), waited for under the stall guard
        nothing = np.zeros(1, np.int64)
        done = self._transport.iallreduce_max(nothing)
        self._guard.wait(done.test, done.wait)
        return True

    def win_free(self, name: str | None) -> bool:
        error, fp = None, 0
        try:
            if name is not None:
                self._window(name, "win_free")
            fp = fingerprint("win_free", name)
        except (TypeError, ValueError) as exc:
            error = LocalError(exc)
        agree(self._transport, fp, error, f"win_free({name!r})")
        for key in list(self._windows) if name is None else [name]:
            self._windows.pop(key).free()
        return True

    def win_names(self) -> list[str]:
        return list(self._windows)

    # -- put, accumulate, get ---------------------------------------------------------------
    def win_put(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._push("win_put", x, name, self_weight, dst_weights, require_mutex)

    def win_accumulate(
        self, x: Any, name: str, self_weight: Any, dst_weights: Any, require_mutex: bool
    ) -> bool:
        return self._push("win_accumulate", x, name, self_weight, dst_weights, require_mutex)

    def _push(
        self,
        op: str,
        x: Any,
        name: str,
        self_weight: Any,
        dst_weights: Any,
        require_mutex: bool,
    ) -> bool:
        win = self._window(name, op)
        raw = self._operand(win, x, op)
        check_flag(require_mutex, "require_mutex", op)
        sw = 1.0 if self_weight is None else scalar_weight(self_weight, "self_weight")
        dsts = self._partners(dst_weights, win.dsts, "dst_weights", op, "out-neighbor")
        flat = win.fmt.decode(raw).reshape(-1)
        replace = op == "win_put"  # an accumulate REPLACE: atomic like the SUMs
        keep = []
        with win.holding([j for j, _ in dsts], require_mutex):
            for j, w in dsts:
                buf = flat if w == 1.0 else np.multiply(flat, flat.dtype.type(w))
                keep.append(buf)
                slot = win.remote_slot[j]
                win.data.accumulate(buf, j, (1 + slot) * win.m, replace)
                if self._with_p:
                    pbuf = np.array([win.p * w])
                    keep.append(pbuf)
                    win.pwin.accumulate(pbuf, j, 1 + slot, replace)
                win.data.flush(j)
                win.pwin.flush(j)
                win.count(j, slot)
        if sw != 1.0:
            raw[...] = win.fmt.encode(flat * flat.dtype.type(sw)).reshape(raw.shape)
            if self._with_p:
                win.p *= sw
        with win.holding([self._rank], require_mutex):
            win.expose(self._rank)
        return True

    def win_get(self, name: str, src_weights: Any, require_mutex: bool) -> bool:
        win = self._window(name, "win_get")
        check_flag(require_mutex, "require_mutex", "win_get")
        srcs = self._partners(src_weights, win.srcs, "src_weights", "win_get", "in-neighbor")
        got = np.empty(win.m, dtype=win.fmt.dtype)
        pgot = np.empty(1)
        me = self._rank
        for j, w in srcs:
            with win.holding([j], require_mutex):
                win.data.get(got, j, 0)
                win.pwin.get(pgot, j, 0)
                win.data.flush(j)
                win.pwin.flush(j)
            slot = 1 + win.slot_of[j]
            value = got if w == 1.0 else np.multiply(got, got.dtype.type(w))
            win.data.accumulate(value, me, slot * win.m, replace=True)
            win.data.flush(me)
            if self._with_p:
                pvalue = np.array([pgot[0] * w])
                win.pwin.accumulate(pvalue, me, slot, replace=True)
                win.pwin.flush(me)
            win.count(me, slot - 1)
        return True

    # -- update -------------------------------------------------------------------------
    def win_update(
        self,
        name: str,
        self_weight: Any,
        neighbor_weights: Any,
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any:
        win = self._window(name, "win_update")
        pairs: list[tuple[int, float]]
        if not check_update_args(self_weight, neighbor_weights, reset, clone, require_mutex):
            plan = self._static_plan()
            sw = plan.self_weight
            pairs = list(zip(plan.srcs.tolist(), plan.weights.tolist(), strict=True))
        else:
            sw = scalar_weight(self_weight, "self_weight")
            pairs = self._partners(
                neighbor_weights, win.srcs, "neighbor_weights", "win_update", "in-neighbor"
            )
        return self._update(win, sw, pairs, reset, clone, require_mutex)

    def win_update_then_collect(self, name: str, require_mutex: bool) -> Any:
        win = self._window(name, "win_update_then_collect")
        check_flag(require_mutex, "require_mutex", "win_update_then_collect")
        pairs = [(int(j), 1.0) for j in win.srcs]
        return self._update(win, 1.0, pairs, True, False, require_mutex)

    def _update(
        self,
        win: _Window,
        sw: float,
        pairs: list[tuple[int, float]],
        reset: bool,
        clone: bool,
        require_mutex: bool,
    ) -> Any:
        me = self._rank
        slots = np.array([1 + win.slot_of[j] for j, _ in pairs], dtype=np.int64)
        weights = np.array([w for _, w in pairs], dtype=np.float64)
        with win.holding([me], require_mutex):
            for w in (win.data, win.pwin, win.version):
                w.sync()
            flat = win.value()
            out = _core.combine_rows(np.empty_like(flat), sw, flat, weights, win.mem, 0, slots)
            p = sw * win.p
            for k, w in zip(slots.tolist(), weights.tolist(), strict=True):
                p = p + w * float(win.pmem[k])
            if reset and slots.size:
                zeros, zero = np.zeros(win.m, dtype=win.fmt.dtype), np.zeros(1)
                for k in slots.tolist():
                    win.data.accumulate(zeros, me, k * win.m, replace=True)
                    win.pwin.accumulate(zero, me, k, replace=True)
                win.data.flush(me)
                win.pwin.flush(me)
            zero_count = np.zeros(1, np.int64)
            for k in slots.tolist():
                win.version.accumulate(zero_count, me, k - 1, replace=True)
            win.version.flush(me)
            if self._with_p:
                win.p = p
            if clone:
                win.expose(me)
                return win.fmt.wrap(out.reshape(win.raw.shape))
            win.raw.reshape(-1)[...] = win.fmt.encode(out)  # rounded once for half precision
            win.expose(me)
        return win.obj

    # -- mutexes, versions, p ---------------------------------------------------------------
    def win_mutex(self, name: str, for_self: bool, ranks: Any) -> AbstractContextManager[None]:
        win = self._window(name, "win_mutex")
        check_flag(for_self, "for_self", "win_mutex")
        if for_self:
            chosen = [self._rank]
        elif ranks is None:
            chosen = [int(j) for j in win.dsts]
        else:
            if isinstance(ranks, int | np.integer):
                ranks = [ranks]
            chosen = [self._check_rank(r, "ranks") for r in ranks]
        return win.win_mutex(chosen)

    def get_win_version(self, name: str) -> dict[int, int]:
        win = self._window(name, "get_win_version")
        win.version.sync()  # now, after the caller's barrier: the flushed counts are visible
        return {int(j): int(win.vmem[k]) for k, j in enumerate(win.srcs)}

    def win_associated_p(self, name: str) -> float:
        return float(self._window(name, "win_associated_p").p)

    def set_win_ops_with_associated_p(self, enabled: bool) -> None:
        self._with_p = check_flag(enabled, "enabled", "set_win_ops_with_associated_p")
