"""A Siamese text-pair scorer: both sides of each pair go through one encoder and the loss is
the cosine between them. Planted: the encoder runs once per sample in a Python loop (written
that way because the per-pair code came first). --fixed encodes the whole batch in one call."""

import argparse

import _ab
import torch
from torch import nn


def encoder() -> nn.Module:
    return nn.Sequential(
        nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 64)
    )


def embed(enc: nn.Module, x: torch.Tensor, fixed: bool) -> torch.Tensor:
    if fixed:
        return enc(x)
    return torch.stack([enc(x[i]) for i in range(len(x))])  # planted: one sample per call


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    enc = encoder()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-3)
    for _ in range(args.steps):
        a, b = torch.randn(64, 128), torch.randn(64, 128)
        target = torch.randint(0, 2, (64,)).float() * 2 - 1
        loss = nn.functional.cosine_embedding_loss(
            embed(enc, a, args.fixed), embed(enc, b, args.fixed), target
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
