"""Planted problem: every batch has a different sequence length and the model is compiled with
dynamic=False, so each new length recompiles (until the recompile limit, then it runs eager)."""

import argparse
import random

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, dim)
        self.mix = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        h = h + self.mix(h)
        return self.head(h.mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--backend", default="inductor")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # bf16 autocast and TF32 where tensor cores run them (sm80+), so that the planted problem
    # is the only one on a GPU too.
    amp = device == "cuda" and torch.cuda.get_device_capability()[0] >= 8
    torch.backends.cuda.matmul.allow_tf32 = True
    model = Encoder().to(device)
    compiled = torch.compile(model, dynamic=False, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    rng = random.Random(0)
    for _ in range(args.steps):
        length = rng.randrange(16, 200)  # unpadded sentences: a new shape almost every step
        tokens = torch.randint(0, 1000, (8, length), device=device)
        labels = torch.randint(0, 2, (8,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(compiled(tokens), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
