"""A step function wrapped in the anomaly-detection context manager while chasing a NaN
long ago; the NaN is gone but the context manager stayed."""

import argparse

import torch
from torch import nn


class Step:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autograd.detect_anomaly(check_nan=True):
            loss = nn.functional.binary_cross_entropy_with_logits(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
        self.opt.step()
        return loss.detach()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        *[m for _ in range(8) for m in (nn.Linear(320, 320), nn.ReLU())], nn.Linear(320, 1)
    )
    step = Step(model)
    for _ in range(args.iters):
        x = torch.randn(128, 320)
        step(x, (x.sum(1, keepdim=True) > 0).float())


if __name__ == "__main__":
    main()
