"""Project helpers shared by the held-out scripts (a 'utils' module, as many projects have)."""

from __future__ import annotations

import random

import torch


def seed_everything(seed: int) -> None:
    """Seed every generator and make the run repeatable."""
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def mlp(width: int, depth: int, out: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, out))
