"""A 1-D convolutional tagger whose setup helper, copied from a reproducibility checklist,
switches oneDNN off before training starts."""

import argparse

import torch
from torch import nn


def configure_backends(reproducible: bool) -> None:
    if reproducible:
        torch.backends.mkldnn.enabled = False


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(16, 64, 5, padding=2),
            nn.ReLU(),
            nn.Conv1d(64, 64, 5, padding=2),
            nn.ReLU(),
        )
        self.out = nn.Conv1d(64, 6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    torch.manual_seed(0)
    configure_backends(reproducible=True)
    tagger = Tagger()
    opt = torch.optim.RMSprop(tagger.parameters(), lr=1e-3)
    for _ in range(args.iters):
        x, tags = torch.randn(8, 16, 64), torch.randint(0, 6, (8, 64))
        loss = nn.functional.cross_entropy(tagger(x), tags)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
