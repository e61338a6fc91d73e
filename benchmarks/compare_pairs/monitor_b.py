"""Pair "1.2x", NEW: the held-out metric every 50 steps instead of every step."""

import argparse

import torch
from torch import nn

torch.set_num_threads(1)  # a 2-core shared machine: one thread keeps the A/B about the code
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=1800)
p.add_argument("--log-every", type=int, default=50)
args = p.parse_args()
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
x_val = torch.randn(96, 256)
for step in range(args.steps):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % args.log_every == 0:
        with torch.no_grad():
            confidence = model(x_val).softmax(-1).amax(-1).mean()
