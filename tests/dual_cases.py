"""Op test bodies written once, run on every backend (see test_dual_backends.py).

Each ``case_*`` function initializes fogsim with the backend the environment selects
(``FOGSIM_BACKEND=sim FOGSIM_SIZE=n`` in process, or an mpiexec launch), builds
agent-local data with ``fs.local`` and compares with a numpy reference built from the
weight matrix, also through ``fs.local``: in simulation both sides are stacked, under
MPI both are this rank's row. Error cases assert that *every* agent raises.
"""

from __future__ import annotations

import numpy as np

import fogsim as fs
from fogsim import topology as T


def _same(got, want, exact=False, rtol=1e-12):
    if isinstance(got, list):  # ragged results in simulation
        assert isinstance(want, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w, exact, rtol)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact:
        assert np.array_equal(got, want), np.max(np.abs(got - want))
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def _raises_everywhere(exc_type, match, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        assert match in str(exc), f"{match!r} not in {str(exc)!r}"
        return str(exc)
    raise AssertionError(f"{fn.__name__} did not raise {exc_type.__name__}")


def _data(n, shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(dtype)


def _sim_reference(n, topology, data, **kwargs):
    """The simulator's result for the same call, computed in a private world."""
    with fs.Context(backend="sim", size=n, topology=topology) as world:
        fs.set_topology(topology, is_weighted=kwargs.pop("weighted", False))
        result = fs.neighbor_allreduce(data, **kwargs)
    world.close()
    return result


TOPOLOGIES = {
    "exp2": T.exponential_two_graph,
    "ring": T.ring_graph,
    "ring-right": lambda n: T.ring_graph(n, style="right"),
    "full": T.fully_connected_graph,
    "star": T.star_graph,
}


def case_static_neighbor_allreduce_matches_reference_and_simulator():
    fs.init()
    n = fs.size()
    for name, build in TOPOLOGIES.items():
        topo = build(n)
        for weighted in (False, True):
            fs.set_topology(topo, is_weighted=weighted)
            W = topo.to_dense() if weighted else topo.uniform().to_dense()
            for dtype, shape in [(np.float64, (3,)), (np.float32, (2, 2)), (np.float64, ())]:
                data = _data(n, shape, dtype)
                got = fs.neighbor_allreduce(fs.local(lambda r, d=data: d[r]))
                ref = np.einsum("ij,j...->i...", W, data.astype(np.float64)).astype(dtype)
                _same(got, fs.local(lambda r, ref=ref: ref[r]), rtol=1e-5)
                sim = _sim_reference(n, topo, data, weighted=weighted)
                _same(got, fs.local(lambda r, s=sim: s[r]), exact=True)
                assert np.asarray(got).dtype == dtype, name
    fs.shutdown()


def case_static_src_weights_subset():
    fs.init(topology=T.exponential_two_graph)
    n = fs.size()
    data = _data(n, (4,))
    src = fs.local(lambda r: {(r - 1) % n: 0.25} if n > 1 else {})
    got = fs.neighbor_allreduce(fs.local(lambda r: data[r]), self_weight=0.75, src_weights=src)
    W = 0.75 * np.eye(n) + (0.25 * np.roll(np.eye(n), -1, axis=1) if n > 1 else 0)
    ref = W @ data
    _same(got, fs.local(lambda r: ref[r]))
    fs.shutdown()


def case_dynamic_push_pull_weights_are_bit_identical_to_simulation():
    fs.init()
    n = fs.size()
    rng = np.random.default_rng(5)
    A = (rng.random((n, n)) < 0.6) & ~np.eye(n, dtype=bool)
    R, S, sw = rng.random((n, n)) * A, rng.random((n, n)) * A, rng.random(n)
    src_all = [{int(j): float(R[i, j]) for j in np.flatnonzero(A[i])} for i in range(n)]
    dst_all = [{int(i): float(S[i, j]) for i in np.flatnonzero(A[:, j])} for j in range(n)]
    data = _data(n, (3, 2))
    got = fs.neighbor_allreduce(
        fs.local(lambda r: data[r]),
        self_weight=fs.local(lambda r: sw[r]),
        src_weights=fs.local(lambda r: src_all[r]),
        dst_weights=fs.local(lambda r: dst_all[r]),
    )
    ref = np.einsum("ij,j...->i...", np.diag(sw) + R * S, data)
    _same(got, fs.local(lambda r: ref[r]))
    sim = _sim_reference(n, T.ring_graph(n), data, self_weight=sw, src_weights=src_all,
                         dst_weights=dst_all)  # fmt: skip
    _same(got, fs.local(lambda r: sim[r]), exact=True)
    fs.shutdown()


def case_one_peer_schedule_reaches_the_average():
    fs.init()
    n = fs.size()
    data = _data(n, (5,))
    x = fs.local(lambda r: data[r])
    schedule = T.one_peer_exponential_two(n)
    steps = max(1, int(np.ceil(np.log2(n))))
    for _ in range(steps):
        x = fs.neighbor_allreduce(x, src_weights=next(schedule).weights)
    if n & (n - 1) == 0:  # exact after log2(n) steps for powers of two
        _same(x, fs.local(lambda r: data.mean(axis=0)))
    sim = data
    with fs.Context(backend="sim", size=n) as world:
        for step in T.one_peer_exponential_two(n):
            if step.step == steps:
                break
            sim = fs.neighbor_allreduce(sim, src_weights=step.weights)
    world.close()
    _same(x, fs.local(lambda r: sim[r]), exact=True)
    fs.shutdown()


def case_nonblocking_fused_tensors_come_back_byte_exact():
    fs.init(topology=T.ring_graph)
    n = fs.size()
    values = [_data(n, shape, dtype, seed=k) for k, (shape, dtype) in enumerate(
        [((3,), np.float64), ((2, 5), np.float32), ((), np.float64), ((7,), np.float32)] * 3
    )]  # fmt: skip
    handles = [fs.neighbor_allreduce_nonblocking(fs.local(lambda r, v=v: v[r])) for v in values]
    for _ in range(100_000):  # polling sends the queue and reports completion
        if fs.poll(handles[0]):
            break
    else:
        raise AssertionError("poll() never reported the fused batch as complete")
    results = [fs.wait(h) for h in handles]
    for v, got in zip(values, results, strict=True):
        _same(got, fs.neighbor_allreduce(fs.local(lambda r, v=v: v[r])), exact=True)
    fs.shutdown()


def case_collectives():
    fs.init()
    n = fs.size()
    data = _data(n, (2, 3))
    x = fs.local(lambda r: data[r])
    _same(fs.allreduce(x), fs.local(lambda r: data.mean(axis=0)))
    _same(fs.wait(fs.allreduce_nonblocking(x, average=False)), fs.local(lambda r: data.sum(0)))
    ints = fs.local(lambda r: np.arange(3) + r)
    _same(
        fs.allreduce(ints, average=False), fs.local(lambda r: np.arange(3) * n + n * (n - 1) // 2)
    )
    root = n - 1
    _same(fs.broadcast(x, root), fs.local(lambda r: data[root]), exact=True)
    _same(fs.allgather(x), fs.local(lambda r: data.reshape(-1, 3)), exact=True)
    fs.barrier()
    fs.wait(fs.barrier_nonblocking())
    fs.shutdown()


def case_allgather_first_dimension_may_differ():
    fs.init()
    n = fs.size()
    x = fs.local(lambda r: np.full((r + 1, 2), float(r)))
    whole = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(n)])
    got = fs.allgather(x)
    want = fs.local(lambda r: whole)
    _same(got, list(want) if isinstance(got, list) else want, exact=True)
    fs.shutdown()


def case_neighbor_allgather_static_and_dynamic():
    fs.init(topology=T.exponential_two_graph)
    n = fs.size()
    topo = T.exponential_two_graph(n)
    data = _data(n, (2,))
    got = fs.neighbor_allgather(fs.local(lambda r: data[r]))
    ref = [
        np.concatenate([data[j] for j in topo.in_neighbors(r)] or [np.empty(0)]) for r in range(n)
    ]
    want = fs.local(lambda r: ref[r])
    _same(np.asarray(got) if not isinstance(got, list) else got, want, exact=True)
    src = fs.local(lambda r: [(r + 1) % n] if n > 1 else [])
    dst = fs.local(lambda r: [(r - 1) % n] if n > 1 else [])
    dyn = fs.neighbor_allgather(fs.local(lambda r: data[r]), src_ranks=src, dst_ranks=dst)
    if n > 1:
        _same(dyn, fs.local(lambda r: data[(r + 1) % n]), exact=True)
    fs.shutdown()


def case_mismatched_send_and_receive_sets_raise_everywhere():
    fs.init(topology=T.ring_graph)
    n = fs.size()
    if n < 2:
        fs.shutdown()
        return
    x = fs.local(lambda r: np.ones(3))
    src = fs.local(lambda r: {(r - 1) % n: 0.5})
    dst = fs.local(lambda r: [(r + 2) % n] if r == 0 and n > 2 else [(r + 1) % n])
    if n > 2:
        _raises_everywhere(ValueError, "topology check failed", fs.neighbor_allreduce, x,
                           self_weight=0.5, src_weights=src, dst_weights=dst)  # fmt: skip
    bad = fs.local(lambda r: {n + 3: 0.5} if r == n - 1 else {(r - 1) % n: 0.5})
    _raises_everywhere(ValueError, "out of range", fs.neighbor_allreduce, x,
                       self_weight=0.5, src_weights=bad, dst_weights=fs.local(
                           lambda r: [(r + 1) % n]))  # fmt: skip
    # the world is still usable afterwards
    _same(fs.neighbor_allreduce(x), fs.local(lambda r: np.ones(3)))
    fs.shutdown()


def case_shapes_that_differ_raise_everywhere():
    fs.init(topology=T.ring_graph)
    n = fs.size()
    if n < 2:
        fs.shutdown()
        return
    x = fs.local(lambda r: np.ones(4 if r == 1 else 3))
    _raises_everywhere(ValueError, "", fs.neighbor_allreduce, x)
    _raises_everywhere(ValueError, "", fs.allreduce, x)
    fs.shutdown()


def case_unknown_and_released_handles():
    fs.init()
    h = fs.neighbor_allreduce_nonblocking(fs.local(lambda r: np.ones(2)))
    fs.wait(h)
    _raises_everywhere(ValueError, "already waited on", fs.wait, h)
    _raises_everywhere(TypeError, "takes a handle", fs.wait, 7)
    fs.shutdown()


def case_global_view_and_main_process():
    fs.init()
    n = fs.size()
    data = _data(n, (2,))
    whole = fs.global_view(fs.local(lambda r: data[r]))
    _same(whole, data, exact=True)
    mains = fs.allreduce(fs.local(lambda r: float(fs.is_main_process())), average=False)
    distributed = np.ndim(fs.rank()) == 0  # one agent per process
    assert np.all(np.asarray(mains) == (1.0 if distributed else n))  # one main process
    fs.shutdown()


def case_torch_tensors_keep_type_and_dtype():
    try:
        import torch
    except ImportError:  # the op tests still run; this case needs the torch extra
        return
    fs.init(topology=T.ring_graph)
    n = fs.size()
    data = _data(n, (3,), np.float32)
    x = fs.local(lambda r: torch.from_numpy(data[r].copy()))
    got = fs.neighbor_allreduce(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    ref = T.ring_graph(n).uniform().to_dense() @ data.astype(np.float64)
    _same(got.numpy(), fs.local(lambda r: ref[r].astype(np.float32)), rtol=1e-6)
    total = fs.allreduce(fs.local(lambda r: torch.ones(2, dtype=torch.float64)), average=False)
    assert isinstance(total, torch.Tensor) and bool((total == n).all())
    fs.shutdown()


CASES = sorted(name for name in dir() if name.startswith("case_"))
