"""Machine-level op test bodies (part of dual_cases.py, see there): run on every backend."""

from __future__ import annotations

import numpy as np

import fogsim as fs
from fogsim import topology as T

from .dual_helpers import _data, _raises_everywhere, _same


# -- machine level ------------------------------------------------------------------------
def _divisors(n):
    return [k for k in range(1, n + 1) if n % k == 0]


def _machine_reference(data, k, W):
    """Every agent of machine m: sum_l W[m, l] * (average of machine l's values)."""
    n = data.shape[0]
    means = data.reshape(n // k, k, *data.shape[1:]).mean(axis=1)
    return np.repeat(np.einsum("ml,l...->m...", W, means), k, axis=0)


def _sim_machine_reference(n, k, data, call):
    """``call()``'s result in a private simulated world of n agents, machines of k."""
    with fs.Context(backend="sim", size=n, local_size=k) as world:
        result = call(data)
    world.close()
    return result


def case_machine_queries():
    n = fs.init().backend.size_int
    fs.shutdown()
    for k in _divisors(n):
        fs.init(local_size=k)
        m = n // k
        assert fs.local_size() == k and fs.machine_size() == m
        _same(fs.machine_rank(), fs.local(lambda r, k=k: r // k), exact=True)
        _same(fs.local_rank(), fs.local(lambda r, k=k: r % k), exact=True)
        topo = fs.load_machine_topology()
        assert topo.size == m
        assert fs.in_neighbor_machine_ranks() == fs.local(
            lambda r, k=k, t=topo: t.in_neighbors(r // k)
        )
        fs.set_machine_topology(T.ring_graph)
        assert fs.out_neighbor_machine_ranks() == fs.local(
            lambda r, k=k, m=m: T.ring_graph(m).out_neighbors(r // k)
        )
        fs.shutdown()


def case_hierarchical_neighbor_allreduce_matches_reference_and_simulator():
    n = fs.init().backend.size_int
    fs.shutdown()
    data = _data(n, (3, 2))
    for k in _divisors(n):
        m = n // k
        fs.init(local_size=k)
        x = fs.local(lambda r: data[r])
        # the default machine topology: exponential-2 over machines, uniform weights
        got = fs.hierarchical_neighbor_allreduce(x)
        ref = _machine_reference(data, k, T.exponential_two_graph(m).uniform().to_dense())
        _same(got, fs.local(lambda r, ref=ref: ref[r]))
        sim = _sim_machine_reference(n, k, data, fs.hierarchical_neighbor_allreduce)
        _same(got, fs.local(lambda r, s=sim: s[r]), exact=True)
        _same(fs.wait(fs.hierarchical_neighbor_allreduce_nonblocking(x)), got, exact=True)
        # a weighted machine topology
        rng = np.random.default_rng(k)
        W = (T.ring_graph(m).to_dense() != 0) * rng.random((m, m))
        W /= W.sum(axis=1, keepdims=True)
        fs.set_machine_topology(W, is_weighted=True)
        assert fs.is_machine_topology_weighted()
        got = fs.hierarchical_neighbor_allreduce(x)
        ref = _machine_reference(data, k, W)
        _same(got, fs.local(lambda r, ref=ref: ref[r]))

        def weighted(d, W=W):
            fs.set_machine_topology(W, is_weighted=True)
            return fs.hierarchical_neighbor_allreduce(d)

        sim = _sim_machine_reference(n, k, data, weighted)
        _same(got, fs.local(lambda r, s=sim: s[r]), exact=True)
        # a dynamic step: machine l sends to l + 1 (scaled by 2) and keeps 0.5 of its own
        src = fs.local(lambda r, m=m, k=k: {(r // k - 1) % m: 0.25} if m > 1 else {})
        dst = fs.local(lambda r, m=m, k=k: {(r // k + 1) % m: 2.0} if m > 1 else {})
        got = fs.hierarchical_neighbor_allreduce(
            x, self_weight=0.5, src_machine_weights=src, dst_machine_weights=dst
        )
        Wd = 0.5 * np.eye(m) + (0.5 * np.roll(np.eye(m), -1, axis=1) if m > 1 else 0)
        ref = _machine_reference(data, k, Wd)
        _same(got, fs.local(lambda r, ref=ref: ref[r]))
        fs.shutdown()


def case_local_and_decomposed_allreduce():
    n = fs.init().backend.size_int
    fs.shutdown()
    data = _data(n, (4, 3))
    for k in _divisors(n):
        fs.init(local_size=k)
        x = fs.local(lambda r: data[r])
        grid = data.reshape(n // k, k, 4, 3)
        local_mean = np.repeat(grid.mean(axis=1), k, axis=0)
        _same(fs.allreduce(x, is_hierarchical_local=True), fs.local(lambda r, m=local_mean: m[r]))
        local_sum = np.repeat(grid.sum(axis=1), k, axis=0)
        _same(
            fs.allreduce(x, average=False, is_hierarchical_local=True),
            fs.local(lambda r, s=local_sum: s[r]),
        )
        for factors in [None, (n,), (k, n // k), (n // k, k), (1, n, 1)]:
            got = fs.allreduce(x, algorithm="decomposed", factors=factors)
            _same(got, fs.local(lambda r: data.mean(axis=0)))
            sim = _sim_machine_reference(
                n, k, data, lambda d, f=factors: fs.allreduce(d, algorithm="decomposed", factors=f)
            )
            _same(got, fs.local(lambda r, s=sim: s[r]), exact=True)
        ints = fs.local(lambda r: np.arange(5) * (r + 1))
        _same(
            fs.allreduce(ints, average=False, factors=(k, n // k)),
            fs.local(lambda r: np.arange(5) * n * (n + 1) // 2),
            exact=True,
        )
        fs.shutdown()


def case_machine_level_bad_input_raises_everywhere():
    fs.init()
    n = fs.size()
    x = fs.local(lambda r: np.ones(3))
    _raises_everywhere(
        ValueError,
        f"multiply to {n + 1}",
        fs.allreduce,
        x,
        algorithm="decomposed",
        factors=(n + 1,),
    )
    _raises_everywhere(ValueError, "factors[0] = 0", fs.allreduce, x, factors=(0, n))
    _raises_everywhere(TypeError, "factors must be a sequence", fs.allreduce, x, factors=n)
    _raises_everywhere(
        ValueError,
        "algorithm must be None, 'flat' or 'decomposed', got 'tree'",
        fs.allreduce,
        x,
        algorithm="tree",
    )
    _raises_everywhere(
        ValueError,
        "is_hierarchical_local=True reduces within",
        fs.allreduce,
        x,
        is_hierarchical_local=True,
        algorithm="decomposed",
    )
    _raises_everywhere(
        TypeError,
        "is_weighted must be a bool",
        fs.set_machine_topology,
        T.ring_graph,
        is_weighted=1,
    )
    _raises_everywhere(
        ValueError,
        f"machine topology has {n + 1} nodes but there are 1 machines",
        fs.set_machine_topology,
        T.ring_graph(n + 1),
    )
    fs.shutdown()
    fs.init(local_size=1)
    if n >= 3:  # one machine per agent: name a machine that is not an in-neighbor
        fs.set_machine_topology(T.ring_graph(n, style="right"))
        bad = fs.local(lambda r: {(r + 1) % n: 0.5})
        message = _raises_everywhere(
            ValueError,
            "src_machine_weights[0] names machine",
            fs.hierarchical_neighbor_allreduce,
            x,
            self_weight=0.5,
            src_machine_weights=bad,
        )
        assert "machine" in message and "rank" not in message, message
    fs.hierarchical_neighbor_allreduce(x)  # still usable afterwards
    fs.shutdown()


__all__ = sorted(name for name in dir() if name.startswith("case_"))  # for dual_cases
