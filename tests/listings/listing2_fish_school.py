# ruff: noqa: E402, I001, B007, UP032  (the listing's code is kept as printed)
"""BlueFog paper, Listing 2: a school of fish, partial averaging over a time-varying graph.

Each fish (agent) sees the fish within ``threshold`` of it; its neighborhood changes as
the fish move, and the listing sets Metropolis-Hastings weights for it at every step and
averages with ``src_weights`` only (pull style over the fully connected topology). The
listing is a fragment; the harness supplies what it calls: the locations of all fish
(``loc_map``), the neighbor and weight rules, a noisy observation of the predator at
``w_star``, the estimate's gradient and the fish's moves.

As printed, the listing's averaging step combines ``x`` (the fish's locations) where the
text (the estimate ``w`` of the predator) suggests ``w``: ``w = bf.neighbor_allreduce(x,
...)`` overwrites the gradient step just taken. It runs as printed (BlueFog would run it
the same way), so the fish average their locations and school together. The check after
it: at every step each fish's ``w`` was the Metropolis-Hastings average of its current
neighbors' locations (computed from the locations every fish reported), the
neighborhoods changed over time, and the school's spread shrank.
"""

import torch
from _harness import report

import fogsim.compat.bluefog as bf
from fogsim.compat.bluefog import topology_util

bf.init()
bf.set_topology(topology_util.FullyConnectedGraph(bf.size()))  # any neighborhood can form
gen = torch.Generator().manual_seed(7 + bf.rank())
x = torch.tensor([1.5 * bf.rank(), 0.0], dtype=torch.double)  # in a line, 1.5 apart
x += 0.2 * torch.rand(2, generator=gen, dtype=torch.double)
v = torch.zeros(2, dtype=torch.double)                         # velocity
w = torch.zeros(2, dtype=torch.double)                         # predator estimate
w_star = torch.tensor([6.0, 6.0], dtype=torch.double)
threshold, gamma, maxite = 3.2, 0.1, 150  # a fish sees two fish on either side
escap_cond, encircle_cond = False, True                        # this school encircles
loc_map: dict[int, torch.Tensor] = {}                          # rank -> location, this step
seen: list[tuple[frozenset, float]] = []                       # (neighborhood, w error)


def get_neighbor_ranks(x, loc_map, threshold):
    """Return the fish within ``threshold`` of x and their own neighbor counts.

    Every fish reports its location (an allgather) into ``loc_map``.
    """
    locs = bf.allgather(x.reshape(1, 2))
    loc_map.clear()
    loc_map.update(enumerate(locs))
    close = torch.cdist(locs, locs) <= threshold
    degrees = close.sum(dim=1) - 1
    me = bf.rank()
    nb_ranks = [j for j in range(bf.size()) if j != me and bool(close[me, j])]
    return nb_ranks, [int(degrees[j]) for j in nb_ranks]


def get_mh_weights(nb_ranks, nb_degrees, rank):
    """Metropolis-Hastings: ``w_ij = 1 / (1 + max(d_i, d_j))``, the rest on oneself."""
    src_weights = {j: 1.0 / (1 + max(len(nb_ranks), d)) for j, d in zip(nb_ranks, nb_degrees)}
    return 1.0 - sum(src_weights.values()), src_weights


def get_dist_and_direct(x, w_star):
    """A noisy distance to the predator and the direction from it to the fish."""
    u = (x - w_star) / (x - w_star).norm()
    return (x - w_star).norm() + 0.01 * torch.randn((), generator=gen, dtype=x.dtype), u


def cal_grad(x, w, d, u):
    """Gradient in w of ``(d - u^T (x - w))^2 / 2``."""
    return (d - u.dot(x - w)) * u


def escape(x, v, w):
    """Swim away from w."""
    v = 0.5 * v + 0.2 * (x - w) / (x - w).norm()
    return x + v, v


def encircle(x, v, w):
    """Swim towards w; record how far w is from the MH average of the neighbors."""
    want = self_weight * loc_map[bf.rank()] + sum(s * loc_map[j] for j, s in src_weights.items())
    seen.append((frozenset(src_weights), float((w - want).abs().max())))
    v = 0.5 * v + 0.3 * (w - x)
    return x + v, v


spread0 = float(bf.allreduce((x - bf.allreduce(x)).norm().reshape(1)))

# --- listing 2 as printed ---
# x: self location; v: self velocity; w: predator location;
for k in range(maxite):
    ...
    nb_ranks, nb_degrees = get_neighbor_ranks(x, loc_map, threshold)
    # Set topology weights according to Metropolis-Hastings Rule.
    self_weight, src_weights = get_mh_weights(nb_ranks, nb_degrees, bf.rank())
    # observe noisy dist and direct to predator
    # w_star is a predefined predator’s position
    # w_star can change with time
    d, u = get_dist_and_direct(x, w_star)
    # estimate predator’s position w with D-SGD
    grad = cal_grad(x, w, d, u)
    w = w - gamma * grad
    # Pull-style neighbor communication
    w = bf.neighbor_allreduce(x, self_weight=self_weight, src_weights=src_weights)
    # take escape or encircle actions
    # location and velocity will get changed
    if escap_cond:
        x, v = escape(x, v, w)
    elif encircle_cond:
        x, v = encircle(x, v, w)
# --- end of listing ---

spread = float(bf.allreduce((x - bf.allreduce(x)).norm().reshape(1)))
neighborhoods = len({nb for nb, _ in seen})
changed = int(bf.allreduce(torch.tensor([float(neighborhoods > 1)]), average=False))
if not (changed > 0 and spread < 0.5 * spread0):
    raise AssertionError(f"{changed} fish saw their neighborhood change; spread {spread0:.3f}"
                         f" -> {spread:.3f}")
if bf.rank() == 0:
    print(f"fish whose neighborhood changed: {changed}; spread {spread0:.3f} -> {spread:.3f}")
report(x, "mh_average_err", max(err for _, err in seen), 1e-12)
