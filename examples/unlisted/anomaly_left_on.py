"""A small classifier trained on synthetic features. Planted: autograd anomaly detection,
switched on while chasing a NaN weeks ago, is still on. --fixed removes it."""

import argparse

import _ab
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    if not args.fixed:
        torch.autograd.set_detect_anomaly(True)  # the planted mistake
    torch.manual_seed(0)
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()) for _ in range(6)],
        nn.Linear(256, 20),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(2048, 256), torch.randint(0, 20, (2048,))
    for _ in range(args.steps):
        idx = torch.randint(0, 2048, (128,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
