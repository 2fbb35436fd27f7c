"""Shared command-line options and output of the examples (not part of fogsim)."""

from __future__ import annotations

import argparse

import numpy as np

import fogsim as fs
from fogsim import topology as T

TOPOLOGIES = {
    "exp2": T.exponential_two_graph,
    "ring": T.ring_graph,
    "mesh": T.mesh_grid_2d_graph,
    "torus": T.torus_2d_graph,
    "full": T.fully_connected_graph,
}
DYNAMIC = {"one-peer-exp2": T.one_peer_exponential_two}


def parser(description: str) -> argparse.ArgumentParser:
    """Return an argument parser with the options every example shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="simulated agents (default FOGSIM_SIZE, else 16); under fogrun -np N: N",
    )
    p.add_argument("--topology", choices=[*TOPOLOGIES, *DYNAMIC], default="exp2")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", help="save the curve to this file")
    p.add_argument("--save", metavar="NPY", help="save every agent's final value (n x ...)")
    return p  # fmt: skip


def setup(args) -> object:
    """Start fogsim and return a function giving the step's weights (None: static)."""
    fs.init(size=args.size, seed=args.seed)
    if args.topology in DYNAMIC:
        schedule = DYNAMIC[args.topology](fs.size())
        return lambda: next(schedule).weights
    fs.set_topology(TOPOLOGIES[args.topology](fs.size()), is_weighted=True)
    return lambda: None


def finish(args, x, curve: list[float], ylabel: str) -> None:
    """Save the final values and the plot (main process only), then shut down."""
    whole = fs.global_view(x)
    if fs.is_main_process() and args.save:
        np.save(args.save, np.asarray(whole))
    if fs.is_main_process() and args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.semilogy(curve, marker=".")
        ax.set(xlabel="iteration", ylabel=ylabel, title=f"{args.topology}, {fs.size()} agents")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"saved {args.plot}")
    fs.shutdown()


def report(k: int, value: float) -> None:
    """Print one line of progress (once per job)."""
    if fs.is_main_process():
        print(f"{k:5d}  {value:.6e}", flush=True)
