"""Planted problem: variable-length token lists are padded by a custom collate_fn, shuffled and
trimmed with drop_last; tokenising costs ~1 ms per item and the loader has no workers, so the
step waits. The fix must keep collate_fn, shuffle and drop_last as written."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sentences(Dataset):
    """Stands in for reading and tokenising text: costly per item, lengths vary."""

    def __len__(self) -> int:
        return 2048

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.001)  # tokenise
        return torch.randint(1, 500, (8 + i % 24,)), i % 2


def pad_batch(items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = nn.utils.rnn.pad_sequence([t for t, _ in items], batch_first=True)
    return tokens, torch.tensor([y for _, y in items])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    model = nn.Sequential(nn.EmbeddingBag(500, 64), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(
        Sentences(),
        24,
        shuffle=True,
        collate_fn=pad_batch,
        drop_last=True,
    )
    step = 0
    while step < args.steps:
        for tokens, labels in loader:
            loss = nn.functional.cross_entropy(model(tokens), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
