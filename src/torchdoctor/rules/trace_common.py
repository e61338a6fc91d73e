"""Shared by the trace rules: severity from a share, and building a finding with its fix."""

from __future__ import annotations

from typing import Any

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules import fixes
from torchdoctor.rules.finding import Finding, FindingId, Severity


def severity(share: float, warn: float, critical: float) -> Severity:
    return "critical" if share >= critical else "warning" if share >= warn else "info"


def finding(
    a: TraceAnalysis,
    fid: FindingId,
    title: str,
    saving_ms: float,
    severity: Severity,
    evidence: dict[str, Any],
    **kw: Any,
) -> Finding:
    """Build a finding, clamping the saving to the step (a fix cannot save more than all)."""
    step = a.mean_step_ms
    saving = float(min(max(saving_ms, 0.0), step))
    share = saving / step if step > 0 else 0.0
    fix, url, why = fixes.FIXES[fid]
    evidence = {"mean_step_ms": round(step, 3), **evidence}
    return Finding(
        fid,
        title,
        severity,
        round(saving, 3),
        round(share, 4),
        evidence,
        kw.pop("fix", fix),
        kw.pop("explanation", why),
        url,
        **kw,
    )
