"""A tiny Hugging Face ``Trainer`` run built in code (no downloads): a 2-layer BERT-style
classifier from a config, over a dataset whose ``__getitem__`` sleeps, with
``dataloader_num_workers=0`` (the planted problem). Runnable as a script for ``check``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset


class SlowTokens(Dataset[dict[str, torch.Tensor]]):
    """64 sequences of 16 token ids; each costs ``delay_s`` to 'tokenize'."""

    def __init__(self, delay_s: float = 0.03) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 100, (64, 16), generator=g)
        self.labels = torch.randint(0, 2, (64,), generator=g)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.delay_s:  # sleep(0) still yields the CPU: a few ms on a busy machine
            time.sleep(self.delay_s)
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def make_trainer(
    out: Path, callbacks: list[Any], max_steps: int = 10, delay_s: float = 0.03
) -> Any:
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        num_labels=2,
    )
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        per_device_train_batch_size=8,
        dataloader_num_workers=0,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1000,
        disable_tqdm=True,
    )
    model = BertForSequenceClassification(config)
    return Trainer(model=model, args=args, train_dataset=SlowTokens(delay_s), callbacks=callbacks)


if __name__ == "__main__":
    make_trainer(Path(sys.argv[1]), [], max_steps=int(sys.argv[2])).train()
