"""Asynchronous push-sum: agents average without waiting for each other, through windows.

    python examples/async_push_sum.py                         # 16 simulated agents, lock-step
    python examples/async_push_sum.py --activation bernoulli --max-delay 5 --plot ps.png
    python examples/async_push_sum.py --ahead 800 --iters 900 # agent 0 runs 800 steps alone
    fogrun -np 4 python examples/async_push_sum.py            # really asynchronous processes

Each agent keeps a value x and a weight p (p starts at 1). In every iteration an agent
keeps a share 1/(d+1) of both and adds a share to each of its d out-neighbors' window
buffers (``win_accumulate`` under the receivers' mutexes), then folds whatever arrived
into its own x and p and empties its buffers (``win_update_then_collect``). No mass is
created or lost, so the sum of p stays n and x/p tends to the average of the initial x,
whatever order and speed the agents run at. In simulation the asynchrony is modelled
(``--activation``, ``--max-delay``, ``--loss``: see ``fogsim.set_asynchrony``).

An agent far ahead of the others (under load, or ``--ahead K``: in simulation agent 0
alone acts in the first K iterations) gives shares of x and p away while nothing arrives,
so both shrink by 1/(d+1) a step and underflow to 0 within a few hundred steps (463 with
d = 4): x/p would be 0/0 = nan. The estimate z is therefore read with
``fogsim.algorithms.push_sum_estimate``, which divides only where p is not tiny and else
holds the agent's last estimate (its ratio has not changed meanwhile); z moves again once
the others' shares arrive.

Prints a header naming the columns, then ``iteration  max_i |z_i - xbar| / |xbar|`` (the
worst agent's relative error, z_i its estimate x_i/p_i) at the start and every
``--report-every`` iterations; then a last line with the final relative error (after a
last collect of what is still in the buffers) and the total mass sum_i p_i, saying whether
every agent holds the average and whether mass was lost.
"""

from __future__ import annotations

import numpy as np
from _common import TOPOLOGIES, digits, finish, header, levelled, report

import fogsim as fs
from fogsim import algorithms as A


def relative_error(z, xbar) -> float:
    """Return max_i ||z_i - xbar|| / ||xbar||, the same number on every agent."""
    err = fs.vmap(lambda v, m: np.array([np.linalg.norm(v - m) / np.linalg.norm(m)]))(z, xbar)
    return float(np.max(fs.global_view(err)))


def verdict(final: float, curve: list[float], mass: float, n: int) -> str:
    """Return the last line: the final error and mass, and what they mean."""
    start = curve[0]
    if final <= 1e-6:
        meaning = f"every agent's x/p is the average of the initial vectors, {digits(final)}"
    elif final < start and levelled(curve):
        meaning = "x/p stopped approaching the average before reaching it"
    elif final < start:
        meaning = "x/p is approaching the average but not there yet (run more --iters)"
    else:
        meaning = "x/p did not approach the average: the run does not converge"
    lost = abs(mass - n) > 1e-9 * n
    kept = "mass was lost (lost messages carry it away)" if lost else "no mass was lost"
    return (
        f"final relative error {final:.3e} ({start:.2e} at the start), total mass "
        f"sum(p) = {mass!r} (n = {n}): {meaning}, and {kept}"
    )


def main(argv: list[str] | None = None) -> dict:
    import argparse

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="simulated agents (default FOGSIM_SIZE, else 16); under fogrun -np N: N",
    )
    p.add_argument(
        "--topology", choices=list(TOPOLOGIES), default="exp2", help="default %(default)s"
    )
    p.add_argument("--iters", type=int, default=200, help="iterations (default %(default)s)")
    p.add_argument("--dim", type=int, default=4, help="length of each agent's vector")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and the asynchrony")
    p.add_argument(
        "--activation",
        choices=["all", "one", "bernoulli", "speeds"],
        default="all",
        help="which agents act in a round (simulated; default %(default)s: lock-step)",
    )
    p.add_argument("--p-active", type=float, default=0.5, help="for --activation bernoulli")
    p.add_argument("--max-delay", type=int, default=0, help="rounds a message may be late")
    p.add_argument("--loss", type=float, default=0.0, help="probability a message is lost")
    p.add_argument(
        "--ahead",
        type=int,
        default=0,
        metavar="K",
        help="agent 0 alone acts in the first K iterations (simulated; default 0)",
    )
    p.add_argument(
        "--report-every", type=int, default=20, help="print a row every this many iterations"
    )
    p.add_argument(
        "--lockstep",
        action="store_true",
        help="a barrier after each window op (MPI then equals the simulator)",
    )
    p.add_argument("--plot", metavar="PNG", help="save the error curve to this file")
    p.add_argument("--save", metavar="NPY", help="save every agent's final x/p (n x dim)")
    args = p.parse_args(argv)

    fs.init(size=args.size, seed=args.seed)
    n = fs.size()
    topo = TOPOLOGIES[args.topology](n)
    fs.set_topology(topo)
    model = {"max_delay": args.max_delay, "loss": args.loss, "seed": args.seed}
    if args.activation == "bernoulli":
        model["p_active"] = args.p_active
    if args.activation == "speeds":  # every fourth agent straggles at a fifth of the speed
        model["speeds"] = np.where(np.arange(n) % 4 == 3, 0.2, 1.0)
    if args.ahead > 0:  # agent 0 runs ahead: the others, 1e-300 times as fast, never act
        alone = np.r_[1.0, np.full(n - 1, 1e-300)]
        fs.set_asynchrony(
            "speeds", speeds=alone, max_delay=args.max_delay, loss=args.loss, seed=args.seed
        )
    else:
        fs.set_asynchrony(args.activation, **model)

    data = np.random.default_rng(args.seed).standard_normal((n, args.dim))
    x = fs.local(lambda r: data[r].copy())
    xbar = fs.local(lambda r: data.mean(axis=0))

    def share_of(r: int) -> float:  # what agent r keeps, and sends to each out-neighbor
        return 1.0 / (len(topo.out_neighbors(r)) + 1)

    share = fs.local(share_of)
    dst = fs.local(lambda r: dict.fromkeys(topo.out_neighbors(r), share_of(r)))

    fs.set_win_ops_with_associated_p(True)
    fs.win_create(x, "x", zero_init=True)
    sync = fs.barrier if args.lockstep else (lambda: None)
    header("max_i |z_i - xbar| / |xbar| (the worst agent's relative error, z_i = x_i/p_i)")
    z = x.copy()  # the estimate: x / p where p is not tiny, else the last one (p starts at 1)
    curve = [relative_error(z, xbar)]
    report(0, curve[0])
    for k in range(1, args.iters + 1):
        if k == args.ahead + 1 and args.ahead > 0:  # the others start
            fs.set_asynchrony(args.activation, **model)
        fs.win_accumulate(x, "x", self_weight=share, dst_weights=dst, require_mutex=True)
        sync()
        fs.win_update_then_collect("x")
        sync()
        z = A.push_sum_estimate(x, fs.win_associated_p("x"), z)
        if k % args.report_every == 0 or k == args.iters:
            curve.append(relative_error(z, xbar))
            report(k, curve[-1])
    fs.barrier()  # every agent has stopped sending ...
    fs.win_update_then_collect("x")  # ... so this collects everything still in the buffers
    mass = float(
        np.ravel(fs.allreduce(np.asarray(fs.win_associated_p("x"))[..., None], average=False))[0]
    )
    z = A.push_sum_estimate(x, fs.win_associated_p("x"), z)
    final = relative_error(z, xbar)
    fs.win_free()
    args.topology = f"{args.topology}, asynchronous push-sum"
    finish(args, z, curve, "max relative error of x/p", verdict(final, curve, mass, n))
    return {"error": final, "mass": mass, "curve": curve}


if __name__ == "__main__":
    main()
