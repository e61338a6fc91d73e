"""A reproducibility helper the way many projects keep one in a utilities module: seeds every
generator and, while at it, asks for deterministic algorithms."""

import random

import torch


def make_reproducible(seed: int, strict: bool = True) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if strict:
        torch.use_deterministic_algorithms(True)  # planted: nobody compares runs bit for bit
