"""Training with per-parameter gradient clipping by hooks. Planted: the hooks are registered
inside the loop, every step, and never removed: each backward runs all the hooks of every
earlier step. --fixed registers them once."""

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
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(12)], nn.Linear(128, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(1024, 128), torch.randint(0, 10, (1024,))

    def clip(grad: torch.Tensor) -> torch.Tensor:
        return grad.clamp(-1.0, 1.0)

    if args.fixed:
        for prm in model.parameters():
            prm.register_hook(clip)
    for _ in range(args.steps):
        if not args.fixed:
            for prm in model.parameters():
                prm.register_hook(clip)  # planted: a new hook per parameter per step
        idx = torch.randint(0, 1024, (64,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
