"""Decentralized training of a small convolutional network, as a BlueFog program.

Each rank trains its own replica on its own shard of a synthetic MNIST-like data set
(8x8 images of 10 classes: a fixed random prototype per class plus noise), with
``bf.DistributedAdaptWithCombineOptimizer`` averaging the parameters with the neighbours
at every step (BlueFog's default, ``neighbor_allreduce`` over the exponential-2 graph).
The replicas start from rank 0's weights (``bf.broadcast_parameters``) and its optimizer
state (``bf.broadcast_optimizer_state``). Run it on fogsim, unchanged, with

    fogrun --bluefog -np 4 python examples/bluefog/synthetic_mnist.py

Rank 0 prints a header naming the columns, then every epoch the mean training loss and the
test accuracy averaged over ranks; at the end ``consensus distance`` (the largest gap
between a rank's parameters and their average) and, last, ``accuracy ok: True`` when the
mean test accuracy reached ``--min-accuracy`` (``False`` otherwise), with what that means.
"""

import argparse
import sys

import bluefog.torch as bf
import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description="decentralized CNN training on BlueFog's API")
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--samples", type=int, default=512, help="training samples per rank")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--min-accuracy", type=float, default=0.9)
args = parser.parse_args()

bf.init()


def make_data(count: int, seed: int):
    """``count`` noisy copies of the 10 class prototypes (the same prototypes everywhere)."""
    prototypes = torch.randn(10, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (count,), generator=g)
    images = prototypes[labels] + 0.8 * torch.randn(count, 1, 8, 8, generator=g)
    return images, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


train_x, train_y = make_data(args.samples, seed=1 + bf.rank())  # this rank's shard
test_x, test_y = make_data(1000, seed=10_000)

torch.manual_seed(bf.rank())  # different initial weights: broadcast makes them equal
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
bf.broadcast_parameters(model.state_dict(), root_rank=0)
bf.broadcast_optimizer_state(optimizer, root_rank=0)
optimizer = bf.DistributedAdaptWithCombineOptimizer(optimizer, model=model)

if bf.rank() == 0:
    sys.stdout.write("epoch  training loss  test accuracy (mean over ranks)\n")
for epoch in range(args.epochs):
    model.train()
    total = 0.0
    for start in range(0, args.samples, args.batch_size):
        x, y = train_x[start : start + args.batch_size], train_y[start : start + args.batch_size]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).double().mean()
    stats = bf.allreduce(torch.tensor([total / args.samples, accuracy.item()]), name="stats")
    if bf.rank() == 0:
        sys.stdout.write(f"{epoch + 1:5d}  {stats[0]:13.4f}  {stats[1]:13.3f}\n")

flat = torch.cat([p.detach().flatten() for p in model.parameters()])
gap = torch.norm(flat - bf.allreduce(flat, name="mean_params"))
worst_gap = bf.allgather(gap.reshape(1), name="gaps").max().item()
if bf.rank() == 0:
    sys.stdout.write(f"consensus distance {worst_gap:.3e}\n")
    accuracy = stats[1].item()
    ok = accuracy >= args.min_accuracy
    sys.stdout.write(
        f"accuracy ok: {ok}: after {args.epochs} epochs the ranks' mean test accuracy is "
        f"{accuracy:.3f}, {'at least' if ok else 'below'} --min-accuracy {args.min_accuracy:g}"
        f"{': decentralized training learned the task' if ok else ''}\n"
    )
bf.shutdown()
