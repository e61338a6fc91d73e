"""Pair "rare stalls", BASE: a DataLoader with a worker that starts again every (short) epoch."""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)  # a 2-core shared machine: one thread keeps the A/B about the code
p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=150)
args = p.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
loader = DataLoader(data, batch_size=64, num_workers=1)
for _ in range(args.epochs):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
