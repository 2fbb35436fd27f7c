"""A stacked-agent script as a fogsim user writes it, from the README and issue 22 only.

``python tests/sharded_client.py N`` simulates N agents in one process;
``mpiexec -n P python -m mpi4py tests/sharded_client.py N`` the same N agents sharded over
P processes, the script unchanged. It runs consensus rounds, weighted steps, per-agent
``src_weights`` steps, allreduce, a broadcast from the last agent and exact diffusion on a
least-squares problem written here by hand. Every process prints one line
``{"held": ...}`` (how many agents it stacks, and which); the main process prints one line
``{"results": ...}`` with every agent's values, gathered by ``fs.global_view``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import fogsim as fs
from fogsim import topology as T

n = int(sys.argv[1])
fs.init(backend="sim", size=n, topology=T.ring_graph)
ranks = fs.rank()
results = {}

# consensus: every agent starts from its own draws, seeded by its rank
x = fs.local(lambda r: np.random.default_rng(r).standard_normal(4))
y = x
for _ in range(30):
    y = fs.neighbor_allreduce(y)
results["consensus"] = fs.global_view(y)

# weighted steps: a lazy ring matrix W[i, j], used as given
W = 0.5 * np.eye(n) + 0.3 * np.roll(np.eye(n), 1, axis=1) + 0.2 * np.roll(np.eye(n), -1, axis=1)
fs.set_topology(W, is_weighted=True)
y = x
for _ in range(5):
    y = fs.neighbor_allreduce(y)
results["weighted"] = fs.global_view(y)

# per-agent weights on the ring, built for this agent with fs.local
fs.set_topology(T.ring_graph(n))
self_weight = fs.local(lambda r: 0.4 + 0.05 * (r % 3))
src_weights = fs.local(lambda r: {(r - 1) % n: 0.35, (r + 1) % n: 0.25 - 0.05 * (r % 3)})
y = x
for _ in range(5):
    y = fs.neighbor_allreduce(y, self_weight=self_weight, src_weights=src_weights)
results["src_weights"] = fs.global_view(y)

results["allreduce"] = fs.global_view(fs.allreduce(x))
results["allreduce_sum"] = fs.global_view(fs.allreduce(x, average=False))
results["broadcast_last"] = fs.global_view(fs.broadcast(x, fs.size() - 1))


# exact diffusion on f(w) = sum_i 1/2 ||A_i w - b_i||^2, agent i holding (A_i, b_i)
def data(r):
    rng = np.random.default_rng(1000 + r)
    A = rng.standard_normal((5, 3))
    return np.concatenate([A, (A @ np.ones(3) + 0.1 * rng.standard_normal(5))[:, None]], axis=1)


Ab = fs.local(data)
A, b = Ab[..., :3], Ab[..., 3]


def grad(w):
    return np.einsum("aji,aj->ai", A, np.einsum("aij,aj->ai", A, w) - b)


H = fs.allreduce(np.einsum("aki,akj->aij", A, A), average=False)[0]
g = fs.allreduce(np.einsum("aki,ak->ai", A, b), average=False)[0]
w_star = np.linalg.solve(H, g)
w = fs.local(lambda r: np.zeros(3))
psi = w
distance = []
for _ in range(60):
    psi_next = w - 0.02 * grad(w)
    phi = psi_next + w - psi
    w = 0.5 * (phi + fs.neighbor_allreduce(phi))
    psi = psi_next
    distance.append(float(np.sqrt(fs.allreduce(np.sum((w - w_star) ** 2, axis=1))[0])))
results["exact_diffusion"] = fs.global_view(w)
results["exact_diffusion_distance"] = np.array(distance)
results["w_star"] = w_star

print(
    json.dumps(
        {
            "held": len(ranks),
            "first": int(ranks[0]),
            "size": fs.size(),
            "main": fs.is_main_process(),
        }
    ),
    flush=True,
)
fs.barrier()  # the results after every process's line
if fs.is_main_process():
    print(json.dumps({"results": {k: np.asarray(v).tolist() for k, v in results.items()}}))
fs.shutdown()
