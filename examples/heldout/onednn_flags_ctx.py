"""A convolutional classifier trained inside torch.backends.mkldnn.flags(enabled=False),
left there after comparing outputs between backends."""

import argparse

import torch
from torch import nn


def build() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(512, 10),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=40)
    args = p.parse_args()
    torch.manual_seed(0)
    cnn = build()
    opt = torch.optim.SGD(cnn.parameters(), lr=0.01)
    with torch.backends.mkldnn.flags(enabled=False):
        for _ in range(args.iters):
            imgs, cls = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
            loss = nn.functional.cross_entropy(cnn(imgs), cls)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
