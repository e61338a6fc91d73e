"""CPU training of a small image model. Planted: oneDNN (mkldnn) was switched off, once, to
chase a numerical difference, and never back on. --fixed leaves it on."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    if not args.fixed:
        torch.backends.mkldnn.enabled = False  # planted
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 8 * 8, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(512, 3, 32, 32), torch.randint(0, 10, (512,))
    for _ in range(args.steps):
        idx = torch.randint(0, 512, (32,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
