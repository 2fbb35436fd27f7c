"""Fish school: the fish estimate a predator's position by diffusion over their proximity
graph, then escape it or encircle it (see fogsim.demos.fish_school for the model).

    python examples/fish_school.py                          # 200 simulated fish
    python examples/fish_school.py --size 300 --mode encircle --gif school.gif --plot err.png
    fogrun -np 4 python examples/fish_school.py             # one MPI process per fish

Prints a title and a header naming the columns, then rows at a few steps: the mean distance
of the fish's estimates to the predator (by diffusion, by each fish alone, by a fusion
center tracking the average of every fish's fix) and the fish's mean distance to the
predator; then a last line saying how much sharing the estimates helped and where the
fish went. Simulated and MPI runs with the same number of fish and seed give the same
trajectories (--save writes them, steps x n x 6: position, velocity, estimate).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import fogsim as fs
from fogsim.demos import fish_school as fish

DEFAULT_FISH = 200


def main(argv: list[str] | None = None) -> fish.SchoolHistory:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help=f"fish (default {DEFAULT_FISH}); under fogrun -np N: N",
    )
    p.add_argument("--steps", type=int, default=200, help="default %(default)s")
    p.add_argument("--seed", type=int, default=0, help="seed of the school and the fixes")
    p.add_argument("--mode", choices=fish.MODES, default="escape", help="default %(default)s")
    p.add_argument(
        "--switch-step", type=int, default=None, help="switch to the other mode at this step"
    )
    p.add_argument(
        "--predator", choices=fish.PREDATOR_PATHS, default="circle", help="default %(default)s"
    )
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
        print(verdict(history))
    fs.shutdown()
    return history


def report(history: fish.SchoolHistory, seconds: float) -> None:
    """Print the errors and the distance to the predator at a few steps."""
    print(
        f"a school of {history.n} fish, {history.steps} steps, "
        f"{'/'.join(dict.fromkeys(history.modes))}: {seconds:.2f} s"
    )
    print(" step  diffusion error  alone error  central error  distance to predator")
    distance = history.predator_distance()
    for k in sorted({*range(0, history.steps + 1, max(1, history.steps // 5)), history.steps}):
        print(
            f"{k:5d}  {history.errors[k]:15.4f}  {history.errors_alone[k]:11.4f}  "
            f"{history.errors_central[k]:13.4f}  {distance[k]:20.3f}"
        )


def verdict(history: fish.SchoolHistory) -> str:
    """Return the last line: how much diffusion helped, and where the fish went."""
    shared, alone = history.errors[-1], history.errors_alone[-1]
    central = history.errors_central[-1]
    start, end = history.predator_distance()[[0, -1]]
    if shared < alone:
        helped = f"{alone / shared:.3g} times closer than a fish alone ({alone:.3f})"
    else:
        helped = f"no closer than a fish alone ({alone:.3f})"
    went = "grew" if end > start else "shrank"
    return (
        f"at step {history.steps} the fish's shared (diffusion) estimates are {shared:.3f} from "
        f"the predator on average, {helped}, against {central:.3f} for a fusion center; the "
        f"fish's mean distance to the predator {went} from {start:.2f} to {end:.2f}"
    )


if __name__ == "__main__":
    main()
