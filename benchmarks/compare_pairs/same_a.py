"""Pair "no change", BASE: a small MLP trained on synthetic data (one thread)."""

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # a 2-core shared machine: one thread keeps the A/B about the code
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=2500)
args = p.parse_args()
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
for _ in range(args.steps):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
