"""Planted problem: a compiled scoring function takes a batch of features and an index tensor
whose *second* dimension (candidates per query) changes every step; with dynamic=False every
new width recompiles. The fix must name that tensor and dimension: mark_dynamic(idx, 1).

``--mark-dynamic`` applies that fix, to show it removes the recompiles."""

import argparse
import random

import torch
from torch import nn


class Scorer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, feats: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        h = self.proj(feats)  # (queries, 32)
        picked = h[idx.clamp(max=h.shape[0] - 1)]  # (queries, candidates, 32)
        return (picked * h[:, None, :]).sum(-1).logsumexp(-1).mean()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--mark-dynamic", action="store_true")
    args = p.parse_args()
    model = Scorer()
    compiled = torch.compile(model, dynamic=False, backend=args.backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rng = random.Random(0)
    feats = torch.randn(64, 32)
    for _ in range(args.steps):
        idx = torch.randint(0, 64, (64, rng.randrange(4, 60)))  # candidates per query vary
        if args.mark_dynamic:
            torch._dynamo.mark_dynamic(idx, 1)
        loss = compiled(feats, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
