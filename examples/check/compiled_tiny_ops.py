"""Planted problem: the model is already compiled, but the step is still made of many tiny
operators (a per-parameter for-loop optimizer and small tensors), so framework overhead sets
the step time. The fix must not suggest torch.compile(model) again; it names the next step
(here the fused optimizer; on a GPU, CUDA graphs)."""

import argparse

import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--backend", default="inductor")
    args = p.parse_args()
    layers = [nn.Linear(8, 8) for _ in range(48)]
    model = nn.Sequential(*[m for layer in layers for m in (layer, nn.Tanh())])
    compiled = torch.compile(model, backend=args.backend)
    # foreach=False: one small kernel per parameter and state tensor
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(4, 8)
    for _ in range(args.steps):
        loss = compiled(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
