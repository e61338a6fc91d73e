"""A Lightning run with torchdoctor's callback: a DataModule whose loader has ``num_workers=0``
over a dataset that takes 4 ms per sample, so each step waits for its batch.

    python examples/integrations/lightning_doctor.py

Prints the callback's headline and the first finding's fix, phrased in Lightning's terms.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchdoctor.integrations.lightning import DoctorCallback


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.x = torch.randn(128, 32)
        self.y = torch.randint(0, 4, (128,))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.004)  # decoding / augmentation in the training process
        return self.x[i], self.y[i]


class Data(L.LightningDataModule):
    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(SlowDataset(), batch_size=16, num_workers=0)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # keep the output short
    doctor = DoctorCallback(warmup_steps=3, profile_steps=3)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=24,  # 3 warm-up, 8 clean, the profiler's own, 3 profiled, 5 clean again
        callbacks=[doctor],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(Classifier(), Data())
    assert doctor.result is not None and doctor.result.report is not None
    first = doctor.result.report["findings"][0]
    print(doctor.result.headline)
    print(f"framework: {doctor.result.record['framework']}")
    print(f"fix ({first['id']}):\n{first['fix']}")


if __name__ == "__main__":
    main()
