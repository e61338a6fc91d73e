"""Planted problem: a compiled function reads values on the host inside itself
(``torch.Tensor.item(t)`` called unbound, and ``.tolist()``): each is one graph break of the
user's. ``check`` wraps those tensor methods to find host syncs; the wrappers must add no
graph break of their own and no finding may point into torchdoctor's code."""

import argparse

import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        scale = torch.Tensor.item(h.abs().mean())  # host read: a graph break
        widths = (h > 0).sum(0).tolist()  # another one
        return h * scale + len(widths)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--backend", default="inductor")
    args = p.parse_args()
    model = Gate()
    compiled = torch.compile(model, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    for _ in range(args.steps):
        loss = compiled(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
