"""A character-level language model. Planted: the recurrence steps an nn.LSTMCell one time
step at a time in Python. --fixed runs the same recurrence with nn.LSTM over the sequence."""

import argparse

import _ab
import torch
from torch import nn


class CharModel(nn.Module):
    def __init__(self, vocab: int, hidden: int, fixed: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.fixed = fixed
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True) if fixed else None
        self.cell = None if fixed else nn.LSTMCell(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        if self.lstm is not None:
            h, _ = self.lstm(x)
            return self.out(h)
        b, t, d = x.shape
        hx = cx = x.new_zeros(b, d)
        outs = []
        for i in range(t):  # planted: one time step per Python iteration
            hx, cx = self.cell(x[:, i], (hx, cx))
            outs.append(hx)
        return self.out(torch.stack(outs, 1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = CharModel(96, 256, args.fixed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(args.steps):
        tokens = torch.randint(0, 96, (32, 33))
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
