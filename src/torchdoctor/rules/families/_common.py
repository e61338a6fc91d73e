"""Helpers the family modules share (not a family: the package skips ``_`` modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torchdoctor.rules.spec import Framework, FrameworkFix
from torchdoctor.trace.arrays import unique_codes

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.rules.finding import Finding
    from torchdoctor.trace.kinds import Kind


def count_names(a: TraceAnalysis, predicate: Callable[[str], bool], *kinds: Kind) -> dict[str, int]:
    """How many events of ``kinds`` whose name satisfies ``predicate`` start in the window."""
    t = a.table
    lo, hi = a.steps.window
    rows = t.rows_named(predicate, *kinds)
    rows = rows[(t.ts[rows] >= lo) & (t.ts[rows] < hi)]
    codes, _, counts = unique_codes(t.name[rows])
    return {t.names[int(c)]: int(n) for c, n in zip(codes, counts, strict=True)}


def share_of_step(a: TraceAnalysis, ms: float) -> float:
    """``ms`` per step as a share of the mean step (0 for a trace without steps' time)."""
    return ms / a.mean_step_ms if a.mean_step_ms else 0.0


def _workers(f: Finding) -> int:
    """The worker count the finding measured (4 when it did not)."""
    value = f.evidence.get("suggested_num_workers")
    return int(value) if isinstance(value, int | float) else 4


LOADER_FRAMEWORKS: tuple[tuple[Framework, FrameworkFix], ...] = (
    (
        "lightning",
        lambda f: (
            "# in your LightningDataModule (or LightningModule).train_dataloader():\n"
            f"return DataLoader(self.train_set, batch_size=..., num_workers={_workers(f)},\n"
            "                  persistent_workers=True,\n"
            "                  pin_memory=True)  # pinned batches: for GPU runs"
        ),
    ),
    (
        "transformers",
        lambda f: (
            f"TrainingArguments(..., dataloader_num_workers={_workers(f)},\n"
            "                  dataloader_persistent_workers=True)  # pinned by default"
        ),
    ),
)
"""The DataLoader settings phrased for the frameworks that build the loader (``dataloader-config``
and the trace's ``data-loading-bound``)."""
