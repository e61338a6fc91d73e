"""Healthy control: a 2-layer LSTM tagger scoring token batches under torch.inference_mode()
(one aten::lstm call per batch: the recurrent layers' matrix products are inside it)."""

import argparse

import _ab
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self, vocab: int = 5000, dim: int = 128, hidden: int = 256) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, 2, batch_first=True)
        self.head = nn.Linear(hidden, 20)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(tokens))[0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Tagger().eval()
    data = torch.randint(0, 5000, (8, 32, 48))
    tags = []
    with torch.inference_mode():
        for step in range(args.steps):
            tags.append(model(data[step % 8]).argmax(-1))
            _ab.tick()
    print(f"tagged {sum(t.numel() for t in tags)} tokens")


if __name__ == "__main__":
    main()
