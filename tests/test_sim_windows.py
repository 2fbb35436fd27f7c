"""The simulator's one-sided window ops against per-agent numpy references (lock-step).

``Ref`` below replays the window semantics one agent at a time, with the MPI runtime's
arithmetic (weights cast to the data dtype, one rounded add per in-neighbor in ascending
rank order), so the vectorized simulator must match it bit for bit; dense float64 weight
matrices check what the numbers mean.
"""

from __future__ import annotations

import numpy as np
import pytest

import fogsim as fs
from fogsim import _api_windows as W
from fogsim import _context
from fogsim import topology as T

TOPOLOGIES = {
    "ring-5": lambda: T.ring_graph(5),
    "exp2-8": lambda: T.exponential_two_graph(8),
    "exp2-6": lambda: T.exponential_two_graph(6),
    "star-7": lambda: T.star_graph(7),  # degrees differ: the ragged combine path
}
DTYPES = [np.float32, np.float64]


@pytest.fixture
def world():
    def make(topo, weighted=False):
        fs.init(size=topo.size, topology=topo)
        if weighted:
            fs.set_topology(topo, is_weighted=True)
        return _context.current().backend

    yield make
    fs.shutdown()


def stacked(n, shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


def tol(dtype):
    return {"rtol": 2e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


class Ref:
    """The window semantics of one window, one agent at a time (lock-step)."""

    def __init__(self, topo, x, zero_init=False, weighted=False, with_p=False):
        n = topo.size
        self.n, self.dt, self.with_p = n, x.dtype.type, with_p
        self.ins = [topo.in_neighbors(i) for i in range(n)]
        self.outs = [topo.out_neighbors(i) for i in range(n)]
        self.x = x.copy()
        self.e = x.copy()
        self.p, self.ep = np.ones(n), np.ones(n)
        self.buf, self.ver, self.q = {}, {}, {}
        for i in range(n):
            for j in self.ins[i]:
                self.buf[i, j] = np.zeros_like(x[i]) if zero_init else x[i].copy()
                self.ver[i, j], self.q[i, j] = 0, 0.0  # p buffers start empty (BlueFog)
        D = (topo if weighted else topo.uniform()).to_dense()
        self.default = (np.diag(D).copy(), [{j: D[i, j] for j in self.ins[i]} for i in range(n)])

    def push(self, s, dst, accumulate=False):
        dt = self.dt
        for j in range(self.n):
            for i, d in sorted((dst[j] if dst else dict.fromkeys(self.outs[j], 1.0)).items()):
                v = self.x[j] * dt(d)
                self.buf[i, j] = self.buf[i, j] + v if accumulate else v
                self.ver[i, j] += 1
                if self.with_p:
                    self.q[i, j] = self.q[i, j] + d * self.p[j] if accumulate else d * self.p[j]
            if s is not None:
                self.x[j] = self.x[j] * dt(s[j])
                if self.with_p:
                    self.p[j] = self.p[j] * s[j]
        self.e, self.ep = self.x.copy(), self.p.copy()

    def get(self, src):
        for i in range(self.n):
            for j, w in sorted((src[i] if src else dict.fromkeys(self.ins[i], 1.0)).items()):
                self.buf[i, j] = self.e[j] * self.dt(w)
                self.ver[i, j] += 1
                if self.with_p:
                    self.q[i, j] = w * self.ep[j]

    def update(self, s=None, nw=None, reset=False, clone=False):
        if s is None:
            s, nw = self.default
        dt, out = self.dt, self.x.copy()
        for i in range(self.n):
            # summed in float64 (weights as given, values widened), rounded once below
            acc, p = self.x[i].astype(np.float64) * s[i], s[i] * self.p[i]
            for j, w in sorted(nw[i].items()):
                acc = acc + w * self.buf[i, j].astype(np.float64)
                p = p + w * self.q[i, j]
                self.ver[i, j] = 0
                if reset:
                    self.buf[i, j], self.q[i, j] = np.zeros_like(self.buf[i, j]), 0.0
            out[i] = acc.astype(dt)
            if self.with_p:
                self.p[i] = p
        if not clone:
            self.x = out
        self.e, self.ep = self.x.copy(), self.p.copy()
        return out

    def collect(self):
        return self.update(np.ones(self.n), [dict.fromkeys(js, 1.0) for js in self.ins], True)

    def check(self, win, x):
        """Assert the simulator's window ``win`` and registered ``x`` equal this state."""
        recv, send = win.edges
        keys = list(zip(recv.tolist(), send.tolist(), strict=True))
        np.testing.assert_array_equal(np.asarray(x), self.x)
        np.testing.assert_array_equal(win.buffers, np.stack([self.buf[k] for k in keys]))
        np.testing.assert_array_equal(win.versions, [self.ver[k] for k in keys])
        np.testing.assert_array_equal(win.p, self.p)
        np.testing.assert_array_equal(win.p_buffers, [self.q[k] for k in keys])


def random_weights(rng, neighbors, as_list=False):
    """Per-agent dicts (or rank lists) over random subsets of ``neighbors``."""
    rows = []
    for js in neighbors:
        chosen = [j for j in js if rng.random() < 0.7]
        rows.append(chosen if as_list else {j: float(rng.uniform(0.1, 2)) for j in chosen})
    return rows


def as_dicts(rows):
    return [r if isinstance(r, dict) else dict.fromkeys(r, 1.0) for r in rows]


# -- create, put, accumulate, get, update ----------------------------------------------------
@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_create_then_update_returns_own_value(world, name, dtype):
    topo = TOPOLOGIES[name]()
    world(topo)
    x = stacked(topo.size, (3,), dtype)
    ref = Ref(topo, x)
    assert W.win_create(x, "w") is True
    got = W.win_update("w", clone=True)
    np.testing.assert_array_equal(got, ref.update(clone=True))
    np.testing.assert_allclose(got, x, **tol(dtype))  # the weights sum to 1


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted", [False, True])
def test_put_then_update_is_the_weight_matrix(world, name, dtype, weighted):
    topo = TOPOLOGIES[name]()
    backend = world(topo, weighted)
    x = stacked(topo.size, (2, 3), dtype)
    x0 = x.copy()
    ref = Ref(topo, x, weighted=weighted)
    W.win_create(x, "w")
    W.win_put(x, "w")
    ref.push(None, None)
    ref.check(backend.window("w"), x)
    assert W.get_win_version("w") == [dict.fromkeys(ref.ins[i], 1) for i in range(topo.size)]
    got = W.win_update("w")
    assert got is x  # written in place
    np.testing.assert_array_equal(got, ref.update())
    ref.check(backend.window("w"), x)
    Wd = topo.to_dense() if weighted else topo.uniform().to_dense()
    np.testing.assert_allclose(x, np.einsum("ij,j...->i...", Wd, x0), **tol(dtype))
    assert all(v == 0 for row in W.get_win_version("w") for v in row.values())


@pytest.mark.parametrize("form", ["dicts", "lists", "matrix", "topology"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_put_and_accumulate_with_weights(world, form, dtype, accumulate):
    topo = T.exponential_two_graph(7)
    backend = world(topo)
    n = topo.size
    rng = np.random.default_rng(1)
    x = stacked(n, (4,), dtype, seed=2)
    ref = Ref(topo, x)
    outs = [topo.out_neighbors(j) for j in range(n)]
    rows = random_weights(rng, outs, as_list=form == "lists")
    dst = rows
    if form in ("matrix", "topology"):
        D = np.zeros((n, n))  # D[i, j]: what j writes into i
        for j, row in enumerate(rows):
            for i, d in row.items():
                D[i, j] = d
        dst = D if form == "matrix" else T.Topology(D)
    s = rng.uniform(0.2, 1.0, n)
    W.win_create(x, "w")
    op = W.win_accumulate if accumulate else W.win_put
    assert op(x, "w", self_weight=s, dst_weights=dst) is True
    ref.push(s, as_dicts(rows), accumulate)
    ref.check(backend.window("w"), x)  # buffers, versions, and x scaled in place
    op(x, "w", self_weight=0.5, dst_weights=dst)  # one scalar self weight for all agents
    ref.push(np.full(n, 0.5), as_dicts(rows), accumulate)
    ref.check(backend.window("w"), x)


@pytest.mark.parametrize("form", ["default", "dicts", "lists", "matrix"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_get_fetches_the_exposed_values(world, form, dtype):
    topo = T.ring_graph(6)
    backend = world(topo)
    n = topo.size
    rng = np.random.default_rng(3)
    x = stacked(n, (), dtype, seed=4)  # one number per agent
    ref = Ref(topo, x, zero_init=True)
    W.win_create(x, "w", zero_init=True)
    x *= 3  # not a window op: the exposed values stay those of win_create
    ref.x *= 3
    rows = None if form == "default" else random_weights(rng, ref.ins, as_list=form == "lists")
    src = rows
    if form == "matrix":
        src = np.zeros((n, n))
        for i, row in enumerate(rows):
            for j, w in row.items():
                src[i, j] = w
    assert W.win_get("w", src_weights=src) is True
    ref.get(None if rows is None else as_dicts(rows))
    ref.check(backend.window("w"), x)
    W.win_put(x, "w", dst_weights=[[] for _ in range(n)])  # writes nothing, exposes x
    ref.push(None, [{} for _ in range(n)])
    W.win_get("w", src_weights=src)
    ref.get(None if rows is None else as_dicts(rows))
    ref.check(backend.window("w"), x)
    np.testing.assert_array_equal(W.win_update_then_collect("w"), ref.collect())


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_p", [False, True])
def test_random_op_sequences_match_the_reference(world, name, dtype, with_p):
    topo = TOPOLOGIES[name]()
    backend = world(topo)
    n = topo.size
    rng = np.random.default_rng([list(TOPOLOGIES).index(name), int(with_p)])
    x = stacked(n, (3,), dtype, seed=5)
    zero_init = bool(rng.random() < 0.5)
    W.set_win_ops_with_associated_p(with_p)
    ref = Ref(topo, x, zero_init=zero_init, with_p=with_p)
    W.win_create(x, "w", zero_init=zero_init)
    win = backend.window("w")
    outs = ref.outs
    for _ in range(25):
        op = rng.choice(["put", "accumulate", "get", "update", "weighted", "collect"])
        if op in ("put", "accumulate"):
            rows = random_weights(rng, outs) if rng.random() < 0.7 else None
            s = rng.uniform(0.3, 1.0, n) if rng.random() < 0.7 else None
            getattr(W, f"win_{op}")(x, "w", self_weight=s, dst_weights=rows)
            ref.push(s, rows, op == "accumulate")
        elif op == "get":
            rows = random_weights(rng, ref.ins) if rng.random() < 0.7 else None
            W.win_get("w", src_weights=rows)
            ref.get(rows)
        elif op == "update":
            reset, clone = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
            got = W.win_update("w", reset=reset, clone=clone)
            want = ref.update(*ref.default, reset=reset, clone=clone)
            assert (got is x) != clone
            np.testing.assert_array_equal(got, want)
        elif op == "weighted":
            s, rows = rng.uniform(0, 1, n), random_weights(rng, ref.ins)
            got = W.win_update("w", self_weight=s, neighbor_weights=rows, reset=True)
            np.testing.assert_array_equal(got, ref.update(s, rows, reset=True))
        else:
            np.testing.assert_array_equal(W.win_update_then_collect("w"), ref.collect())
        ref.check(win, x)
    np.testing.assert_array_equal(W.win_associated_p("w"), ref.p)


def test_torch_tensors_in_and_out(world):
    torch = pytest.importorskip("torch")
    topo = T.exponential_two_graph(5)
    world(topo)
    x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
    ref = Ref(topo, x.numpy().copy())
    W.win_create(x, "t")
    W.win_put(x, "t", self_weight=0.5)
    ref.push(np.full(5, 0.5), None)
    np.testing.assert_array_equal(x.numpy(), ref.x)  # scaled in place
    cloned = W.win_update("t", clone=True)
    assert isinstance(cloned, torch.Tensor) and cloned.dtype == torch.float32
    np.testing.assert_array_equal(cloned.numpy(), ref.update(clone=True))
    np.testing.assert_array_equal(x.numpy(), ref.x)  # clone left x alone
    got = W.win_update("t")
    assert got is x
    np.testing.assert_array_equal(got.numpy(), ref.update())
    W.win_get("t")
    ref.get(None)
    np.testing.assert_array_equal(W.win_update_then_collect("t").numpy(), ref.collect())


def test_versions_count_writes_until_the_buffer_is_read(world):
    topo = T.ring_graph(5)
    world(topo)
    x = stacked(5, (2,), np.float64)
    W.win_create(x, "w")
    W.win_put(x, "w")
    W.win_accumulate(x, "w", dst_weights=[[(j + 1) % 5] for j in range(5)])
    W.win_get("w", src_weights=[[(i - 1) % 5] for i in range(5)])
    want = [{(i - 1) % 5: 3, (i + 1) % 5: 1} for i in range(5)]
    assert W.get_win_version("w") == want
    # a partial update reads (and zeroes the versions of) only the buffers it names
    W.win_update("w", self_weight=1.0, neighbor_weights=[[(i + 1) % 5] for i in range(5)])
    assert W.get_win_version("w") == [{(i - 1) % 5: 3, (i + 1) % 5: 0} for i in range(5)]
    W.win_update("w")
    assert W.get_win_version("w") == [{(i - 1) % 5: 0, (i + 1) % 5: 0} for i in range(5)]


def test_clone_leaves_the_registered_value_alone(world):
    topo = T.exponential_two_graph(6)
    world(topo)
    x = stacked(6, (3,), np.float64)
    W.win_create(x, "w")
    W.win_put(x, "w", self_weight=0.5)
    before = x.copy()
    cloned = W.win_update("w", clone=True)
    assert cloned is not x and not np.shares_memory(cloned, x)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(W.win_update("w"), cloned)  # same buffers, same result


def test_reset_zeroes_the_buffers_read(world):
    topo = T.ring_graph(6)
    world(topo)
    x = stacked(6, (2,), np.float32)
    W.win_create(x, "w")
    W.win_put(x, "w")
    half = [{(i - 1) % 6: 0.25} for i in range(6)]
    W.win_update("w", self_weight=0.5, neighbor_weights=half, reset=True, clone=True)
    right = (np.arange(6) + 1) % 6  # the buffers from i + 1 were not read; i - 1's are 0
    expect = np.stack([(x[i] + x[right[i]]) / 3 for i in range(6)])
    np.testing.assert_allclose(W.win_update("w", clone=True), expect, rtol=1e-6)
    W.win_update("w", reset=True)
    self_weight = topo.uniform().to_dense()[0, 0]  # float64; the sum is float64, rounded once
    want = (x.astype(np.float64) * self_weight).astype(np.float32)
    np.testing.assert_array_equal(W.win_update("w", clone=True), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_update_then_collect_sums_the_buffers(world, dtype):
    topo = T.exponential_two_graph(8)
    world(topo)
    x = stacked(8, (3,), dtype)
    x0 = x.copy()
    W.win_create(x, "w", zero_init=True)
    W.win_accumulate(x, "w")
    W.win_accumulate(x, "w", dst_weights=topo.to_dense())  # D[i, j] = W[i, j]
    A = (topo.to_dense() != 0) & ~np.eye(8, dtype=bool)
    want = x0 + np.einsum("ij,j...->i...", A + np.where(A, topo.to_dense(), 0), x0)
    np.testing.assert_allclose(W.win_update_then_collect("w"), want, **tol(dtype))
    np.testing.assert_array_equal(_context.current().backend.window("w").buffers, 0)


# -- push-sum ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ring-5", "exp2-8", "star-7"])
def test_push_sum_with_associated_p_converges(world, name):
    topo = TOPOLOGIES[name]()
    world(topo)
    n = topo.size
    data = stacked(n, (3,), np.float64, seed=7)
    # x_ext carries p as an extra column; the associated p must follow it bit for bit
    x = np.concatenate([data, np.ones((n, 1))], axis=1)
    W.set_win_ops_with_associated_p(True)
    W.win_create(x, "ps", zero_init=True)
    outdeg = np.array([len(topo.out_neighbors(j)) for j in range(n)])
    share = 1.0 / (outdeg + 1)
    dst = [dict.fromkeys(topo.out_neighbors(j), share[j]) for j in range(n)]
    for _ in range(300):
        W.win_accumulate(x, "ps", self_weight=share, dst_weights=dst, require_mutex=True)
        W.win_update_then_collect("ps")
        p = W.win_associated_p("ps")
        assert abs(p.sum() - n) < 1e-12
        np.testing.assert_array_equal(p, x[:, -1])
    np.testing.assert_allclose(
        x[:, :-1] / p[:, None], np.broadcast_to(data.mean(0), data.shape), rtol=0, atol=1e-10
    )
    assert abs(x[:, :-1].sum(0) - data.sum(0)).max() < 1e-12


def test_p_is_not_carried_unless_switched_on(world):
    topo = T.ring_graph(5)
    world(topo)
    x = stacked(5, (2,), np.float64)
    W.win_create(x, "w", zero_init=True)
    W.win_accumulate(
        x,
        "w",
        self_weight=0.5,
        dst_weights=[dict.fromkeys(topo.out_neighbors(j), 0.25) for j in range(5)],
    )
    W.win_update_then_collect("w")
    np.testing.assert_array_equal(W.win_associated_p("w"), np.ones(5))
    p = W.win_associated_p("w")
    p[0] = 9  # a copy
    assert W.win_associated_p("w")[0] == 1.0


# -- bookkeeping ------------------------------------------------------------------------
def test_free_and_names(world):
    world(T.ring_graph(5))
    xs = [stacked(5, (2,), np.float64, seed=k) for k in range(3)]
    for k, name in enumerate(["a", "b", "c"]):
        W.win_create(xs[k], name)
    assert W.win_names() == ["a", "b", "c"]
    assert W.win_free("b") is True
    assert W.win_names() == ["a", "c"]
    W.win_create(xs[1], "b")
    assert W.win_names() == ["a", "c", "b"]
    assert W.win_free() is True
    assert W.win_names() == []
    fs.set_topology(T.exponential_two_graph(5))  # allowed again


def test_shutdown_frees_windows():
    ctx = fs.init(size=4, topology=T.ring_graph)
    W.win_create(np.zeros((4, 2)), "w")
    backend = ctx.backend
    fs.shutdown()
    assert backend.windows.win_names() == []


def test_nonblocking_twins_and_mutex(world):
    topo = T.ring_graph(5)
    world(topo)
    x = stacked(5, (2,), np.float64)
    ref = Ref(topo, x)
    W.win_create(x, "w")
    with W.win_mutex("w"), W.win_mutex("w", for_self=True), W.win_mutex("w", ranks=[0, 4]):
        h = W.win_put_nonblocking(x, "w", self_weight=0.5)
        assert W.win_poll(h) and W.win_wait(h) is True
    ref.push(np.full(5, 0.5), None)
    with W.win_mutex("w", ranks=[[1, 4], [0], [], [2, 4], [3]]):  # per agent
        W.win_wait(W.win_accumulate_nonblocking(x, "w", require_mutex=True))
    ref.push(None, None, accumulate=True)
    W.win_wait(W.win_get_nonblocking("w", require_mutex=True))
    ref.get(None)
    np.testing.assert_array_equal(W.win_update("w", require_mutex=True), ref.update())
