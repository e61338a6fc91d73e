"""Healthy control: a Trainer class with one optimizer built once, validation under
torch.no_grad() every 10 steps, and nothing left on."""

import argparse

import torch
from torch import nn


class Trainer:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.detach()

    @torch.no_grad()
    def validate(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.model(x), y)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10)
    )
    trainer = Trainer(model)
    xv, yv = torch.randn(256, 512), torch.randint(0, 10, (256,))
    for it in range(args.iters):
        x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
        trainer.step(x, y)
        if it % 10 == 9:
            trainer.validate(xv, yv)


if __name__ == "__main__":
    main()
