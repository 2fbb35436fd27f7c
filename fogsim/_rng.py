"""``fogsim.rng()``: each agent's own numpy ``Generator``, the same numbers in every mode."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _context

__all__ = ["DEFAULT_SEED", "StackedGenerator", "rng"]

#: The seed ``rng()`` uses when ``init()`` got none (and ``FOGSIM_SEED`` is unset).
DEFAULT_SEED = 0


def agent_generator(seed: int | None, rank: int) -> np.random.Generator:
    """Return agent ``rank``'s generator: ``np.random.default_rng([seed, rank])``."""
    return np.random.default_rng([DEFAULT_SEED if seed is None else seed, rank])


def rng() -> Any:
    """Return this agent's random generator, a ``numpy.random.Generator``.

    Agent ``r``'s generator is ``np.random.default_rng([seed, r])``, ``seed`` being
    ``init(seed=)`` (else ``FOGSIM_SEED``, else 0), so a script draws the same numbers in
    every mode. Distributed (MPI, torch, SPMD) it is this agent's ``Generator``; in
    simulation a :class:`StackedGenerator` whose methods return every agent's draws
    stacked: ``rng().standard_normal(3)`` has shape ``(n, 3)`` and row ``r`` is agent
    ``r``'s draw. The generator is made once per context and continues from call to call;
    ``init()`` starts it afresh.
    """
    ctx = _context.current()
    gen = ctx.agent_rng
    if gen is None:
        backend = ctx.backend
        rank = backend.rank()
        if isinstance(rank, numbers.Integral):
            gen = agent_generator(ctx.seed, int(rank))
        else:
            gen = StackedGenerator([agent_generator(ctx.seed, r) for r in range(backend.size_int)])
        ctx.agent_rng = gen
    return gen


class StackedGenerator:
    """The simulated agents' ``numpy.random.Generator``\\ s, one per agent, used as one.

    Calling a method calls it on every agent's generator with the same arguments and stacks
    the results along a leading agent axis (a list when they are not arrays of one shape),
    so ``rng().normal(0.0, 1.0, size=3)`` is ``(n, 3)`` with row ``r`` agent ``r``'s draw.
    Arguments are not split per agent: draw standard variates and transform them with
    batch-friendly code (``mu + sigma * rng().standard_normal(shape)``), which then reads
    the same in every mode. ``len()`` is the number of agents; ``g[r]`` is agent ``r``'s
    generator. The in-place ``shuffle`` is refused (``permutation`` returns a copy).
    """

    def __init__(self, generators: Sequence[np.random.Generator]) -> None:
        self.generators = tuple(generators)

    def __len__(self) -> int:
        return len(self.generators)

    def __getitem__(self, rank: int) -> np.random.Generator:
        return self.generators[rank]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "generators":
            raise AttributeError(name)
        if name in ("shuffle", "permuted"):
            raise AttributeError(
                f"rng().{name} in simulation would act on one array once per agent; use "
                f"rng().permutation(x) (every agent's permutation of x, stacked) or rng()[r]"
            )
        attrs = [getattr(g, name) for g in self.generators]
        if not callable(attrs[0]):
            return list(attrs)

        def stacked(*args: Any, **kwargs: Any) -> Any:
            from .backends.sim._stack import stack_agents

            return stack_agents([a(*args, **kwargs) for a in attrs])

        stacked.__name__ = name
        stacked.__doc__ = getattr(attrs[0], "__doc__", None)
        return stacked

    def __repr__(self) -> str:
        return f"<fogsim.StackedGenerator of {len(self.generators)} agents>"
