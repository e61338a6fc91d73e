"""A sequence regressor whose forward method unrolls an nn.GRUCell over the time axis in
Python; no step's input depends on an earlier output, so nn.GRU would do it in one call."""

import argparse

import torch
from torch import nn


class SeqRegressor(nn.Module):
    def __init__(self, feat: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(feat, hidden)
        self.head = nn.Linear(hidden, 1)
        self.hidden = hidden

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        h = seq.new_zeros(seq.shape[0], self.hidden)
        for t in range(seq.shape[1]):
            h = self.cell(seq[:, t], h)
        return self.head(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=40)
    args = p.parse_args()
    torch.manual_seed(0)
    model = SeqRegressor(24, 128)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.iters):
        seq, tgt = torch.randn(32, 48, 24), torch.randn(32, 1)
        loss = nn.functional.mse_loss(model(seq), tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
