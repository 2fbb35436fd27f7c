"""Problems built from agent-local data: a gradient oracle per agent and the global optimum."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

import fogsim as fs

from ._util import Agents

__all__ = ["LeastSquares"]


class LeastSquares:
    """Decentralized least squares: agent i holds ``(A_i, b_i)`` and the agents minimize

        ``f(x) = sum_i f_i(x)``,  ``f_i(x) = 1/2 ||A_i x - b_i||^2``.

    Parameters
    ----------
    A_local : array
        This agent's data matrix ``A_i`` of shape ``(m, d)``; stacked ``(n, m, d)`` in
        simulation (``fogsim.local`` builds it). ``m`` may differ between agents only
        under MPI.
    b_local : array
        This agent's right-hand side ``b_i`` of shape ``(m,)``; stacked ``(n, m)``.

    Attributes
    ----------
    batch_shape : tuple of int
        ``()`` for one problem. ``(S,)`` when ``A_local`` is ``(S, m, d)`` per agent
        (stacked ``(n, S, m, d)``): S independent problems solved at once, e.g. one per
        seed (``random(m, d, seed=[0, 1, 2])``); the iterates are then ``(n, S, d)`` and
        the algorithms of :mod:`fogsim.algorithms` record each metric per problem
        (``history[key]`` of shape ``(iters + 1, S)``; ``"bytes"`` and ``"time"`` stay one
        column: what the agents sent for all S problems together).

    Notes
    -----
    :meth:`grad` is written with batched ``einsum``, so the same line serves the stacked
    simulation and one rank. :meth:`solution` and :meth:`lipschitz` communicate
    (``allreduce``/``global_view``) and must be called on every agent.
    """

    def __init__(self, A_local: npt.ArrayLike, b_local: npt.ArrayLike) -> None:
        agents = Agents()
        A = agents.array(A_local, "A_local").astype(np.float64, copy=False)
        b = agents.array(b_local, "b_local").astype(np.float64, copy=False)
        lead = len(agents.lead)
        if A.ndim not in (lead + 2, lead + 3):
            where = "stacked (n, m, d) in simulation" if agents.stacked else "(m, d) per agent"
            raise ValueError(
                f"A_local must be {where} (with an extra axis S after the agents' for S "
                f"problems at once), got shape {A.shape}"
            )
        if b.shape != A.shape[:-1]:
            raise ValueError(
                f"b_local must have shape {A.shape[:-1]} to match A_local {A.shape}, got {b.shape}"
            )
        if A.shape[-1] == 0:
            raise ValueError("A_local has no columns (d = 0)")
        self.A = A
        self.b = b
        self.batch_shape: tuple[int, ...] = tuple(A.shape[lead:-2])
        self.x_true: np.ndarray | None = None
        self._solution: np.ndarray | None = None

    @classmethod
    def random(
        cls, m: int, d: int, seed: int | Sequence[int] | np.ndarray = 0, noise: float = 0.1
    ) -> LeastSquares:
        """Return a random problem with ``m`` rows per agent and ``d`` unknowns.

        ``b_i = A_i x_true + noise * e_i`` with standard normal ``A_i``, ``e_i`` and
        ``x_true``. Agent i draws its data from ``SeedSequence(seed, spawn_key=(i,))`` through
        ``fogsim.local``, so it is the same in simulation and under MPI and does not depend
        on the number of agents; ``x_true`` (from ``SeedSequence(seed)``) is kept as
        ``self.x_true``.

        A sequence of S seeds gives S problems at once (``batch_shape == (S,)``, ``A`` of
        shape ``(n, S, m, d)`` in simulation, ``x_true`` of shape ``(S, d)``): problem s is
        ``random(m, d, seed=seed[s], noise=noise)``'s data, bit for bit.
        """
        if isinstance(seed, (Sequence, np.ndarray)) and not isinstance(seed, str):
            seeds = list(seed)
            if not seeds or not all(
                isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in seeds
            ):
                raise ValueError(
                    f"seed must be an int >= 0 or a non-empty sequence of them, got {seed!r}"
                )
            parts = [cls.random(m, d, seed=int(s), noise=noise) for s in seeds]
            lead = len(Agents().lead)
            batched = cls(
                np.stack([p.A for p in parts], axis=lead), np.stack([p.b for p in parts], axis=lead)
            )
            batched.x_true = np.stack([p.x_true for p in parts if p.x_true is not None])
            return batched
        for name, value in (("m", m), ("d", d)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not noise >= 0:
            raise ValueError(f"noise must be a number >= 0, got {noise!r}")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        x_true = np.random.default_rng(np.random.SeedSequence(seed)).standard_normal(d)

        def data(r: int) -> np.ndarray:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(int(r),)))
            A = rng.standard_normal((m, d))
            b = A @ x_true + noise * rng.standard_normal(m)
            return np.concatenate([A, b[:, None]], axis=1)

        both = fs.local(data)
        problem = cls(both[..., :d], both[..., d])
        problem.x_true = x_true
        return problem

    @property
    def dim(self) -> int:
        """Return the number of unknowns ``d``."""
        return int(self.A.shape[-1])

    def value(self, x: npt.ArrayLike) -> np.ndarray:
        """Return the agent-local objective ``f_i(x_i) = 1/2 ||A_i x_i - b_i||^2``."""
        r = np.einsum("...ij,...j->...i", self.A, np.asarray(x)) - self.b
        value: np.ndarray = 0.5 * np.einsum("...i,...i->...", r, r)
        return value

    def grad(self, x: npt.ArrayLike) -> np.ndarray:
        """Return the agent-local gradient ``grad f_i(x_i) = A_i^T (A_i x_i - b_i)``."""
        r = np.einsum("...ij,...j->...i", self.A, np.asarray(x)) - self.b
        grad: np.ndarray = np.einsum("...ji,...j->...i", self.A, r)
        return grad

    def solution(self) -> np.ndarray:
        """Return the global optimum ``x* = (sum_i A_i^T A_i)^{-1} sum_i A_i^T b_i``.

        Computed once with two ``allreduce`` calls (collective: call it on every agent);
        the same on every agent, agent-local (stacked ``(n, d)`` in simulation).
        """
        if self._solution is None:
            H = fs.allreduce(np.einsum("...ki,...kj->...ij", self.A, self.A))
            g = fs.allreduce(np.einsum("...ki,...k->...i", self.A, self.b))
            H, g = np.asarray(H), np.asarray(g)
            if self.batch_shape:
                self._solution = self._batched_solution(H, g)
                return self._solution.copy()
            try:  # in simulation every row is the same: solve once
                x = np.linalg.solve(H.reshape(-1, *H.shape[-2:])[0], g.reshape(-1, g.shape[-1])[0])
            except np.linalg.LinAlgError:
                raise ValueError(
                    "sum_i A_i^T A_i is singular: the least-squares optimum is not unique"
                ) from None
            self._solution = np.broadcast_to(x, g.shape).copy()
        return self._solution.copy()

    def _batched_solution(self, H: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Return the optimum of each of the batch's problems, agent-local like ``g``."""
        batch = len(self.batch_shape)
        d = self.dim
        # in simulation every agent's row is the same: solve the first one's
        first_H = H.reshape(-1, *H.shape[-batch - 2 :])[0]
        first_g = g.reshape(-1, *g.shape[-batch - 1 :])[0]
        try:
            x = np.linalg.solve(first_H, first_g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            raise ValueError(
                "sum_i A_i^T A_i is singular for one of the batch's problems: its "
                "least-squares optimum is not unique"
            ) from None
        solution: np.ndarray = np.broadcast_to(x.reshape(*self.batch_shape, d), g.shape).copy()
        return solution

    def lipschitz(self) -> float:
        """Return ``L = max_i ||A_i||_2^2``, the largest local smoothness constant (collective).

        For a batch of problems, the largest over the batch too.

        Step sizes below ``1 / L`` are a safe start for the methods of this package.
        """
        local = np.linalg.norm(self.A, ord=2, axis=(-2, -1)) ** 2
        return float(np.max(fs.global_view(np.asarray(local))))

    def __repr__(self) -> str:
        return f"LeastSquares(A: {self.A.shape}, b: {self.b.shape})"
