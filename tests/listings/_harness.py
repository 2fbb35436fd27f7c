"""What the BlueFog paper's listings leave out: per-rank problem data and the final checks.

Each listing file runs as one agent (under ``fogrun -np N`` one MPI process per agent, in
SPMD mode one thread per agent); these helpers use only the compat layer's collectives,
so they run the same way in both modes. ``--out FILE`` (in the script's argv) makes rank 0
save every agent's final iterate, stacked by rank, for the tests to compare the modes.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

import fogsim.compat.bluefog as bf

__all__ = ["linear_regression", "optimum", "report"]


def linear_regression(m: int = 20, d: int = 5, seed: int = 2021):
    """Return this agent's ``A`` (m x d), ``b`` (m x 1), doubles from ``seed + rank``.

    ``b_i = A_i x_true + noise``, with an ``x_true`` shared by all agents, so the local
    optima differ (DGD has a bias) while the global one is well conditioned.
    """
    shared = torch.Generator().manual_seed(seed)
    x_true = torch.randn(d, 1, generator=shared, dtype=torch.double)
    gen = torch.Generator().manual_seed(seed + 1 + bf.rank())
    A = torch.randn(m, d, generator=gen, dtype=torch.double) / m**0.5
    b = A.mm(x_true) + 0.5 * torch.randn(m, 1, generator=gen, dtype=torch.double)
    return A, b


def optimum(A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return the minimizer of ``sum_i ||A_i x - b_i||^2 / 2`` (two allreduces)."""
    AtA = bf.allreduce(A.t().mm(A), average=False)
    Atb = bf.allreduce(A.t().mm(b), average=False)
    return torch.linalg.solve(AtA, Atb)


def _out_path() -> str | None:
    argv = sys.argv[1:]
    if "--out" in argv:
        return argv[argv.index("--out") + 1]
    return None


def report(x: torch.Tensor, metric: str, value: float, bound: float) -> None:
    """Check the worst agent's ``value <= bound``; rank 0 prints ``LISTING OK`` and saves x.

    Every agent gathers the final iterates and the values (collectives), so all agents
    raise or none does.
    """
    stacked = bf.allgather(x.detach().reshape(1, -1).to(torch.double))
    worst = float(bf.allgather(torch.tensor([float(value)], dtype=torch.double)).max())
    if not worst <= bound:
        raise AssertionError(f"{metric} = {worst:.3e} on some agent, above {bound:.1e}")
    if bf.rank() == 0:
        path = _out_path()
        if path:
            np.save(path, stacked.numpy())
        checksum = float(stacked.sum())
        print(f"LISTING OK {metric}={worst:.3e} checksum={checksum!r}", flush=True)
