"""A held-out case for a cost that lands in another operator: SGD with momentum rebuilt in the
loop. Each new optimizer makes its momentum buffers again (a copy of every gradient) in its
first step(), so step() pays for the rebuild, not only the constructor."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(128, 128) for _ in range(12)])
for _ in range(60):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)  # rebuilt every step
    x = torch.randn(16, 128)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
