"""A recommender-style model whose samples are kept as Python dicts. Planted: gc.collect()
runs every step (added once to "fix" a memory leak). --fixed removes it."""

import argparse
import gc

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    # 60k samples as Python objects: every full collection walks them all.
    samples = [
        {"user": i % 5000, "item": (i * 7) % 20000, "clicks": [i % 3, i % 5]} for i in range(60_000)
    ]
    users, items = nn.Embedding(5000, 64), nn.Embedding(20000, 64)
    head = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1))
    params = [*users.parameters(), *items.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    for step in range(args.steps):
        batch = samples[step * 256 : (step + 1) * 256]
        u = torch.tensor([s["user"] for s in batch])
        it = torch.tensor([s["item"] for s in batch])
        label = torch.tensor([float(s["clicks"][0] > 0) for s in batch])
        logit = head(torch.cat([users(u), items(it)], 1)).squeeze(1)
        loss = nn.functional.binary_cross_entropy_with_logits(logit, label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not args.fixed:
            gc.collect()  # planted
        _ab.tick()


if __name__ == "__main__":
    main()
