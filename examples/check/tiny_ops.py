"""Planted problem: a model built from dozens of tiny layers plus a per-parameter optimizer
loop: hundreds of microsecond-sized operators per step, so framework overhead sets the pace."""

import argparse

import torch
from torch import nn


class ManySmallLayers(nn.Module):
    def __init__(self, depth: int = 40, dim: int = 16) -> None:
        super().__init__()
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(dim)) for _ in range(depth))
        self.shifts = nn.ParameterList(nn.Parameter(torch.zeros(dim)) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for scale, shift in zip(self.scales, self.shifts, strict=True):
            x = torch.tanh(x * scale + shift)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = ManySmallLayers().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(8, 16, device=device)
    for _ in range(args.steps):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
