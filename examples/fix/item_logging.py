"""Planted problem for `torchdoctor fix`: every step logs the loss and each layer's gradient
norm, largest entry and mean with .item(). On a GPU each .item() waits for all queued work; on any
device the reductions and the formatting are work the step does for a line nobody reads at
this rate."""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(24)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)
    target = torch.randn(16, 32)
    for step in range(args.steps):
        loss = nn.functional.mse_loss(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # per-layer gradient statistics, to watch for vanishing or exploding gradients
        print(
            f"step {step} loss {loss.item():.5f} "
            + " ".join(
                f"{n}={q.grad.norm().item():.2e}/{q.grad.abs().max().item():.2e}"
                f"/{q.grad.mean().item():.2e}"
                for n, q in model.named_parameters()
            )
        )


if __name__ == "__main__":
    main()
