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

# StackedGenerator's float64 ``standard_normal``/``random`` run in one numba loop
# (``_rng_nb``, the same numbers) once it has drawn for this many agents in all: the Python
# loop costs about 1 us per agent and call, importing numba and loading the kernels about
# 1 s, so a small or short run never pays for numba and a long one loses at most twice that.
_COMPILE_AFTER = 1 << 20
_COMPILED = ("standard_normal", "random")
_DRAW_ARGS = ("size", "dtype", "out")


def agent_generator(seed: int | None, rank: int) -> np.random.Generator:
    """Return agent ``rank``'s generator: ``np.random.default_rng([seed, rank])``."""
    return np.random.default_rng([DEFAULT_SEED if seed is None else seed, rank])


def rng() -> Any:
    """Return this agent's random generator, a ``numpy.random.Generator``.

    Agent ``r``'s generator is ``np.random.default_rng([seed, r])``, ``seed`` being
    ``init(seed=)`` (else ``FOGSIM_SEED``, else 0), so a script draws the same numbers in
    every mode. Distributed (MPI, torch, SPMD) it is this agent's ``Generator``; in
    simulation a ``StackedGenerator`` whose methods return every agent's draws
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
            # the stacked agents: all of them, or this process's block when sharded
            gen = StackedGenerator([agent_generator(ctx.seed, int(r)) for r in rank])
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

    Float64 ``standard_normal`` and ``random`` of many agents run in compiled code
    (numba), calling each agent's own bit generator: the same numbers, the same states.
    """

    def __init__(self, generators: Sequence[np.random.Generator]) -> None:
        self.generators = tuple(generators)
        self._drawn = 0  # agents' draws through the methods that may run compiled
        self._bitgens: tuple[tuple[np.random.Generator, ...], np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A copy's generators are new objects: it must not reuse these addresses.
        return {**self.__dict__, "_bitgens": None}

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
        first = getattr(self.generators[0], name)
        if not callable(first):
            return [getattr(g, name) for g in self.generators]

        def stacked(*args: Any, **kwargs: Any) -> Any:
            from .backends.sim._stack import stack_agents

            if name in _COMPILED:
                shape = _float64_shape(args, kwargs)
                if shape is not None and self._compiled():
                    from . import _rng_nb

                    return getattr(_rng_nb, name)(self._addresses(), shape)
            return stack_agents([getattr(g, name)(*args, **kwargs) for g in self.generators])

        stacked.__name__ = name
        stacked.__doc__ = getattr(first, "__doc__", None)
        return stacked

    def _compiled(self) -> bool:
        """Count one draw of every agent; return whether it should run compiled."""
        before, self._drawn = self._drawn, self._drawn + len(self.generators)
        if before < _COMPILE_AFTER:
            return False
        try:
            from . import _rng_nb  # noqa: F401
        except ImportError:  # numba missing: the Python loop gives the same numbers
            return False
        return True

    def _addresses(self) -> np.ndarray:
        """Return the agents' ``bitgen_t`` addresses (made again for a copy's generators)."""
        from . import _rng_nb

        if self._bitgens is None or self._bitgens[0] is not self.generators:
            self._bitgens = (self.generators, _rng_nb.bitgen_addresses(self.generators))
        return self._bitgens[1]

    def __repr__(self) -> str:
        return f"<fogsim.StackedGenerator of {len(self.generators)} agents>"


def _float64_shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, ...] | None:
    """Return the shape of a plain float64 draw ``(size=None, dtype=float64, out=None)``.

    None when the call asks for anything else (another dtype, ``out``, an odd size, wrong
    arguments): numpy then runs it per agent, and raises what it raises.
    """
    if len(args) > len(_DRAW_ARGS) or not set(kwargs) <= set(_DRAW_ARGS[len(args) :]):
        return None
    given = {**dict(zip(_DRAW_ARGS, args, strict=False)), **kwargs}
    if given.get("out") is not None:
        return None
    try:
        if np.dtype(given.get("dtype", np.float64)) != np.float64:
            return None
    except TypeError:
        return None
    size = given.get("size")
    if size is None:
        return ()
    dims = (size,) if isinstance(size, numbers.Integral) else size
    if not isinstance(dims, tuple | list) or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) >= 0 for d in dims
    ):
        return None
    return tuple(int(d) for d in dims)
