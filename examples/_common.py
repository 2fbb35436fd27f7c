"""Shared command-line options and output of the examples (not part of fogsim)."""

from __future__ import annotations

import argparse
import sys

import numpy as np

import fogsim as fs
from fogsim import _settings
from fogsim import topology as T

TOPOLOGIES = {
    "exp2": T.exponential_two_graph,
    "ring": T.ring_graph,
    "mesh": T.mesh_grid_2d_graph,
    "torus": T.torus_2d_graph,
    "full": T.fully_connected_graph,
}
DYNAMIC = {"one-peer-exp2": T.one_peer_exponential_two}


def parser(description: str, extra_topologies: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    """Return an argument parser with the options every example shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="simulated agents (default FOGSIM_SIZE, else 16); under fogrun -np N: N",
    )
    topologies = [*TOPOLOGIES, *DYNAMIC, *extra_topologies]
    p.add_argument("--topology", choices=topologies, default="exp2")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", help="save the curve to this file")
    p.add_argument("--save", metavar="NPY", help="save every agent's final value (n x ...)")
    p.add_argument("--progress", action="store_true", help="show a progress bar (tqdm)")
    return p


def simulation_only(script: str) -> bool:
    """Whether this process runs the simulation-only example ``script`` (its ``__file__``).

    Such an example simulates all its agents in one process (``fs.init(backend="sim",
    shards=1)``: not split over the launched processes, as a plain ``backend="sim"`` is):
    under a launcher of several processes (``fogrun -np N``, ``mpiexec``, ``torchrun``) it
    runs once, on the first process, after a one-line note on stderr; the others get False
    and end quietly (exit status 0).
    """
    settings = _settings.load()
    if settings.launched:
        rank, size = settings.launcher_rank or 0, settings.launcher_size
    elif settings.torchrun and (settings.torch_world_size or 1) > 1:
        rank, size = settings.torch_rank or 0, settings.torch_world_size
    else:
        return True
    if rank == 0:
        name = script.replace("\\", "/").rsplit("/", 1)[-1]
        print(
            f"{name}: this example is simulation-only; ran once on rank 0 (not on all "
            f"{size} processes)",
            file=sys.stderr,
            flush=True,
        )
    return rank == 0


def setup(args, default_size: int | None = None) -> object:
    """Start fogsim; return the schedule for fogsim.algorithms (None: the static topology).

    ``default_size`` replaces fogsim's default of 16 simulated agents when neither
    ``--size``, ``FOGSIM_SIZE`` nor a launcher gives the number.
    """
    size = args.size
    if size is None and default_size is not None:
        settings = _settings.load()
        if settings.size is None and settings.launcher_size is None and not settings.torchrun:
            size = default_size
    fs.init(size=size, seed=args.seed)
    if args.topology in TOPOLOGIES:
        fs.set_topology(TOPOLOGIES[args.topology](fs.size()), is_weighted=True)
    return schedule(args)


def schedule(args) -> object:
    """Return a new schedule for ``--topology`` from its first step (None: static)."""
    return DYNAMIC[args.topology](fs.size()) if args.topology in DYNAMIC else None


def finish(
    args, x, curve: list[float], ylabel: str, label: str | None = None, others: dict | None = None
) -> None:
    """Save the final values and the plot (main process only), then shut down.

    ``others`` maps labels to more curves drawn on the same axes (e.g. DGD for comparison);
    ``label`` names the main curve in that legend.
    """
    whole = fs.global_view(x)
    if fs.is_main_process() and args.save:
        np.save(args.save, np.asarray(whole))
    if fs.is_main_process() and args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.semilogy(curve, marker="." if len(curve) <= 100 else None, label=label)
        for name, other in (others or {}).items():
            ax.semilogy(other, label=name)
        if others:
            ax.legend()
        ax.set(xlabel="iteration", ylabel=ylabel, title=f"{args.topology}, {fs.size()} agents")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"saved {args.plot}")
    fs.shutdown()


def report(k: int, value: float) -> None:
    """Print one line of progress (once per job)."""
    if fs.is_main_process():
        print(f"{k:5d}  {value:.6e}", flush=True)


def report_curve(curve, every: int = 1) -> None:
    """Print ``iteration  value`` for every ``every``-th entry of a curve, and the last."""
    last = len(curve) - 1
    for k, value in enumerate(curve):
        if k % every == 0 or k == last:
            report(k, float(value))
