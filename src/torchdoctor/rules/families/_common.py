"""Helpers the family modules share (not a family: the package skips ``_`` modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torchdoctor.trace.arrays import unique_codes

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
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
