"""A classifier that reports the epoch's accuracy at the end. Planted: each step's logits are
appended to a list for that report as they are, with their autograd graph: the list grows by a
batch of logits every step and never lets them go. --fixed keeps only the predicted classes,
detached."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 1000))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    kept, labels = [], []
    for _ in range(args.steps):
        x, y = torch.randn(512, 128), torch.randint(0, 1000, (512,))
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        kept.append(logits.detach().argmax(1) if args.fixed else logits)  # planted: with graph
        labels.append(y)
        _ab.tick()
    accuracy = torch.cat(kept).argmax(-1) if not args.fixed else torch.cat(kept)
    print(f"accuracy {(accuracy == torch.cat(labels)).float().mean():.4f}")


if __name__ == "__main__":
    main()
