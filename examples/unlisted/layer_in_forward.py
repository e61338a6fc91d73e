"""A text classifier over mean-pooled embeddings. Planted: the output projection is built
inside forward() (fresh random weights each call, never trained). --fixed builds it in
__init__."""

import argparse

import _ab
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self, vocab: int, dim: int, classes: int, fixed: bool) -> None:
        super().__init__()
        self.emb = nn.EmbeddingBag(vocab, dim)
        self.hidden = nn.Linear(dim, 1024)
        self.fixed = fixed
        self.classes = classes
        if fixed:
            self.proj = nn.Linear(1024, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.hidden(self.emb(tokens)))
        proj = self.proj if self.fixed else nn.Linear(1024, self.classes)  # planted
        return proj(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Classifier(20000, 256, 2000, args.fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        tokens = torch.randint(0, 20000, (64, 48))
        labels = torch.randint(0, 2000, (64,))
        loss = nn.functional.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
