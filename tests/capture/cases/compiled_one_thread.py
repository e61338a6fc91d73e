"""A compiled model on one intra-op thread, chosen by the script: check's thread toggle would
switch ``torch.set_num_threads``, one of dynamo's guards, and recompile the model."""

import torch
from torch import nn


def main() -> None:
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    for _ in range(300):
        loss = (compiled(x) - y).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
