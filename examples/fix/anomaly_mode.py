"""Planted problem for `torchdoctor fix`: autograd anomaly detection, switched on while a NaN
was being hunted, was left on. Every forward operator records a Python stack and every
backward output is checked for NaN, on every step of the run."""

import argparse

import torch
from torch import nn

# Left on after debugging a NaN last week.
torch.autograd.set_detect_anomaly(True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()) for _ in range(6)]
    model = nn.Sequential(*blocks, nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
