"""Shared helpers for the runtime tests (tiny models, data, fake CUDA)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn


def tiny_mlp(seed: int = 0, width: int = 16) -> nn.Module:
    """A small deterministic MLP: 8 inputs, 3 classes."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))


def batches(n: int, batch: int = 4, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """``n`` batches of {"x": (batch, 8) floats, "y": (batch,) class ids}."""
    g = torch.Generator().manual_seed(seed)
    return [
        {"x": torch.randn(batch, 8, generator=g), "y": torch.randint(0, 3, (batch,), generator=g)}
        for _ in range(n)
    ]


@contextmanager
def fake_cuda(
    monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int]
) -> Iterator[None]:
    """Make torch.cuda report one GPU of ``name`` / ``capability`` (queries only)."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved
