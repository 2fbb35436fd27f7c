"""Decentralized training of an MLP on the digits data set: ATC SGD vs gradient allreduce.

Each agent holds its own shard of the 8x8 digit images (1797 samples, scikit-learn's
``load_digits``; 20% are held out as the test set) and trains its own replica of a
64-64-10 MLP. Three methods start from the same initial model:

* ``atc-exp2``: adapt-then-combine SGD, parameters mixed with the exponential-2 neighbors;
* ``atc-one-peer``: the same on the dynamic one-peer exponential-2 topology (one neighbor
  per step, a new weight matrix every step);
* ``allreduce``: gradients averaged over all agents (Horovod-style data parallelism).

    python examples/decentralized_training.py                  # 8 simulated agents
    fogrun -np 4 python examples/decentralized_training.py     # one MPI process per agent
    python examples/decentralized_training.py --plot digits.png --epochs 30

The script is written once: ``fogsim.optim.replicate`` stacks the 8 replicas into one
module in simulation (a torch optimizer then steps them all at once) and is the plain
module under MPI; agent-local data comes from ``fs.local``. It prints the data set, a header
naming the columns, and a row per method and epoch: the mean training loss and the test
accuracy of the agents' models (mean and worst agent); after each method its final accuracy
and time, and a last line comparing the methods' final accuracies. Without scikit-learn a
synthetic stand-in (noisy 8x8 class prototypes) is used and said so.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import fogsim as fs
from fogsim import optim as fo
from fogsim import topology as T

METHODS = ("atc-exp2", "atc-one-peer", "allreduce")


def load_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, str]:
    """Return the images (N x 64, scaled to [0, 1]), the labels and the data set's name."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return (*synthetic_digits(seed), "synthetic stand-in (scikit-learn is not installed)")
    digits = load_digits()
    return digits.data / 16.0, digits.target.astype(np.int64), "digits"


def synthetic_digits(seed: int, count: int = 1797) -> tuple[np.ndarray, np.ndarray]:
    """Return a digits-shaped stand-in: 10 smooth 8x8 prototypes plus pixel noise."""
    rng = np.random.default_rng(seed)
    protos = rng.random((10, 8, 8))
    protos = (protos + np.roll(protos, 1, 1) + np.roll(protos, 1, 2)) / 3  # smoother strokes
    labels = rng.integers(0, 10, count)
    images = protos[labels].reshape(count, 64) + 0.3 * rng.standard_normal((count, 64))
    return np.clip(images, 0, 1), labels.astype(np.int64)


def mlp(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--size", type=int, default=None, help="simulated agents (default 8); under fogrun -np N: N"
    )
    p.add_argument(
        "--methods", default=",".join(METHODS), help=f"comma-separated, from {', '.join(METHODS)}"
    )
    p.add_argument("--epochs", type=int, default=15, help="default %(default)s")
    p.add_argument("--batch", type=int, default=16, help="samples per agent and step")
    p.add_argument("--lr", type=float, default=0.1, help="SGD's step size (%(default)s)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD's (%(default)s)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (%(default)s)")
    p.add_argument(
        "--dtype", choices=["float32", "float64"], default="float32", help="default %(default)s"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the models")
    p.add_argument("--plot", metavar="PNG", help="save accuracy and loss curves to this file")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    args = p.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            p.error(f"unknown method {m!r}; choose from {', '.join(METHODS)}")

    fs.init(size=args.size, seed=args.seed)
    if args.size is None and fo.is_simulated() and "FOGSIM_SIZE" not in os.environ:
        fs.init(size=8, seed=args.seed)  # this example's default; fogrun --sim -np N: N
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    images, labels, source = load_data(args.seed)
    data = split(images, labels, fs.size(), args.seed, dtype)
    if fs.is_main_process():
        print(
            f"{source}: {len(labels)} samples, {data['shard']} per agent for "
            f"{fs.size()} agents, {len(data['y_test'])} for testing"
            f"{'' if fo.is_simulated() else ' (MPI)'}"
        )
        print(
            f"{'method':>13}  {'epoch':>5}  {'loss':>7}  {'test accuracy':>13}  {'worst agent':>11}"
        )

    results: dict = {"source": source}
    for method in methods:
        start = time.perf_counter()
        results[method] = train(method, data, args, dtype)
        if fs.is_main_process():
            acc = results[method]["accuracy"][-1]
            print(
                f"{method}: final test accuracy {acc:.4f} (mean over agents), "
                f"{time.perf_counter() - start:.1f} s"
            )
    if args.plot and fs.is_main_process():
        plot(results, methods, args.plot)
    if fs.is_main_process() and methods:
        print(verdict(results, methods, args.epochs))
    fs.shutdown()
    return results


def verdict(results: dict, methods: list[str], epochs: int) -> str:
    """Return the last line: the methods' final test accuracies compared."""
    final = {m: results[m]["accuracy"][-1] for m in methods}
    reached = ", ".join(f"{m} {a:.4f}" for m, a in final.items())
    line = f"after {epochs} epochs the mean test accuracy is {reached}"
    decentralized = [m for m in methods if m != "allreduce"]
    if "allreduce" in final and decentralized:
        best = max(decentralized, key=final.__getitem__)
        gap = 100 * (final["allreduce"] - final[best])
        if gap > 0:
            compared = f"{gap:.2f} points behind allreduce"
        elif gap < 0:
            compared = f"{-gap:.2f} points ahead of allreduce"
        else:
            compared = "level with allreduce"
        line += f": decentralized training ({best}) ends {compared}"
    return line


def split(images, labels, n: int, seed: int, dtype) -> dict:
    """Hold out 20% for testing; give each agent an equal share of the rest (agent-local)."""
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = len(labels) // 5
    test, train_idx = order[:n_test], order[n_test:]
    shard = len(train_idx) // n
    x = torch.as_tensor(images, dtype=dtype)
    y = torch.as_tensor(labels)
    return {
        "shard": shard,
        "x": fs.local(lambda r: x[train_idx[r * shard : (r + 1) * shard]]),
        "y": fs.local(lambda r: y[train_idx[r * shard : (r + 1) * shard]]),
        "x_test": fs.local(lambda r: x[test]),  # every agent tests on the same set
        "y_test": y[test],
    }


def train(method: str, data: dict, args, dtype) -> dict:
    """Train every agent's replica with ``method``; return per-epoch loss and accuracy."""
    n = fs.size()
    if method == "atc-exp2":
        fs.set_topology(T.exponential_two_graph(n))
    torch.manual_seed(args.seed)  # every method, every process: the same initial model
    model = fo.replicate(mlp(args.hidden).to(dtype))
    fo.broadcast_parameters(model.state_dict(), root_rank=0)
    sgd = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    if method == "allreduce":
        opt = fo.DistributedGradientAllreduceOptimizer(sgd, model)
    else:
        opt = fo.DistributedAdaptThenCombineOptimizer(sgd, model)
    schedule = T.one_peer_exponential_two(n) if method == "atc-one-peer" else None
    loss_fn = fo.per_agent(F.cross_entropy)
    steps = data["shard"] // args.batch
    history: dict[str, list[float]] = {"loss": [], "accuracy": [], "worst_accuracy": []}

    epochs = range(args.epochs)
    bar = None
    if fs.is_main_process() and not args.no_progress:
        from tqdm.auto import tqdm

        bar = epochs = tqdm(epochs, desc=method, unit="epoch", leave=False)
    for epoch in epochs:
        model.train()
        # agent r's own shuffle of its shard; gathered with batch-friendly indexing
        perm = fs.local(
            lambda r, e=epoch: torch.as_tensor(
                np.random.default_rng([args.seed, r, e]).permutation(data["shard"])
            )
        )
        total = torch.zeros(n) if fo.is_simulated() else torch.zeros(())
        for t in range(steps):
            idx = perm[..., t * args.batch : (t + 1) * args.batch]
            x = torch.take_along_dim(data["x"], idx[..., None], dim=-2)
            y = torch.take_along_dim(data["y"], idx, dim=-1)
            if schedule is not None:
                opt.src_weights = next(schedule).weights
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.sum().backward()
            opt.step()
            total += loss.detach().to(total.dtype)
        model.eval()
        with torch.no_grad():
            pred = model(data["x_test"]).argmax(-1)
            acc = (pred == data["y_test"]).to(torch.float64).mean(-1)
        losses = fs.global_view(total / steps)
        accs = fs.global_view(acc)
        history["loss"].append(float(losses.mean()))
        history["accuracy"].append(float(accs.mean()))
        history["worst_accuracy"].append(float(accs.min()))
        if fs.is_main_process():
            line = (
                f"{method:>13}  {epoch + 1:5d}  {history['loss'][-1]:7.4f}  "
                f"{history['accuracy'][-1]:13.4f}  {history['worst_accuracy'][-1]:11.4f}"
            )
            (bar.write if bar is not None else print)(line)
    if bar is not None:
        bar.close()
    opt.remove_hooks()
    return history


def plot(results: dict, methods: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for method in methods:
        epochs = np.arange(1, len(results[method]["loss"]) + 1)
        ax1.plot(epochs, results[method]["accuracy"], label=method)
        ax2.semilogy(epochs, results[method]["loss"], label=method)
    ax1.set(xlabel="epoch", ylabel="test accuracy (mean over agents)", ylim=(0.8, 1.0))
    ax2.set(xlabel="epoch", ylabel="training loss")
    ax1.legend()
    fig.suptitle(f"MLP on {results['source'].split(' ')[0]}, {fs.size()} agents")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
