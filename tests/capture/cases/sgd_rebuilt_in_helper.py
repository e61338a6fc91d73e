"""A held-out case for check's 'built once' measurement (written after it, never tuned on):
SGD with momentum and weight decay, rebuilt every step inside a helper function the loop calls,
on a model of a few wide layers. Its first step() clones every gradient into a momentum buffer;
built once, the buffers are reused."""

import torch
from torch import nn


def make_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    for _ in range(60):
        opt = make_optimizer(model, lr=0.01)  # rebuilt every step, through the helper
        idx = torch.randint(0, 256, (16,))
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
