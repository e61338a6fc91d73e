"""A loop whose first signal is a DataLoader batch and whose steps are optimizer steps: with a
one-step warm-up the window opens on the batch signal, is discarded when the first optimizer
step arrives, and opens again (this crashed torch's profiler before the reopening waited for the
next signal)."""

import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(256, 32))
loader = DataLoader(data, batch_size=32)
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _epoch in range(3):
    for (x,) in loader:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
