"""Training that tracks a hold-out loss every step through a closure; the closure runs the
model with autograd recording, although nothing ever calls backward on it."""

import argparse

import torch
from torch import nn


def make_holdout_metric(net: nn.Module, xs: torch.Tensor, ys: torch.Tensor):
    def holdout_loss() -> float:
        pred = net(xs)
        return nn.functional.mse_loss(pred, ys).item()

    return holdout_loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(256, 1024), nn.SiLU(), nn.Linear(1024, 1024), nn.SiLU(), nn.Linear(1024, 1)
    )
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    xs, ys = torch.randn(512, 256), torch.randn(512, 1)
    metric = make_holdout_metric(net, xs, ys)
    history = []
    for _ in range(args.iters):
        xb, yb = torch.randn(64, 256), torch.randn(64, 1)
        loss = nn.functional.mse_loss(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(metric())


if __name__ == "__main__":
    main()
