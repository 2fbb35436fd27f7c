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
#: The column of the optimization examples (their agents start at x_i = 0).
DISTANCE = "mean_i ||x_i - x*||^2 (mean squared distance of the agents to the optimum x*)"


def parser(
    doc: str, extra_topologies: tuple[str, ...] = (), default_size: int = 16
) -> argparse.ArgumentParser:
    """Return an argument parser with the options every example shares.

    ``doc`` is the example's docstring, shown whole by ``--help``: what the example does, how
    to run it and what it prints. ``default_size``: the agents simulated when neither
    ``--size``, ``FOGSIM_SIZE`` nor a launcher gives the number (see :func:`setup`).
    """
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help=f"simulated agents (default FOGSIM_SIZE, else {default_size}); under fogrun -np N: N",
    )
    topologies = [*TOPOLOGIES, *DYNAMIC, *extra_topologies]
    p.add_argument(
        "--topology", choices=topologies, default="exp2", help="the graph (default %(default)s)"
    )
    p.add_argument("--iters", type=int, default=30, help="iterations (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data (default %(default)s)")
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
    args,
    x,
    curve: list[float],
    ylabel: str,
    last_line: str,
    label: str | None = None,
    others: dict | None = None,
) -> None:
    """Save the final values and the plot, print ``last_line`` (main process only), shut down.

    ``last_line`` says what the run's result means (see :func:`outcome`); it is the last line
    the example prints. ``others`` maps labels to more curves drawn on the same axes (e.g.
    DGD for comparison); ``label`` names the main curve in that legend.
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
    say(last_line)
    fs.shutdown()


def say(*lines: str) -> None:
    """Print ``lines`` once per job: on the main process only."""
    if fs.is_main_process():
        for line in lines:
            print(line, flush=True)


def header(*columns: str) -> None:
    """Print the header of the ``iteration  value ...`` rows: ``iter`` and the columns' names."""
    say("  ".join([f"{'iter':>5}", *columns]))


def report(k: int, value: float) -> None:
    """Print one row, ``iteration  value`` (once per job)."""
    say(f"{k:5d}  {value:.6e}")


def report_curve(curve, column: str, every: int = 1) -> None:
    """Print the header ``iter  column``, then ``iteration  value`` for every ``every``-th
    entry of a curve (entry k: after k iterations), and the last."""
    header(column)
    last = len(curve) - 1
    for k, value in enumerate(curve):
        if k % every == 0 or k == last:
            report(k, float(value))


def outcome(
    curve,
    quantity: str,
    iters: int,
    reached: str,
    goal: float,
    floor: str = "it stopped falling before converging",
) -> str:
    """Return the last line of a run whose ``quantity`` should fall: how far it fell over the
    ``iters`` iterations of ``curve`` (the first entry: the start), and what that means.

    ``reached`` is said when the last value is at most ``goal`` times the first; ``floor``
    when it stayed above that but levelled off (under 1% change over the last fifth of the
    curve); otherwise the run is still falling, or did not fall at all, and says so.
    """
    first, last = float(curve[0]), float(curve[-1])
    span = f"in {iters} iteration{'' if iters == 1 else 's'}"
    if len(curve) < 2:
        return f"{quantity} is {first:.2e} at the start, and no iteration ran"
    if first == 0.0 and last == 0.0:
        return f"{quantity} is 0 from the start: {reached}"
    if not np.isfinite(last) or last > first:
        return f"{quantity} grew from {first:.2e} to {last:.2e} {span}: the run diverges"
    if last == first:
        return f"{quantity} stayed at {first:.2e} {span}: the run does not converge"
    fell = f"{quantity} fell from {first:.2e} to {last:.2e} {span}"
    if last <= goal * first:
        return f"{fell}: {reached}"
    if levelled(curve):
        return f"{fell} and levelled off: {floor}"
    return f"{fell} and is still falling: not converged yet (run more --iters)"


def distance_outcome(
    curve, iters: int, floor: str = "it stopped falling before the agents reached x*"
) -> str:
    """Return the last line of a run printed as :data:`DISTANCE` from x_i = 0."""
    first, last = float(curve[0]), float(curve[-1])
    relative = float(np.sqrt(last / first)) if first > 0 else 0.0  # first: ||x*||^2
    return outcome(
        curve,
        "mean squared distance to x*",
        iters,
        reached=f"the agents reach the optimum x*, {digits(relative)} (RMS over the agents)",
        goal=1e-16,
        floor=floor,
    )


def levelled(curve) -> bool:
    """Whether ``curve`` changed by under 1% over its last fifth (at least its last step)."""
    values = np.asarray(curve, dtype=float)
    if len(values) < 3:
        return False
    back = max(1, len(values) // 5)
    before, last = values[-1 - back], values[-1]
    return bool(abs(before - last) <= 0.01 * abs(before))


def digits(relative: float) -> str:
    """Say how many decimal digits an error of ``relative`` (to the value's size) leaves."""
    if relative <= 0.0:
        return "exactly"
    return f"to {max(0, int(np.floor(-np.log10(relative))))} digits"
