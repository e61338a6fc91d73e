"""Training that keeps a checkpoint for preemption. Planted: the checkpoint (model and
optimizer state) is saved after every step. --fixed saves every 200 steps."""

import argparse
import os
import tempfile

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(1024, 1024), torch.randint(0, 10, (1024,))
    path = os.path.join(tempfile.mkdtemp(), "last.pt")
    every = 200 if args.fixed else 1
    for step in range(args.steps):
        idx = torch.randint(0, 1024, (64,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % every == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step}
            torch.save(state, path)  # planted
        _ab.tick()


if __name__ == "__main__":
    main()
