"""Op test bodies written once, run on every backend (see test_dual_backends.py).

Each ``case_*`` function initializes fogsim with the backend the environment selects
(``FOGSIM_BACKEND=sim FOGSIM_SIZE=n`` in process, or an mpiexec launch), builds
agent-local data with ``fs.local`` and compares with a numpy reference built from the
weight matrix, also through ``fs.local``: in simulation both sides are stacked, under
MPI both are this rank's row. Error cases assert that *every* agent raises.
"""

from __future__ import annotations

import time

import numpy as np

import fogsim as fs
from fogsim import topology as T

# The helpers and the machine-level cases live beside this file; the names are also
# this module's (dual_cases._same, ...), and CASES below counts the imported cases too.
from .dual_cases_machines import *  # noqa: F403
from .dual_cases_machines import _divisors, _machine_reference, _sim_machine_reference  # noqa: F401
from .dual_helpers import _data, _is_mpi, _raises_everywhere, _same


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
                named = fs.neighbor_allreduce(fs.local(lambda r, d=data: d[r]), name="w")
                _same(named, got, exact=True)  # a name only labels the call
    fs.shutdown()


def case_static_src_weights_subset():
    fs.init(topology=T.exponential_two_graph)
    n = fs.size()
    data = _data(n, (4,))
    src = fs.local(lambda r: {(r - 1) % n: 0.25} if n > 1 else {})
    got = fs.neighbor_allreduce(
        fs.local(lambda r: data[r]), self_weight=0.75, src_weights=src, check_weights=n > 1
    )  # one agent: 0.75 alone, on purpose
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
        check_weights=False,  # random weights on purpose: the arithmetic is under test
    )
    ref = np.einsum("ij,j...->i...", np.diag(sw) + R * S, data)
    _same(got, fs.local(lambda r: ref[r]))
    sim = _sim_reference(
        n,
        T.ring_graph(n),
        data,
        self_weight=sw,
        src_weights=src_all,
        dst_weights=dst_all,
        check_weights=False,
    )
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
    values = [
        _data(n, shape, dtype, seed=k)
        for k, (shape, dtype) in enumerate(
            [((3,), np.float64), ((2, 5), np.float32), ((), np.float64), ((7,), np.float32)] * 3
        )
    ]
    handles = [fs.neighbor_allreduce_nonblocking(fs.local(lambda r, v=v: v[r])) for v in values]
    # Polling sends the queue and reports completion. The bound is in seconds,
    # not polls: with 4 ranks on 2 cores a batch can take longer than 100,000
    # fast polls while another rank waits for the core.
    deadline = time.monotonic() + 30.0
    while not fs.poll(handles[0]):
        if time.monotonic() > deadline:
            raise AssertionError("poll() never reported the fused batch as complete in 30 s")
        time.sleep(0)
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
        _raises_everywhere(
            ValueError,
            "topology check failed",
            fs.neighbor_allreduce,
            x,
            self_weight=0.5,
            src_weights=src,
            dst_weights=dst,
        )
    bad = fs.local(lambda r: {n + 3: 0.5} if r == n - 1 else {(r - 1) % n: 0.5})
    # every backend names the argument and the rank (the simulator also the agent, as an index)
    _raises_everywhere(
        ValueError,
        ("src_weights", f"rank {n + 3} is out of range"),
        fs.neighbor_allreduce,
        x,
        self_weight=0.5,
        src_weights=bad,
        dst_weights=fs.local(lambda r: [(r + 1) % n]),
    )
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
    # every backend names both shapes: the simulator cannot stack the agents' values, SPMD
    # agents and MPI/torch ranks compare theirs first
    _raises_everywhere(ValueError, ("(4,)", "(3,)"), fs.neighbor_allreduce, x)
    _raises_everywhere(ValueError, ("(4,)", "(3,)"), fs.neighbor_allreduce, x, name="x")
    _raises_everywhere(ValueError, ("(4,)", "(3,)"), fs.allreduce, x)
    # the same bytes as another dtype: the data would pass, the agreement does not
    y = fs.local(lambda r: np.ones(4, np.float32) if r == 0 else np.ones(2))
    _raises_everywhere(ValueError, ("(4,)", "(2,)"), fs.neighbor_allreduce, y)
    for big in (0, n - 1):  # a rank sends far more than its neighbor expects, then less
        z = fs.local(lambda r, b=big: np.ones(10_000 if r == b else 1))
        _raises_everywhere(ValueError, ("(10000,)", "(1,)"), fs.neighbor_allreduce, z)
    ones = fs.local(lambda r: np.ones(3))
    _same(fs.neighbor_allreduce(ones), ones)  # the world still works
    if _is_mpi():  # queued calls: the refused batch fails every handle in it, on every rank
        good = fs.neighbor_allreduce_nonblocking(np.ones(2))
        bad = fs.neighbor_allreduce_nonblocking(x)
        _raises_everywhere(ValueError, "ranks disagree", fs.wait, bad)
        _raises_everywhere(ValueError, "ranks disagree", fs.wait, good)
    fs.shutdown()


def case_unknown_and_released_handles():
    fs.init()
    h = fs.neighbor_allreduce_nonblocking(fs.local(lambda r: np.ones(2)))
    fs.wait(h)
    _raises_everywhere(ValueError, "already waited on", fs.wait, h)
    _raises_everywhere(TypeError, "wait() takes a handle from", fs.wait, 7)
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


# -- one-sided window ops (lock-step: a barrier after every op, so MPI equals the simulator's
# default schedule, where every agent is active and messages arrive at once) ---------------
def _window_script():
    """A fixed sequence of window ops; returns what it observed (stacked in simulation)."""
    n = fs.size()
    topo = T.exponential_two_graph(n)
    data = _data(n, (2, 3), seed=11)
    x = fs.local(lambda r: data[r].copy())
    seen = {}
    fs.win_create(x, "w")
    seen["create_update"] = np.array(fs.win_update("w", clone=True))
    fs.barrier()  # under MPI a fast neighbor's put must not land before this update
    fs.win_put(x, "w")
    fs.barrier()
    seen["put_versions"] = fs.get_win_version("w")
    seen["put_update"] = np.array(fs.win_update("w", clone=True))
    fs.barrier()
    half = fs.local(lambda r: {int(j): 0.5 for j in topo.out_neighbors(r)})
    fs.win_accumulate(x, "w", self_weight=0.25, dst_weights=half)
    fs.barrier()
    seen["acc_collect"] = np.array(fs.win_update_then_collect("w")).copy()
    fs.barrier()
    twice = fs.local(lambda r: {int(j): 2.0 for j in topo.in_neighbors(r)})
    fs.win_get("w", src_weights=twice)
    fs.barrier()
    seen["get_versions"] = fs.get_win_version("w")
    fs.barrier()
    ones = fs.local(lambda r: {int(j): 1.0 for j in topo.in_neighbors(r)})
    zero = fs.local(lambda r: 0.0)
    seen["get_update"] = np.array(
        fs.win_update("w", self_weight=zero, neighbor_weights=ones, reset=True, clone=True)
    )
    seen["after_reset"] = np.array(fs.win_update("w", clone=True))
    seen["names"] = fs.win_names()
    fs.win_free("w")
    seen["names_after"] = fs.win_names()
    return data, seen


def case_window_ops_match_numpy_and_the_simulator():
    fs.init(topology=T.exponential_two_graph)
    n = fs.size()
    data, seen = _window_script()
    W = T.exponential_two_graph(n).uniform().to_dense()
    A = (W > 0) & ~np.eye(n, dtype=bool)  # A[i, j]: j -> i
    # create: every buffer holds the agent's own value, so the update returns it
    _same(seen["create_update"], fs.local(lambda r: data[r]))
    # put: the buffers hold the in-neighbors' values: the update is W x
    ref_put = np.einsum("ij,j...->i...", W, data)
    _same(seen["put_update"], fs.local(lambda r: ref_put[r]))
    ins = [np.flatnonzero(A[i]).tolist() for i in range(n)]
    _same_dicts(seen["put_versions"], fs.local(lambda r: {j: 1 for j in ins[r]}))
    # accumulate 0.5 x onto the put values, x *= 0.25, then collect: x + every buffer
    acc = 0.25 * data + np.einsum("ij,j...->i...", A * 1.5, data)
    _same(seen["acc_collect"], fs.local(lambda r: acc[r]))
    # get 2 x the neighbors' exposed values (after their collect), combine with weight 1
    got = np.einsum("ij,j...->i...", A * 2.0, acc)
    _same(seen["get_update"], fs.local(lambda r: got[r]))
    _same_dicts(seen["get_versions"], fs.local(lambda r: {j: 1 for j in ins[r]}))
    # reset zeroed the buffers: the default update is the self term alone
    self_w = np.diag(W)
    _same(seen["after_reset"], fs.local(lambda r: self_w[r] * acc[r]))
    assert seen["names"] == ["w"] and seen["names_after"] == []
    # bit for bit the simulator's numbers
    with fs.Context(backend="sim", size=n, topology=T.exponential_two_graph) as world:
        _, sim = _window_script()
    world.close()
    for key in ("create_update", "put_update", "acc_collect", "get_update", "after_reset"):
        _same(seen[key], fs.local(lambda r, k=key: sim[k][r]), exact=True)
    fs.shutdown()


def _same_dicts(got, want):
    got = got if isinstance(got, list) else [got]
    want = want if isinstance(want, list) else [want]
    assert got == want, (got, want)


def _push_sum_window(builder, name, seed, dim):
    """Start push-sum on a window: return (n, data, x, keep share, out-neighbor shares)."""
    fs.init(topology=builder)
    n = fs.size()
    topo = builder(n)
    data = _data(n, (dim,), seed=seed)
    fs.set_win_ops_with_associated_p(True)
    x = fs.local(lambda r: data[r].copy())
    fs.win_create(x, name, zero_init=True)

    def share_of(r):
        return 1.0 / (len(topo.out_neighbors(r)) + 1)

    dst = fs.local(lambda r: dict.fromkeys(topo.out_neighbors(r), share_of(r)))
    return n, data, x, fs.local(share_of), dst


def case_push_sum_with_windows_conserves_mass():
    n, data, x, share, dst = _push_sum_window(T.exponential_two_graph, "ps", seed=3, dim=4)
    mass = fs.local(lambda r: np.array([float(n)]))
    for _ in range(60):
        fs.win_accumulate(x, "ps", self_weight=share, dst_weights=dst, require_mutex=True)
        fs.barrier()
        fs.win_update_then_collect("ps")
        fs.barrier()
        p = np.asarray(fs.win_associated_p("ps"))[..., None]  # (1,) per agent
        _same(fs.allreduce(p, average=False), mass, rtol=1e-12)
    _same(x / p, fs.local(lambda r: data.mean(axis=0)), rtol=1e-10)
    fs.win_free()
    fs.set_win_ops_with_associated_p(False)
    fs.shutdown()


def case_window_bad_input_raises():
    fs.init(topology=T.ring_graph)
    n = fs.size()
    x = fs.local(lambda r: np.zeros(3))
    _raises_everywhere(ValueError, "no window 'nope'", fs.win_update, "nope")
    fs.win_create(x, "a")
    _raises_everywhere(ValueError, "a window named 'a' exists already", fs.win_create, x, "a")
    _raises_everywhere(
        ValueError, "set_topology: windows ['a'] exist", fs.set_topology, T.exponential_two_graph
    )
    if n >= 4:  # on a ring of 4 or more, agent r + 2 is no neighbor
        far = fs.local(lambda r: {(r + 2) % n: 1.0})
        message = _raises_everywhere(
            ValueError, "which is not an out-neighbor", fs.win_put, x, "a", dst_weights=far
        )
        assert "win_put: dst_weights" in message, message
        message = _raises_everywhere(
            ValueError, "which is not an in-neighbor", fs.win_get, "a", src_weights=far
        )
        assert "win_get: src_weights" in message, message
    _raises_everywhere(
        TypeError, "require_mutex must be a bool", fs.win_put, x, "a", require_mutex=1
    )
    _raises_everywhere(
        ValueError,
        "give self_weight and neighbor_weights together",
        fs.win_update,
        "a",
        self_weight=0.5,
    )
    fs.win_free()
    assert fs.win_names() == []
    fs.shutdown()


def case_window_mutex_excludes_concurrent_holders():
    import time

    fs.init(topology=T.fully_connected_graph)
    x = fs.local(lambda r: np.zeros(2))
    fs.win_create(x, "m")
    spans = []
    for _ in range(3):  # every agent takes agent 0's mutex and holds it for a moment
        with fs.win_mutex("m", ranks=[0]):
            start = time.monotonic()
            time.sleep(0.01)
            spans.append((start, time.monotonic()))
    with fs.win_mutex("m", for_self=True):
        pass
    if _is_mpi():  # the simulator runs every op atomically; nothing can overlap there
        every = fs.allgather(np.array(spans))  # (n * 3, 2): monotonic clock of one host
        order = np.argsort(every[:, 0], kind="stable")
        starts, ends = every[order, 0], every[order, 1]
        assert np.all(starts[1:] >= ends[:-1]), "two agents held agent 0's mutex at once"
    fs.win_free()
    fs.shutdown()


def case_push_sum_with_a_straggler_finishes_and_conserves_mass():
    import time

    n, data, x, share, dst = _push_sum_window(T.ring_graph, "s", seed=9, dim=3)
    slow = fs.rank() == n - 1 if _is_mpi() else False  # under MPI the last rank is 20x slower
    for _ in range(40):
        fs.win_accumulate(x, "s", self_weight=share, dst_weights=dst, require_mutex=True)
        if slow:
            time.sleep(0.002)
        fs.win_update_then_collect("s")
    fs.barrier()
    fs.win_update_then_collect("s")
    p = np.asarray(fs.win_associated_p("s"))[..., None]
    _same(fs.allreduce(p, average=False), fs.local(lambda r: np.array([float(n)])), rtol=1e-12)
    total = fs.allreduce(x, average=False)
    _same(total, fs.local(lambda r: data.sum(axis=0)), rtol=1e-12)
    fs.win_free()
    fs.set_win_ops_with_associated_p(False)
    fs.shutdown()


def _mean_problems(n):
    """(label, topology, is_weighted) of the column-stochastic rules on fixed random graphs.

    max_degree_weights is left to tests/test_weights_exact.py: on a symmetric pattern it
    takes the path of metropolis_hastings_weights (symmetric CSR, self weight as the pivot),
    and a fifth 10**4-step run would double the job's time on a loaded machine.
    """
    rng = np.random.default_rng(17)
    cycle = np.roll(np.eye(n), 1, axis=0) if n > 1 else np.zeros((1, 1))
    undirected = np.triu(rng.random((n, n)) < 0.6, 1)
    undirected = np.maximum(undirected | undirected.T, np.maximum(cycle, cycle.T))
    directed = np.maximum(rng.random((n, n)) < 0.4, cycle) * (1 - np.eye(n))
    return [
        ("uniform 1/(d+1) (is_weighted=False)", T.ring_graph(n), False),
        ("metropolis_hastings_weights", T.metropolis_hastings_weights(undirected), True),
        ("doubly_stochastic", T.doubly_stochastic(directed), True),
        ("column_normalize", T.column_normalize(directed + np.eye(n)), True),
    ]


def _consensus_steps(x, steps):
    for _ in range(steps):
        x = fs.neighbor_allreduce(x)
    return x


def case_weight_rules_preserve_the_mean_over_10k_steps():
    """Exact weights (issue 17.10): the mean moves by at most 8 n ulps in 10**4 steps, and
    the distributed result is the simulator's bit for bit (tests/test_weights_exact.py has
    the property over random graphs)."""
    import math

    fs.init()
    n = fs.size()
    x0 = 1.0 + np.random.default_rng(3).random((n, 4))
    steps = 10_000
    for label, topo, weighted in _mean_problems(n):
        fs.set_topology(topo, is_weighted=weighted)
        x = _consensus_steps(fs.local(lambda r: x0[r]), steps)
        every = np.asarray(fs.global_view(x))
        for c in range(x0.shape[1]):
            m0 = math.fsum(x0[:, c]) / n
            drift = abs(math.fsum(every[:, c]) / n - m0) / np.spacing(m0)
            assert drift <= 8 * n, (label, c, drift)
        _same(fs.allreduce(x), fs.local(lambda r, e=every: e.mean(axis=0)), rtol=1e-14)
        with fs.Context(backend="sim", size=n) as world:
            fs.set_topology(topo, is_weighted=weighted)
            sim = _consensus_steps(x0, steps)
        world.close()
        _same(x, fs.local(lambda r, s=sim: s[r]), exact=True)
    fs.shutdown()


CASES = sorted(name for name in dir() if name.startswith("case_"))
