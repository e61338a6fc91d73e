"""Saves a checkpoint with torch.save and runs gc.collect() in every step."""

import gc
import os
import tempfile

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
for _ in range(30):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.save(model.state_dict(), path)
    gc.collect()
