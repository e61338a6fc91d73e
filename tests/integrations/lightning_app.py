"""A tiny Lightning training run with a planted problem: ``num_workers=0`` over a dataset whose
``__getitem__`` sleeps, so every step waits for its batch. Used by the tests both through
``DoctorCallback`` and as a script under ``torchdoctor check``; the classes are built against
``lightning.pytorch`` or ``pytorch_lightning``."""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


def build(namespace: str = "lightning.pytorch", delay_s: float = 0.002) -> tuple[type, type, Any]:
    """(TinyModel, Data, make_trainer) written against ``namespace``; each sample costs
    ``delay_s`` to load."""
    L: Any = importlib.import_module(namespace)

    class Data(L.LightningDataModule):  # type: ignore[misc]
        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(SlowDataset(delay_s), batch_size=8, num_workers=0)

    class TinyModel(L.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def make_trainer(callbacks: list[Any], logger: Any = False, max_steps: int = 10) -> Any:
        return L.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=max_steps,
            callbacks=callbacks,
            logger=logger,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            num_sanity_val_steps=0,
        )

    return TinyModel, Data, make_trainer


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """64 samples of 16 features; each item costs ``delay_s`` of CPU time to 'decode'."""

    def __init__(self, delay_s: float = 0.002) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(64, 16, generator=g)
        self.y = torch.randint(0, 4, (64,), generator=g)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:  # sleep(0) still yields the CPU: a few ms on a busy machine
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


if __name__ == "__main__":
    torch.manual_seed(0)
    model_cls, data_cls, make = build(os.environ.get("TD_TEST_LIGHTNING", "lightning.pytorch"))
    make([], max_steps=int(sys.argv[1]) if len(sys.argv) > 1 else 10).fit(model_cls(), data_cls())
