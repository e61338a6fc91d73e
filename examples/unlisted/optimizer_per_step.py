"""Fine-tuning the head of a small network with Adam. Planted: the optimizer is built inside
the loop (so its moments also restart every step). --fixed builds it once."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(24)], nn.Linear(256, 10))
    x, y = torch.randn(1024, 256), torch.randint(0, 10, (1024,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4) if args.fixed else None
    for _ in range(args.steps):
        if not args.fixed:
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # the planted mistake
        idx = torch.randint(0, 1024, (32,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
