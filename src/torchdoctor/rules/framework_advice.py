"""Fixes phrased in a framework's own settings.

The rules write fixes for a hand-written loop (``DataLoader(num_workers=4)``, ``torch.autocast``,
``DDP(bucket_cap_mb=...)``). Under Lightning or the Hugging Face ``Trainer`` those lines live
elsewhere: in ``Trainer(precision=...)``, the ``LightningDataModule``, or ``TrainingArguments``.
``rewrite`` swaps the fix for the framework's version (each registry entry's ``frameworks``) and
keeps the original in the evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import REGISTRY
from torchdoctor.rules.spec import Framework

FixFor = Callable[[Finding], str]


def _table(framework: Framework) -> dict[str, FixFor]:
    return {s.id: fix for s in REGISTRY.values() for name, fix in s.frameworks if name == framework}


LIGHTNING: dict[str, FixFor] = _table("lightning")
"""Fix per finding id under PyTorch Lightning (the registry entries' ``frameworks``)."""

TRANSFORMERS: dict[str, FixFor] = _table("transformers")
"""Fix per finding id under the Hugging Face Trainer (the registry entries' ``frameworks``)."""

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
