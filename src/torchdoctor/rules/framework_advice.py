"""Fixes phrased in a framework's own settings.

The rules write fixes for a hand-written loop (``DataLoader(num_workers=4)``, ``torch.autocast``,
``DDP(bucket_cap_mb=...)``). Under Lightning or the Hugging Face ``Trainer`` those lines live
elsewhere: in ``Trainer(precision=...)``, the ``LightningDataModule``, or ``TrainingArguments``.
``rewrite`` swaps the fix for the framework's version and keeps the original in the evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from torchdoctor.rules.finding import Finding

Framework = Literal["lightning", "transformers"]
FixFor = Callable[[Finding], str]


def _workers(f: Finding) -> int:
    value = f.evidence.get("suggested_num_workers")
    return int(value) if isinstance(value, int | float) else 4


LIGHTNING: dict[str, FixFor] = {
    "dataloader-config": lambda f: (
        "# in your LightningDataModule (or LightningModule).train_dataloader():\n"
        f"return DataLoader(self.train_set, batch_size=..., num_workers={_workers(f)},\n"
        "                  persistent_workers=True,\n"
        "                  pin_memory=True)  # pinned batches: for GPU runs"
    ),
    "data-loading-bound": lambda f: (
        "# in your LightningDataModule.train_dataloader():\n"
        "return DataLoader(self.train_set, batch_size=..., num_workers=4,\n"
        "                  persistent_workers=True, pin_memory=True)"
    ),
    "fp32-on-bf16-gpu": lambda f: 'Trainer(precision="bf16-mixed")',
    "fp32-gemm-no-tensor-cores": lambda f: 'Trainer(precision="bf16-mixed")',
    "fp16-without-grad-scaler": lambda f: (
        'Trainer(precision="16-mixed")  # Lightning adds the GradScaler itself\n'
        '# or, on Ampere or later: Trainer(precision="bf16-mixed") (no scaler needed)'
    ),
    "grad-scaler-with-bf16": lambda f: 'Trainer(precision="bf16-mixed")  # no scaler with bf16',
    "tf32-off": lambda f: 'torch.set_float32_matmul_precision("high")  # before Trainer.fit',
    "exposed-communication": lambda f: (
        "from lightning.pytorch.strategies import DDPStrategy\n"
        "Trainer(strategy=DDPStrategy(gradient_as_bucket_view=True, static_graph=True))\n"
        "# or fewer reductions per sample: Trainer(accumulate_grad_batches=4)"
    ),
    "exposed-all-gather": lambda f: (
        "from torch.distributed.fsdp import BackwardPrefetch\n"
        "from lightning.pytorch.strategies import FSDPStrategy\n"
        "Trainer(strategy=FSDPStrategy(forward_prefetch=True,\n"
        "                              backward_prefetch=BackwardPrefetch.BACKWARD_PRE))\n"
        "# FSDP2 (ModelParallelStrategy): in configure_model, after fully_shard:\n" + f.fix
    ),
    "data-parallel": lambda f: 'Trainer(accelerator="gpu", devices=-1, strategy="ddp")',
    "host-bound": lambda f: (
        "# in your LightningModule:\n"
        "def configure_model(self):\n"
        "    self.model = torch.compile(self.model)"
    ),
    "host-syncs-in-step": lambda f: (
        "# in training_step: log the tensor, not loss.item(); Lightning reduces it lazily\n"
        'self.log("train_loss", loss, on_step=True, sync_dist=False)\n'
        "Trainer(log_every_n_steps=50)"
    ),
}
"""Fix per finding id under PyTorch Lightning."""

TRANSFORMERS: dict[str, FixFor] = {
    "dataloader-config": lambda f: (
        f"TrainingArguments(..., dataloader_num_workers={_workers(f)},\n"
        "                  dataloader_persistent_workers=True)  # pinned by default"
    ),
    "data-loading-bound": lambda f: (
        "TrainingArguments(..., dataloader_num_workers=4,\n"
        "                  dataloader_persistent_workers=True)  # pinned by default"
    ),
    "fp32-on-bf16-gpu": lambda f: "TrainingArguments(..., bf16=True)",
    "fp32-gemm-no-tensor-cores": lambda f: "TrainingArguments(..., bf16=True, tf32=True)",
    "fp16-without-grad-scaler": lambda f: (
        "TrainingArguments(..., fp16=True)  # the Trainer adds the GradScaler itself\n"
        "# or, on Ampere or later: TrainingArguments(..., bf16=True)"
    ),
    "grad-scaler-with-bf16": lambda f: "TrainingArguments(..., bf16=True)  # no scaler with bf16",
    "tf32-off": lambda f: "TrainingArguments(..., tf32=True)",
    "exposed-communication": lambda f: (
        "TrainingArguments(..., gradient_accumulation_steps=4)\n"
        "# accumulation all-reduces once per optimizer step, not once per micro-batch"
    ),
    "exposed-all-gather": lambda f: (
        'TrainingArguments(..., fsdp="full_shard auto_wrap",\n'
        '                  fsdp_config={"forward_prefetch": True, '
        '"backward_prefetch": "backward_pre"})'
    ),
    "host-bound": lambda f: "TrainingArguments(..., torch_compile=True)",
    "low-gpu-utilization": lambda f: "TrainingArguments(..., torch_compile=True)",
    "recompiles": lambda f: (
        "TrainingArguments(..., torch_compile=True)\n"
        "# pad to a fixed length so shapes stay the same: tokenizer(..., padding='max_length')"
    ),
    "host-syncs-in-step": lambda f: (
        "TrainingArguments(..., logging_steps=50)  # each log reads the loss back from the GPU"
    ),
}
"""Fix per finding id under the Hugging Face Trainer."""

_TABLES: dict[str, dict[str, FixFor]] = {"lightning": LIGHTNING, "transformers": TRANSFORMERS}


def rewrite(finding: Finding, framework: str) -> Finding:
    """``finding`` with its fix in ``framework``'s terms (unchanged when there is no entry);
    the loop-level fix is kept in ``evidence["pytorch_fix"]``."""
    build = _TABLES.get(framework, {}).get(finding.id)
    if build is None:
        return finding
    evidence: dict[str, Any] = {**finding.evidence, "pytorch_fix": finding.fix}
    return dataclasses.replace(finding, fix=build(finding), evidence=evidence)


def rewriter(framework: str) -> Callable[[Finding], Finding]:
    """``rewrite`` bound to one framework (what ``publish`` takes)."""
    return lambda f: rewrite(f, framework)
