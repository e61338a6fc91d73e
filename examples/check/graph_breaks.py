"""Planted problem: the compiled model branches on a tensor's value inside forward, so dynamo
breaks the graph there every call."""

import argparse

import torch
from torch import nn


class GatedMLP(nn.Module):
    def __init__(self, dim: int = 256) -> None:
        super().__init__()
        self.up = nn.Linear(dim, dim * 4)
        self.down = nn.Linear(dim * 4, dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        if h.mean() > 0.1:  # data-dependent Python branch: a graph break
            h = h * 0.5
        h = self.down(h)
        return self.head(torch.tanh(h))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--backend", default="inductor")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # bf16 autocast and TF32 where tensor cores run them (sm80+), so that the planted problem
    # is the only one on a GPU too.
    amp = device == "cuda" and torch.cuda.get_device_capability()[0] >= 8
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GatedMLP().to(device)
    compiled = torch.compile(model, backend=args.backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 256, device=device)
    y = torch.randint(0, 10, (64,), device=device)
    for _ in range(args.steps):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = nn.functional.cross_entropy(compiled(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
