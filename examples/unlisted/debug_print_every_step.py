"""A classifier with a debugging print left in the loop. Planted: the logits and the
per-sample losses are printed every step (tensor formatting in Python, written to the
terminal or log). --fixed prints the mean loss every 100 steps."""

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
    torch.set_printoptions(threshold=100_000)  # set while debugging: print everything
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 20))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(4096, 64), torch.randint(0, 20, (4096,))
    for step in range(args.steps):
        idx = torch.randint(0, 4096, (256,))
        logits = model(x[idx])
        losses = nn.functional.cross_entropy(logits, y[idx], reduction="none")
        loss = losses.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not args.fixed:
            print(f"step {step} logits {logits.detach()} losses {losses.detach()}")  # planted
        elif step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}")
        _ab.tick()


if __name__ == "__main__":
    main()
