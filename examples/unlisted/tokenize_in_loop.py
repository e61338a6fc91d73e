"""A sentiment classifier trained from raw text. Planted: every batch is tokenized, looked up
in the vocabulary and padded in Python inside the training loop, although the texts never
change. --fixed tokenizes the corpus once, before training."""

import argparse
import random

import _ab
import torch
from torch import nn

WORDS = [f"w{i}" for i in range(5000)]


def tokenize(texts: list[str], vocab: dict[str, int], length: int) -> torch.Tensor:
    rows = []
    for text in texts:
        ids = [vocab.get(w.lower().strip(".,!?"), 1) for w in text.split()][:length]
        rows.append(ids + [0] * (length - len(ids)))
    return torch.tensor(rows)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()
    rnd = random.Random(0)
    corpus = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(80, 200))) for _ in range(4096)]
    labels = torch.randint(0, 2, (4096,))
    vocab = {w: i + 2 for i, w in enumerate(WORDS)}
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.EmbeddingBag(5002, 128), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 2)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pre = tokenize(corpus, vocab, 128) if args.fixed else None
    for _ in range(args.steps):
        idx = [rnd.randrange(4096) for _ in range(128)]
        if pre is not None:  # noqa: SIM108 (the planted line stays on its own)
            tokens = pre[idx]
        else:
            tokens = tokenize([corpus[i] for i in idx], vocab, 128)  # planted
        loss = nn.functional.cross_entropy(model(tokens), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _ab.tick()


if __name__ == "__main__":
    main()
