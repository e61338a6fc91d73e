"""Codemods by id, and the codemods of each finding.

A finding names its codemods on its registry entry (``FindingSpec.codemods``, in
``rules/catalog_*.py``), so adding a remedy is one id there and one module under
``fix/codemods/``. ``PENDING`` holds findings that a run folder may carry before this version
registers them (a newer check's ids); an id registered with codemods of its own wins.
"""

from __future__ import annotations

from torchdoctor.fix.codemods import (
    anomaly,
    compile_model,
    dataloader,
    host_sync,
    inference,
    mark_dynamic,
    non_blocking,
    optimizer,
    precision,
)
from torchdoctor.fix.codemods.base import Codemod

CODEMODS: dict[str, Codemod] = {
    c.id: c  # type: ignore[misc]
    for c in (
        dataloader.CODEMOD,
        non_blocking.CODEMOD,
        optimizer.CODEMOD,
        compile_model.CODEMOD,
        host_sync.CODEMOD,
        anomaly.CODEMOD,
        inference.CODEMOD,
        mark_dynamic.CODEMOD,
        precision.BF16,
        precision.TF32,
    )
}
"""Every codemod by id, in documentation order."""

PENDING: dict[str, tuple[str, ...]] = {}
"""Codemods of findings not registered in this version (their rule ships separately)."""


def codemods_for(finding_id: str) -> tuple[str, ...]:
    """The codemod ids for a finding: its registry entry's, else ``PENDING``'s, else none."""
    from torchdoctor.rules.registry import REGISTRY

    spec = REGISTRY.get(finding_id)
    if spec is not None and spec.codemods:
        return spec.codemods
    return PENDING.get(finding_id, ())


def codemod(codemod_id: str) -> Codemod:
    """The codemod with this id (KeyError names it)."""
    try:
        return CODEMODS[codemod_id]
    except KeyError:
        raise KeyError(f"unknown codemod {codemod_id!r}") from None
