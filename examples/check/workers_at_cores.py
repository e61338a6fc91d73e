"""Planted problem: the DataLoader already runs one worker per CPU with persistent workers,
and each item still costs ~4 ms of CPU work (a Python loop standing in for augmentation), so
the step waits anyway. More workers cannot help; the fix must say so and point at the
per-item cost, not suggest settings the loader already has."""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        acc = 0
        for k in range(40_000):  # CPU-bound per-item work (no sleep: the CPUs are busy)
            acc += k * i % 7
        return torch.full((128,), float(acc % 5)), i % 4


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    # The workers take every CPU; one intra-op thread keeps the training process from spinning
    # against them (with the default, its tiny ops took 200-500 ms on a busy 2-CPU machine).
    torch.set_num_threads(1)
    model = nn.Linear(128, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(
        Augmented(),
        batch_size=8,
        num_workers=os.cpu_count() or 1,
        persistent_workers=True,
        prefetch_factor=4,
    )
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 >= args.steps:
            break


if __name__ == "__main__":
    main()
