"""Seeded partitioners: which samples of a data set each of ``n`` agents holds.

Every partitioner computes the whole split from its seed on every process (it costs a few
vectorized passes over the labels), so agent r's samples never depend on how agents are
laid out over processes. The split is built as one *owner* array (sample -> agent) and
cut into per-agent index arrays, sorted ascending.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, overload

import numpy as np
import numpy.typing as npt

from ._checks import as_labels, check_count, check_n_samples, check_positive, check_weights

if TYPE_CHECKING:
    from ._report import Report

__all__ = ["Partition", "dirichlet", "iid", "pathological", "size_skew"]

# One stream per scheme: the same seed gives unrelated draws in iid and dirichlet.
_STREAM = {"iid": 1, "dirichlet": 2, "pathological": 3, "size_skew": 4}


class Partition(Sequence[np.ndarray]):
    """Disjoint sets of sample indices, one per agent: ``partition[r]`` is agent r's.

    Parameters
    ----------
    indices : sequence of array_like
        One array of sample indices per agent (integers in ``[0, n_samples)``); no sample
        may appear twice, within an agent or across agents. Samples held by no agent are
        allowed (a partition of part of a data set).
    n_samples : int
        The number of samples of the data set indexed.
    scheme : str, optional
        A short description of how the split was made, with its parameters.
    allow_empty : bool, optional
        Accept agents holding no sample (by default an empty agent raises a ValueError
        naming it).

    Notes
    -----
    Each agent's indices are an int64 array **sorted ascending** and read-only; a loader
    shuffles them itself. ``len(partition)`` is the number of agents.
    """

    def __init__(
        self,
        indices: Iterable[npt.ArrayLike],
        n_samples: int,
        scheme: str = "custom",
        *,
        allow_empty: bool = False,
    ) -> None:
        n_samples = check_count(n_samples, "n_samples", minimum=0)
        if not isinstance(scheme, str):
            raise TypeError(f"scheme must be a str, got {type(scheme).__name__}")
        parts: list[np.ndarray] = []
        for r, idx in enumerate(indices):
            a = np.asarray(idx)
            if a.size == 0:
                a = a.astype(np.int64).reshape(0)
            if a.ndim != 1:
                raise ValueError(f"indices[{r}] must be 1-D, got shape {a.shape}")
            if a.dtype.kind not in "iu":
                raise TypeError(f"indices[{r}] must hold integers, got dtype {a.dtype}")
            if a.size and (a.min() < 0 or a.max() >= n_samples):
                raise ValueError(
                    f"indices[{r}] must lie in [0, n_samples={n_samples}), "
                    f"got values in [{a.min()}, {a.max()}]"
                )
            parts.append(np.sort(a.astype(np.int64)))
        if not parts:
            raise ValueError("indices must hold at least one agent")
        times = np.bincount(np.concatenate(parts), minlength=n_samples)
        if times.size and times.max() > 1:
            sample = int(np.argmax(times))
            holders = [r for r, p in enumerate(parts) if np.any(p == sample)]
            raise ValueError(
                f"indices assign sample {sample} {int(times[sample])} times "
                f"(agents {holders}); a partition assigns each sample at most once"
            )
        self._init(parts, n_samples, scheme, allow_empty)

    def _init(
        self, parts: list[np.ndarray], n_samples: int, scheme: str, allow_empty: bool
    ) -> None:
        for p in parts:
            p.setflags(write=False)
        self._parts = parts
        self._n_samples = n_samples
        self._scheme = scheme
        self._sizes = np.array([p.size for p in parts], dtype=np.int64)
        self._sizes.setflags(write=False)
        if not allow_empty:
            _refuse_empty(self._sizes, scheme)

    @classmethod
    def _from_owner(
        cls, owner: np.ndarray, agents: int, scheme: str, allow_empty: bool
    ) -> Partition:
        """Build from ``owner[s]``, the agent holding sample s (-1: none), trusted."""
        held = owner >= 0
        sizes = np.bincount(owner[held], minlength=agents)
        order = _stable_order(owner + 1, agents + 1)[owner.size - int(held.sum()) :]
        self = cls.__new__(cls)
        self._init(list(np.split(order, np.cumsum(sizes)[:-1])), owner.size, scheme, allow_empty)
        return self

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice | Sequence[int] | np.ndarray) -> list[np.ndarray]: ...
    def __getitem__(
        self, index: int | slice | Sequence[int] | np.ndarray
    ) -> np.ndarray | list[np.ndarray]:
        """Return agent ``index``'s sample indices; a list of them for a slice or an array of
        agents, so ``partition[fs.rank()]`` is this process's agents' in every mode."""
        if isinstance(index, slice):
            return self._parts[index]
        if isinstance(index, numbers.Integral):
            return self._parts[self._agent(int(index))]
        agents = np.asarray(index)
        if agents.ndim == 0:
            return self._parts[self._agent(agents.item())]
        if agents.ndim != 1 or (agents.size and agents.dtype.kind not in "iu"):
            raise TypeError("index must be an agent, a slice or a 1-D array of agents")
        return [self._parts[self._agent(int(a))] for a in agents]

    def __len__(self) -> int:
        return len(self._parts)

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self._parts)

    def __repr__(self) -> str:
        s = self._sizes
        return (
            f"Partition({self._scheme}: {self.agents} agents, "
            f"{int(s.sum())} of {self._n_samples} samples, sizes {int(s.min())}..{int(s.max())})"
        )

    def _agent(self, agent: int) -> int:
        if isinstance(agent, bool) or not isinstance(agent, numbers.Integral):
            raise TypeError(f"agent must be an int, got {type(agent).__name__}")
        a = int(agent)
        if not -self.agents <= a < self.agents:
            raise IndexError(f"agent must be in [0, {self.agents}), got {a}")
        return a % self.agents

    def of(self, agent: int) -> np.ndarray:
        """Return agent ``agent``'s sample indices (sorted ascending, int64, read-only)."""
        return self._parts[self._agent(agent)]

    @property
    def agents(self) -> int:
        """The number of agents."""
        return len(self._parts)

    @property
    def sizes(self) -> np.ndarray:
        """Each agent's number of samples (int64, one per agent)."""
        return self._sizes

    @property
    def n_samples(self) -> int:
        """The number of samples of the data set indexed."""
        return self._n_samples

    @property
    def scheme(self) -> str:
        """How the split was made, with its parameters (e.g. ``"iid(agents=4, seed=0)"``)."""
        return self._scheme

    def owner(self) -> np.ndarray:
        """Return, for every sample, the agent holding it (-1 where none does)."""
        out = np.full(self._n_samples, -1, dtype=np.int64)
        out[np.concatenate(self._parts)] = np.repeat(np.arange(self.agents), self._sizes)
        return out

    def report(self, labels: npt.ArrayLike) -> Report:
        """Return the :class:`Report` of this split for the data set's ``labels``.

        ``labels`` holds one integer class per sample of the data set
        (``len(labels) == n_samples``).
        """
        from ._report import Report

        y = as_labels(labels)
        if y.size != self._n_samples:
            raise ValueError(
                f"labels must hold one class per sample ({self._n_samples}), got {y.size}"
            )
        classes = int(y.max()) + 1 if y.size else 0
        owner = self.owner()
        held = owner >= 0
        counts = np.bincount(
            owner[held] * classes + y[held], minlength=self.agents * classes
        ).reshape(self.agents, classes)
        return Report(counts, self._scheme)


def iid(
    n_samples_or_labels: int | npt.ArrayLike, agents: int, seed: int, *, allow_empty: bool = False
) -> Partition:
    """Split the samples uniformly at random into ``agents`` parts of as-equal-as-possible size.

    The samples are shuffled and cut in order: the first ``n_samples % agents`` agents hold
    ``n_samples // agents + 1`` samples, the others one less.

    Parameters
    ----------
    n_samples_or_labels : int or array_like
        The number of samples, or any 1-D array with one entry per sample (its length is
        used).
    agents : int
        The number of agents, ``>= 1``.
    seed : int
        The seed (``>= 0``); the split is drawn from ``SeedSequence(seed)``, the same on
        every machine.
    allow_empty : bool, optional
        Accept more agents than samples (some agents then hold none).
    """
    n = check_n_samples(n_samples_or_labels)
    agents = check_count(agents, "agents")
    rng = _rng(seed, "iid")
    if n < agents and not allow_empty:
        raise ValueError(f"agents ({agents}) exceeds the number of samples ({n})")
    sizes = np.full(agents, n // agents, dtype=np.int64)
    sizes[: n % agents] += 1
    owner = np.empty(n, dtype=np.int64)
    owner[rng.permutation(n)] = np.repeat(np.arange(agents), sizes)
    return Partition._from_owner(owner, agents, f"iid(agents={agents}, seed={seed})", allow_empty)


def dirichlet(
    labels: npt.ArrayLike,
    agents: int,
    alpha: float,
    seed: int,
    *,
    min_size: int = 1,
    max_retries: int = 100,
    sizes: npt.ArrayLike | None = None,
    allow_empty: bool = False,
) -> Partition:
    """Split with label skew: each class's samples are divided by a Dirichlet draw.

    For each class k, draw ``q_k ~ Dir(alpha * 1_agents)`` and give agent i the share
    ``p_ki = w_i q_ki / sum_j w_j q_kj`` of class k's samples (shuffled, cut in agent
    order at ``floor(n_k * cumsum(p_k))``), with ``w_i = 1`` unless ``sizes`` is given.

    This is the per-class ("column") variant of Hsu, Qi & Brown (2019), *Measuring the
    effects of non-identical data distribution for federated visual classification*,
    as implemented by most federated-learning code (Yurochkin et al. 2019, *Bayesian
    nonparametric federated learning of neural networks*; Flower Datasets'
    ``DirichletPartitioner``): the agents' class proportions are not drawn per agent, so
    agent sizes vary too. Small ``alpha`` (0.1) gives agents holding mostly one or two
    classes; large ``alpha`` (100) an almost IID split. If some agent gets fewer than
    ``min_size`` samples, all ``q_k`` are drawn again, at most ``max_retries`` times.

    Parameters
    ----------
    labels : array_like
        Integer class of each sample (1-D, ``>= 0``; floats only if integral).
    agents : int
        The number of agents, ``>= 1``.
    alpha : float
        The Dirichlet concentration, ``> 0``.
    seed : int
        The seed (``>= 0``).
    min_size : int, optional
        The fewest samples every agent must get (default 1); 0 with ``allow_empty=True``
        accepts empty agents.
    max_retries : int, optional
        How many draws to try before raising a ValueError (default 100).
    sizes : array_like, optional
        Relative agent sizes ``w`` (positive, one per agent) composing label skew with
        quantity skew, e.g. ``size_skew(labels, agents, seed, kind="lognormal").sizes``.
        Since ``E[q_ki] = 1/agents``, agent i gets about ``w_i / sum(w)`` of the data:
        exactly so in expectation as ``alpha`` grows, approximately for small ``alpha``.
    allow_empty : bool, optional
        Accept agents holding no sample.
    """
    y = as_labels(labels)
    agents = check_count(agents, "agents")
    alpha = check_positive(alpha, "alpha")
    min_size = check_count(min_size, "min_size", minimum=0)
    max_retries = check_count(max_retries, "max_retries")
    weights = None if sizes is None else check_weights(sizes, agents)
    rng = _rng(seed, "dirichlet")
    n = y.size
    if min_size * agents > n:
        raise ValueError(
            f"min_size * agents ({min_size} * {agents}) exceeds the number of samples ({n})"
        )
    per_class = np.bincount(y)
    perm = rng.permutation(n)
    order = perm[
        _stable_order(y[perm], max(per_class.size, 1))
    ]  # grouped by class, shuffled within
    for _ in range(max_retries):
        p = rng.dirichlet(np.full(agents, alpha), size=per_class.size)
        if weights is not None:
            p = p * weights
        p /= p.sum(axis=1, keepdims=True)
        cum = np.cumsum(p, axis=1)
        cum[:, -1] = 1.0
        cuts = np.floor(cum * per_class[:, None]).astype(np.int64)
        counts = np.diff(cuts, axis=1, prepend=0)
        got = counts.sum(axis=0)
        if got.min() >= min_size:
            break
    else:
        worst = int(np.argmin(got))
        raise ValueError(
            f"dirichlet: no draw in max_retries={max_retries} gave every agent at least "
            f"min_size={min_size} samples (last draw: agent {worst} got {int(got[worst])}); "
            f"raise alpha, lower min_size or use fewer agents"
        )
    owner = np.empty(n, dtype=np.int64)
    owner[order] = np.repeat(np.tile(np.arange(agents), per_class.size), counts.ravel())
    extra = "" if sizes is None else ", sizes=..."
    scheme = f"dirichlet(alpha={alpha:g}, agents={agents}, seed={seed}, min_size={min_size}{extra})"
    return Partition._from_owner(owner, agents, scheme, allow_empty)


def pathological(
    labels: npt.ArrayLike, agents: int, classes_per_agent: int, seed: int
) -> Partition:
    """Split so that every agent holds exactly ``classes_per_agent`` distinct classes.

    The ``K`` classes present are put in a random order ``c_0 .. c_{K-1}`` and the agents in
    a random order ``a_0 .. a_{n-1}``; agent ``a_j`` holds the classes
    ``c_{(j m + t) mod K}`` for ``t = 0 .. m-1`` (``m = classes_per_agent``), so each class
    has ``floor(n m / K)`` or ``ceil(n m / K)`` holders, and each class's samples are
    shuffled and split as evenly as possible among its holders.

    This is the "#C = k" label-quantity skew of Li, Diao, Chen & He (2022), *Federated
    learning on non-IID data silos: an experimental study* (ICDE), a variant of McMahan et
    al. (2017)'s pathological non-IID split (*Communication-efficient learning of deep
    networks from decentralized data*) in which an agent's class count is exact: McMahan's
    shards of the label-sorted data may straddle two classes.

    Raises a ValueError when ``classes_per_agent`` exceeds the number of classes, when
    ``agents * classes_per_agent`` is smaller than it (some class would have no holder),
    or when a class has fewer samples than holders.
    """
    y = as_labels(labels)
    agents = check_count(agents, "agents")
    m = check_count(classes_per_agent, "classes_per_agent")
    rng = _rng(seed, "pathological")
    present = np.flatnonzero(np.bincount(y)) if y.size else np.zeros(0, np.int64)
    k = present.size
    if m > k:
        raise ValueError(f"classes_per_agent ({m}) exceeds the number of classes present ({k})")
    if agents * m < k:
        raise ValueError(
            f"classes_per_agent * agents ({m} * {agents}) is below the number of classes "
            f"({k}): some class would have no agent"
        )
    classes = rng.permutation(present)
    slots = rng.permutation(agents)  # agent slots[j] takes the j-th run of classes
    held = classes[(np.arange(agents)[:, None] * m + np.arange(m)) % k]  # run j's classes
    holder_agent = np.repeat(slots, m)  # (agent, class) pairs, class-flat
    holder_class = held.ravel()
    by_class = np.argsort(holder_class, kind="stable")
    holder_agent, holder_class = holder_agent[by_class], holder_class[by_class]
    holders = np.bincount(holder_class, minlength=int(present.max()) + 1)
    n_k = np.bincount(y, minlength=holders.size)
    short = np.flatnonzero((holders > 0) & (n_k < holders))
    if short.size:
        c = int(short[0])
        raise ValueError(
            f"class {c} has {int(n_k[c])} samples for {int(holders[c])} agents: lower "
            f"classes_per_agent or agents"
        )
    # Class c's j-th holder gets n_c // h_c samples, plus one for the first n_c % h_c.
    first = np.cumsum(holders) - holders
    j = np.arange(holder_class.size) - first[holder_class]
    h = holders[holder_class]
    share = n_k[holder_class] // h + (j < n_k[holder_class] % h)
    perm = rng.permutation(y.size)
    order = perm[_stable_order(y[perm], n_k.size)]
    owner = np.empty(y.size, dtype=np.int64)
    owner[order] = np.repeat(holder_agent, share)
    scheme = f"pathological(classes_per_agent={m}, agents={agents}, seed={seed})"
    return Partition._from_owner(owner, agents, scheme, False)


def size_skew(
    n_samples_or_labels: int | npt.ArrayLike,
    agents: int,
    seed: int,
    kind: Literal["power", "lognormal"] = "lognormal",
    *,
    exponent: float = 3.0,
    sigma: float = 1.0,
    min_size: int = 1,
) -> Partition:
    """Split IID content into parts of skewed sizes (quantity skew).

    Each agent draws a weight ``w_i``: log-normal ``w_i = exp(sigma z_i)``, ``z_i ~ N(0, 1)``
    (``kind="lognormal"``, the quantity skew of Li et al. 2022), or power law (Pareto)
    with density proportional to ``w^-exponent`` on ``w >= 1``, i.e.
    ``w_i = (1 - u_i)^(-1 / (exponent - 1))``, ``u_i ~ U[0, 1)`` (``kind="power"``, as the
    power-law sizes of LEAF and FedProx). Agent i then holds ``min_size`` samples plus its
    share ``w_i / sum(w)`` of the remaining ``n_samples - agents * min_size`` (rounded by
    largest remainders), drawn uniformly at random.

    Parameters
    ----------
    n_samples_or_labels : int or array_like
        The number of samples, or a 1-D array with one entry per sample.
    agents : int
        The number of agents, ``>= 1``.
    seed : int
        The seed (``>= 0``).
    kind : {"lognormal", "power"}
        The law of the weights.
    exponent : float, optional
        The power law's exponent, ``> 1`` (smaller: heavier tail); ``kind="power"`` only.
    sigma : float, optional
        The log-normal's spread, ``>= 0`` (0: equal sizes); ``kind="lognormal"`` only.
    min_size : int, optional
        The fewest samples an agent holds (default 1; 0 accepts empty agents).
    """
    n = check_n_samples(n_samples_or_labels)
    agents = check_count(agents, "agents")
    min_size = check_count(min_size, "min_size", minimum=0)
    rng = _rng(seed, "size_skew")
    if kind == "lognormal":
        sigma = check_positive(sigma, "sigma", allow_zero=True)
        w = np.exp(sigma * rng.standard_normal(agents))
        law = f"lognormal, sigma={sigma:g}"
    elif kind == "power":
        exponent = check_positive(exponent, "exponent")
        if not exponent > 1:
            raise ValueError(f"exponent must be > 1, got {exponent!r}")
        w = (1.0 - rng.random(agents)) ** (-1.0 / (exponent - 1.0))
        law = f"power, exponent={exponent:g}"
    else:
        raise ValueError(f"kind must be 'lognormal' or 'power', got {kind!r}")
    if min_size * agents > n:
        raise ValueError(
            f"min_size * agents ({min_size} * {agents}) exceeds the number of samples ({n})"
        )
    sizes = min_size + apportion(n - min_size * agents, w)
    owner = np.empty(n, dtype=np.int64)
    owner[rng.permutation(n)] = np.repeat(np.arange(agents), sizes)
    scheme = f"size_skew({law}, agents={agents}, seed={seed}, min_size={min_size})"
    return Partition._from_owner(owner, agents, scheme, min_size == 0)


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Return integers summing to ``total`` proportional to ``weights`` (largest remainders)."""
    exact: np.ndarray = total * (weights / weights.sum())
    out: np.ndarray = np.floor(exact).astype(np.int64)
    short = total - int(out.sum())
    if short:
        out[np.argsort(out - exact, kind="stable")[:short]] += 1
    return out


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """Return the stable argsort of ``keys`` in ``[0, bound)``: numpy radix-sorts 16-bit keys."""
    if bound <= 1 << 16:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def _refuse_empty(sizes: np.ndarray, scheme: str) -> None:
    empty = np.flatnonzero(sizes == 0)
    if empty.size:
        who = ", ".join(str(int(r)) for r in empty[:10]) + (", ..." if empty.size > 10 else "")
        noun = "agent" if empty.size == 1 else "agents"
        raise ValueError(
            f"{scheme} leaves {noun} {who} with no sample; pass allow_empty=True to accept that"
        )


def _rng(seed: object, scheme: str) -> np.random.Generator:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(_STREAM[scheme],)))
