"""What ``torchdoctor check`` says when the script trains with Lightning or the HF Trainer:
the callback gives the same report from inside the framework, with fixes in its settings."""

from __future__ import annotations

import sys

FRAMEWORK_MODULES = {
    "lightning": ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"),
    "transformers": ("transformers.trainer",),
}
"""A framework counts as in use once its trainer module was imported (both load lazily)."""

HINTS = {
    "lightning": (
        "this script trains with PyTorch Lightning: for fixes phrased as Trainer and "
        "LightningDataModule settings, add the callback:\n"
        "    from torchdoctor.integrations.lightning import DoctorCallback\n"
        "    Trainer(..., callbacks=[DoctorCallback()])"
    ),
    "transformers": (
        "this script trains with the Hugging Face Trainer: for fixes phrased as "
        "TrainingArguments, add the callback:\n"
        "    from torchdoctor.integrations.transformers import DoctorCallback\n"
        "    Trainer(..., callbacks=[DoctorCallback()])"
    ),
}


def frameworks_in_use() -> list[str]:
    """The training frameworks whose trainer this process imported, in a fixed order."""
    return [
        name
        for name, modules in FRAMEWORK_MODULES.items()
        if any(m in sys.modules for m in modules)
    ]


def framework_hint(frameworks: list[str]) -> str:
    """The report lines that point at the callbacks ('' when no framework was seen)."""
    return "".join(f"hint: {HINTS[f]}\n" for f in frameworks if f in HINTS)
