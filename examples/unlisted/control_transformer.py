"""Healthy control: a 2-layer transformer encoder trained on token batches, AdamW (foreach),
an evaluation under torch.no_grad() every 500 steps, the loss read every 100 steps."""

import argparse

import _ab
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, vocab: int = 4000, dim: int = 128) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 512, batch_first=True, dropout=0.0)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(tokens)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true", help="no effect: nothing to fix")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Encoder()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    data = torch.randint(0, 4000, (512, 33))
    for step in range(args.steps):
        batch = data[torch.randint(0, 512, (16,))]
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f}")
        if step % 500 == 499:
            with torch.no_grad():
                model(data[:16, :-1])
        _ab.tick()


if __name__ == "__main__":
    main()
