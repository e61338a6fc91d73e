"""A tabular model whose rows came from a CSV reader as Python lists of floats. Planted: every
batch is converted with torch.tensor(list of lists) inside the loop. --fixed converts the
whole table to one tensor before training and indexes it."""

import argparse
import random

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    rnd = random.Random(0)
    rows = [[rnd.random() for _ in range(200)] for _ in range(20_000)]  # as csv.reader left them
    labels = [rnd.randrange(5) for _ in range(20_000)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(200, 128), nn.ReLU(), nn.Linear(128, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    table = torch.tensor(rows) if args.fixed else None
    targets = torch.tensor(labels)
    for _ in range(args.steps):
        idx = [rnd.randrange(20_000) for _ in range(512)]
        if table is not None:  # noqa: SIM108 (the planted line stays on its own)
            x = table[idx]
        else:
            x = torch.tensor([rows[i] for i in idx])  # planted: every step
        loss = nn.functional.cross_entropy(model(x), targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
