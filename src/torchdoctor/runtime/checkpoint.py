"""Full-state checkpoints through the strategy: unsharded tensors in one ``torch.save`` file, so
a checkpoint written under FSDP2 loads into a single process, DDP, or another world size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

import torchdoctor.runtime.distributed as distributed
from torchdoctor.errors import UserError
from torchdoctor.runtime.module import RuntimeModule
from torchdoctor.runtime.strategy import Strategy


def _own(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, RuntimeModule) else model


def save_checkpoint(
    strategy: Strategy, path: str | Path, model: nn.Module, optimizer: Any | None, rank: int
) -> Path:
    """Gather the model (and optimizer) state on every rank, write it from rank 0, wait."""
    module = _own(model)
    state: dict[str, Any] = {"model": strategy.state_dict(module)}
    if optimizer is not None:
        state["optimizer"] = strategy.optimizer_state_dict(module, optimizer)
    p = Path(path)
    if rank == 0:
        torch.save(state, p)
    distributed.barrier()
    return p


def load_checkpoint(
    strategy: Strategy, path: str | Path, model: nn.Module, optimizer: Any | None
) -> None:
    """Read ``path`` on this rank and load it into ``model`` (sharding it again under FSDP2)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such checkpoint")
    state = torch.load(p, map_location="cpu", weights_only=True)
    module = _own(model)
    strategy.load_state_dict(module, state["model"])
    if optimizer is not None and "optimizer" in state:
        strategy.load_optimizer_state_dict(module, optimizer, state["optimizer"])
