"""Pair "2x", NEW: float32, the default."""

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # a 2-core shared machine: one thread keeps the A/B about the code
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=400)
args = p.parse_args()
torch.manual_seed(0)
DTYPE = torch.float32
model = nn.Sequential(
    nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
).to(DTYPE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(256, 512, dtype=DTYPE), torch.randint(0, 10, (256,))
for _ in range(args.steps):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
