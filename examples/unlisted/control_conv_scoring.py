"""Healthy control: a small convolutional classifier scoring whole image batches under
torch.inference_mode() (batched conv inference, every intra-op thread busy in each conv)."""

import argparse

import _ab
import torch
from torch import nn


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        block(3, 32),
        block(32, 64),
        block(64, 128),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    ).eval()
    images = torch.randn(4, 16, 3, 32, 32)
    labels = []
    with torch.inference_mode():
        for step in range(args.steps):
            labels.append(model(images[step % 4]).argmax(-1))
            _ab.tick()
    print(f"scored {sum(t.numel() for t in labels)} images")


if __name__ == "__main__":
    main()
