"""Healthy control: a small convolutional network trained on in-memory images, batch 64,
oneDNN on, SGD with momentum (foreach), no per-step reads of device values."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 6 * 6, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)
    x, y = torch.randn(2048, 3, 24, 24), torch.randint(0, 10, (2048,))
    for _ in range(args.steps):
        idx = torch.randint(0, 2048, (64,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
