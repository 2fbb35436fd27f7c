"""Heterogeneous data across agents: two published effects, reproduced on scikit-learn's digits.

The digits (1797 images of 8 x 8 pixels, 10 classes; bundled with scikit-learn, no download)
are split over 16 agents with Dirichlet label skew (:func:`fogsim.data.dirichlet`, Hsu et
al. 2019): ``alpha = 0.1`` leaves each agent mostly one or two digits, ``alpha = 10`` is
close to an even mix. Two runs, each a function of one configuration so that
:func:`fogsim.experiments.sweep` can run a grid of them (over seeds, in parallel, cached):

* :func:`optimum_run`: ridge least squares (predict whether the digit is odd, ``+1`` or
  ``-1``, from the standardized pixels and a bias; each agent's objective is its samples'
  squared error plus ``ridge ||x||^2``) on a ring, by decentralized gradient descent,
  gradient tracking or exact diffusion, at one step size. The exact optimum is computed
  centrally (:meth:`fogsim.algorithms.LeastSquares.solution`). DGD stops at a distance
  from it that grows with the heterogeneity (Yuan, Ling and Yin 2016: its fixed point is
  biased by the spread of the local gradients); gradient tracking and exact diffusion
  converge to it at every ``alpha`` (Nedic, Olshevsky and Shi 2017; Yuan et al. 2019).
* :func:`dsgd_run`: multinomial logistic regression trained by decentralized SGD
  (adapt then combine, 16 samples a step from each agent's own shard through
  :class:`fogsim.data.AgentLoader`) over a ring, exponential-2, one-peer exponential-2
  or a fully connected graph; each agent's model is scored on held-out digits. The
  sparser the graph, the more accuracy the label skew costs (Hsieh et al. 2020;
  Koloskova et al. 2020).

``examples/heterogeneity.py`` sweeps both grids and prints the tables; notebook 08 draws them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import numpy as np

import fogsim as fs
from fogsim import algorithms as A
from fogsim import data
from fogsim import topology as T
from fogsim.experiments import world

__all__ = [
    "AGENTS",
    "OPTIMUM",
    "SGD",
    "TOPOLOGIES",
    "digits",
    "dsgd_run",
    "optimum_run",
    "split",
]

#: Agents of every run.
AGENTS = 16
#: :func:`optimum_run`'s defaults: iterations, step size, ridge weight.
OPTIMUM = {"iters": 2000, "step": 1e-4, "ridge": 100.0}
#: :func:`dsgd_run`'s defaults: steps, step size, samples a step, held-out digits.
SGD = {"steps": 100, "lr": 2.0, "batch": 16, "test": 450}
#: The graphs of :func:`dsgd_run` (the one-peer schedule is a new graph each step).
TOPOLOGIES = ("ring", "exp2", "one-peer", "full")

_ALGORITHMS: dict[str, Callable[..., A.Result]] = {
    "dgd": A.dgd,
    "gradient_tracking": A.gradient_tracking,
    "exact_diffusion": A.exact_diffusion,
}


@cache
def digits() -> tuple[np.ndarray, np.ndarray]:
    """The digits' standardized pixels with a bias column (the 3 pixels that never vary
    left out), and their labels."""
    ds = data.load("digits", standardize=True)
    assert ds.X is not None  # a data set of arrays (not a torch data set's samples)
    varies = ds.X.std(axis=0) > 0
    features = np.concatenate([ds.X[:, varies], np.ones((len(ds.y), 1))], axis=1)
    return features, ds.y


def split(labels: np.ndarray, alpha: float, seed: int) -> data.Partition:
    """The Dirichlet split of ``labels`` over :data:`AGENTS` agents."""
    return data.dirichlet(labels, AGENTS, alpha, seed=seed)


def _config(
    config: Mapping[str, Any], defaults: Mapping[str, Any], needed: tuple[str, ...]
) -> dict[str, Any]:
    missing = [k for k in needed if k not in config]
    if missing:
        raise ValueError(f"config needs {', '.join(missing)}; got {sorted(config)}")
    unknown = sorted(set(config) - set(needed) - set(defaults))
    if unknown:
        raise ValueError(
            f"config has unknown keys {unknown}; known: {sorted({*needed, *defaults})}"
        )
    return {**defaults, **config}


def optimum_run(config: Mapping[str, Any]) -> dict[str, Any]:
    """Ridge least squares on the split digits; returns the distance to the exact optimum.

    ``config``: ``algorithm`` (``"dgd"``, ``"gradient_tracking"``, ``"exact_diffusion"``),
    ``alpha`` (the Dirichlet concentration), ``seed``; optionally ``iters``, ``step``,
    ``ridge`` (:data:`OPTIMUM`). Returns ``distance`` (per iteration,
    ``sqrt(mean_i ||x_i - x*||^2) / ||x*||``), ``||x*||`` as ``optimum``, and the split's
    mean total-variation distance to the global label mix, ``tv``.
    """
    c = _config(config, OPTIMUM, ("algorithm", "alpha", "seed"))
    if c["algorithm"] not in _ALGORITHMS:
        raise ValueError(f"algorithm must be one of {sorted(_ALGORITHMS)}, got {c['algorithm']!r}")
    features, labels = digits()
    part = split(labels, c["alpha"], c["seed"])
    target = np.where(labels % 2 == 1, 1.0, -1.0)
    d = features.shape[1]
    rows = int(part.sizes.max()) + d  # every agent padded to as many rows: zero rows add nothing
    ridge = np.sqrt(c["ridge"]) * np.eye(d)

    def agent(r: int) -> np.ndarray:
        mine = part[r]
        both = np.zeros((rows, d + 1))
        both[: len(mine), :d] = features[mine]
        both[: len(mine), d] = target[mine]
        both[len(mine) : len(mine) + d, :d] = ridge  # ridge ||x||^2 as d rows of sqrt(ridge) I
        return both

    with world(AGENTS, T.ring_graph, seed=c["seed"]):
        both = fs.local(agent)
        problem = A.LeastSquares(both[..., :d], both[..., d])
        optimum = float(np.linalg.norm(problem.solution()[0]))
        result = _ALGORITHMS[c["algorithm"]](problem, c["step"], c["iters"])
    distance = np.asarray(result.history["distance"]) / optimum
    return {"distance": distance, "optimum": optimum, "tv": part.report(labels).mean_tv}


def _graph(topology: str) -> Any:
    builders = {
        "ring": T.ring_graph,
        "exp2": T.exponential_two_graph,
        "one-peer": T.exponential_two_graph,  # the world's; each step passes its own
        "full": T.fully_connected_graph,
    }
    if topology not in builders:
        raise ValueError(f"topology must be one of {TOPOLOGIES}, got {topology!r}")
    return builders[topology]


def dsgd_run(config: Mapping[str, Any]) -> dict[str, Any]:
    """Decentralized SGD of a multinomial logistic regression on the split digits.

    ``config``: ``topology`` (one of :data:`TOPOLOGIES`), ``alpha``, ``seed``; optionally
    ``steps``, ``lr``, ``batch``, ``test`` (:data:`SGD`). The seed draws the held-out
    digits, the split and each agent's batches. Each step every agent takes a gradient
    step on its own batch and averages with its neighbors (adapt then combine). Returns
    ``accuracy`` (the agents' models' mean accuracy on the held-out digits, before each
    step and after the last), ``worst`` (the worst agent's at the end) and the split's ``tv``.
    """
    c = _config(config, SGD, ("topology", "alpha", "seed"))
    builder = _graph(c["topology"])
    features, labels = digits()
    order = np.random.default_rng(np.random.SeedSequence(c["seed"], spawn_key=(8,))).permutation(
        len(labels)
    )
    test, train = order[: c["test"]], order[c["test"] :]
    part = split(labels[train], c["alpha"], c["seed"])
    shards = [train[p] for p in part]
    classes, b = int(labels.max()) + 1, int(c["batch"])
    accuracy = []
    with world(AGENTS, builder, seed=c["seed"]):
        loader = data.AgentLoader((features, labels), shards, b, seed=c["seed"])
        schedule = T.one_peer_exponential_two(AGENTS) if c["topology"] == "one-peer" else None
        w = np.zeros((AGENTS, features.shape[1], classes))
        agents, rows = np.arange(AGENTS)[:, None], np.arange(b)[None, :]
        for t in range(c["steps"] + 1):
            scores = np.einsum("td,ndk->ntk", features[test], w)
            right = scores.argmax(axis=-1) == labels[test]
            accuracy.append(float(right.mean()))
            if t == c["steps"]:
                break
            xb, yb = loader.next()
            logits = np.einsum("nbd,ndk->nbk", xb, w)
            p = np.exp(logits - logits.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            p[agents, rows, yb] -= 1.0  # softmax minus one-hot: the logits' gradient
            w = w - c["lr"] * np.einsum("nbd,nbk->ndk", xb, p) / b
            if schedule is None:
                w = fs.neighbor_allreduce(w)
            else:
                w = fs.neighbor_allreduce(w, src_weights=next(schedule).weights)
        worst = float(right.mean(axis=1).min())
    return {
        "accuracy": np.asarray(accuracy),
        "worst": worst,
        "tv": part.report(labels[train]).mean_tv,
    }
