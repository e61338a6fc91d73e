"""Fine-tuning loop over epochs and batches whose inner loop builds its SGD optimizer for each
batch (the learning rate is recomputed per batch and passed to a fresh optimizer)."""

import argparse

import torch
from torch import nn


def lr_at(step: int) -> float:
    return 0.05 * 0.5 ** (step / 200)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    clf = nn.Sequential(
        nn.Linear(300, 600), nn.ReLU(), nn.Linear(600, 600), nn.ReLU(), nn.Linear(600, 20)
    )
    data, labels = torch.randn(1280, 300), torch.randint(0, 20, (1280,))
    step = 0
    for _ in range(args.epochs):
        for start in range(0, 1280, 64):
            sgd = torch.optim.SGD(clf.parameters(), lr=lr_at(step), momentum=0.9, nesterov=True)
            logits = clf(data[start : start + 64])
            loss = nn.functional.cross_entropy(logits, labels[start : start + 64])
            sgd.zero_grad()
            loss.backward()
            sgd.step()
            step += 1


if __name__ == "__main__":
    main()
