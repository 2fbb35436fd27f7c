"""Fish school: the fish estimate a predator's position by diffusion over their proximity
graph, then escape it or encircle it (see fogsim.demos.fish_school for the model).

    python examples/fish_school.py                          # 200 simulated fish
    python examples/fish_school.py --size 300 --mode encircle --gif school.gif --plot err.png
    fogrun -np 4 python examples/fish_school.py             # one MPI process per fish

Prints the mean estimation error of the fish (diffusion, each fish alone, a fusion center)
and their mean distance to the predator at a few steps. Simulated and MPI runs with the same
number of fish and seed give the same trajectories (--save writes them, steps x n x 6:
position, velocity, estimate).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fogsim as fs
from fogsim.demos import fish_school as fish

DEFAULT_FISH = 200


def main(argv: list[str] | None = None) -> fish.SchoolHistory:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help=f"fish (default {DEFAULT_FISH}); under fogrun -np N: N",
    )
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mode", choices=fish.MODES, default="escape")
    p.add_argument(
        "--switch-step", type=int, default=None, help="switch to the other mode at this step"
    )
    p.add_argument("--predator", choices=fish.PREDATOR_PATHS, default="circle")
    p.add_argument("--radius", type=float, default=2.0, help="sensing radius")
    p.add_argument("--noise", type=float, default=1.5, help="std of each fix's error")
    p.add_argument("--gif", metavar="GIF", help="write an animation to this file")
    p.add_argument("--every", type=int, default=2, help="animate one step in EVERY")
    p.add_argument("--plot", metavar="PNG", help="save the estimation error plot to this file")
    p.add_argument("--save", metavar="NPY", help="save the trajectories (steps+1, n, 6)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)

    ctx = fs.init(size=args.size, seed=args.seed)
    if args.size is None and ctx.settings.size is None and ctx.settings.launcher_size is None:
        fs.init(size=DEFAULT_FISH, seed=args.seed)  # a plain run: no fogrun, no FOGSIM_SIZE
    start = time.perf_counter()
    history = fish.simulate(
        steps=args.steps,
        radius=args.radius,
        noise=args.noise,
        predator=args.predator,
        mode=args.mode,
        switch_step=args.switch_step,
        seed=args.seed,
        progress=not args.quiet and args.steps >= 100,
    )
    seconds = time.perf_counter() - start
    if fs.is_main_process():
        report(history, seconds)
        if args.save:
            np.save(args.save, history.trajectories())
        if args.plot:
            fish.plot_error(history, args.plot)
            print(f"saved {args.plot}")
        if args.gif:
            fish.animate(history, args.gif, every=args.every)
            print(f"saved {args.gif}")
    fs.shutdown()
    return history


def report(history: fish.SchoolHistory, seconds: float) -> None:
    """Print the errors and the distance to the predator at a few steps."""
    print(
        f"{history.n} fish, {history.steps} steps, {'/'.join(dict.fromkeys(history.modes))}: "
        f"{seconds:.2f} s"
    )
    print(" step  diffusion      alone    central   distance")
    distance = history.predator_distance()
    for k in sorted({*range(0, history.steps + 1, max(1, history.steps // 5)), history.steps}):
        print(
            f"{k:5d}  {history.errors[k]:9.4f}  {history.errors_alone[k]:9.4f}  "
            f"{history.errors_central[k]:9.4f}  {distance[k]:9.3f}"
        )


if __name__ == "__main__":
    main()
