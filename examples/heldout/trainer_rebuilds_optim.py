"""A small Trainer class. Its step method asks configure_optimizers() for the optimizer,
which builds a fresh AdamW each call, so the moments restart every step."""

import argparse

import torch
from torch import nn


class Trainer:
    def __init__(self, model: nn.Module, lr: float) -> None:
        self.model = model
        self.lr = lr

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr, weight_decay=0.01)

    def training_step(self, xb: torch.Tensor, yb: torch.Tensor) -> float:
        optim = self.configure_optimizers()
        out = self.model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        return float(loss.detach())

    def fit(self, data: torch.Tensor, labels: torch.Tensor, iters: int) -> None:
        for _ in range(iters):
            sel = torch.randint(0, data.shape[0], (96,))
            self.training_step(data[sel], labels[sel])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=60)
    args = p.parse_args()
    torch.manual_seed(0)
    body = nn.Sequential(*[nn.Sequential(nn.Linear(448, 448), nn.Tanh()) for _ in range(10)])
    model = nn.Sequential(body, nn.Linear(448, 7))
    Trainer(model, 3e-4).fit(torch.randn(3000, 448), torch.randint(0, 7, (3000,)), args.iters)


if __name__ == "__main__":
    main()
