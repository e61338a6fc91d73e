"""A hand-written SGD loop: no torch.optim optimizer, no DataLoader; each step is one
backward() and a manual parameter update."""

import torch

torch.manual_seed(0)
w = torch.randn(256, 256, requires_grad=True)
x = torch.randn(64, 256)
for _ in range(50):
    loss = (x @ w).relu().pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
