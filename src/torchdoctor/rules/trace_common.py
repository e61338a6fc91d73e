"""Shared by the trace rules: severity from the registry's policy, and building a finding."""

from __future__ import annotations

from typing import Any

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules.finding import Finding, FindingId, Severity
from torchdoctor.rules.registry import spec


def grade(fid: FindingId, share: float) -> Severity:
    """The severity the finding's registered policy gives a share of the step."""
    return spec(fid).severity.grade(share)


def finding(
    a: TraceAnalysis,
    fid: FindingId,
    title: str,
    saving_ms: float,
    severity: Severity,
    evidence: dict[str, Any],
    *,
    fix: str | None = None,
    explanation: str | None = None,
    where: list[str] | None = None,
) -> Finding:
    """Build a finding, clamping the saving to the step (a fix cannot save more than all).

    The fix defaults to the registered builder called without inputs, the explanation and the
    docs link come from the registry.
    """
    s = spec(fid)
    step = a.mean_step_ms
    saving = float(min(max(saving_ms, 0.0), step))
    share = saving / step if step > 0 else 0.0
    return Finding(
        fid,
        title,
        severity,
        round(saving, 3),
        round(share, 4),
        {"mean_step_ms": round(step, 3), **evidence},
        s.fix() if fix is None else fix,
        s.explanation if explanation is None else explanation,
        s.doc_url,
        where=where or [],
    )
