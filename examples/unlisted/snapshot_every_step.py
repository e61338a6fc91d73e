"""Training that keeps the weights of its best step so far (by the training loss).
Planted: the snapshot is a fresh copy.deepcopy of the state dict at every improvement, which
while the loss falls is every step. --fixed copies into the tensors of one snapshot, in place,
and only every 20 steps."""

import argparse
import copy

import _ab
import torch
from torch import nn


def remember(model: nn.Module) -> dict[str, torch.Tensor]:
    return copy.deepcopy(model.state_dict())  # planted


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(768, 768), nn.ReLU()) for _ in range(6)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 768)
    best_loss, best = float("inf"), remember(model)
    for step in range(args.steps):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fixed:
            if step % 20 == 0:
                with torch.no_grad():
                    for kept, t in zip(best.values(), model.state_dict().values(), strict=True):
                        kept.copy_(t)
        elif loss.item() < best_loss:
            best_loss, best = loss.item(), remember(model)
        _ab.tick()


if __name__ == "__main__":
    main()
