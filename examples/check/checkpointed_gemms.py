"""Planted situation: a deep MLP trained with activation checkpointing on every block. Large
matmuls hold the step (compute-bound, not framework overhead); checkpointing makes backward
run every block's forward again, and the report must name that recomputation's cost."""

import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, dim * 2)
        self.down = nn.Linear(dim * 2, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dim", type=int, default=512)
    args = p.parse_args()
    blocks = nn.ModuleList(Block(args.dim) for _ in range(4))
    opt = torch.optim.SGD(blocks.parameters(), lr=1e-3)
    x = torch.randn(256, args.dim)
    for _ in range(args.steps):
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
        loss = h.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
