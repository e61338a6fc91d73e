"""Shared pieces of the run-level rules: building a finding through the registry."""

from __future__ import annotations

from typing import Any

from torchdoctor.record.run import RunRecord
from torchdoctor.rules.finding import Finding, FindingId, Severity
from torchdoctor.rules.registry import spec


def make(
    run: RunRecord,
    fid: FindingId,
    title: str,
    saving_ms: float,
    evidence: dict[str, Any],
    fix: str | None = None,
    explanation: str | None = None,
    where: list[str] | None = None,
    floor: Severity | None = None,
    severity: Severity | None = None,
) -> Finding:
    """A finding with its saving capped at the mean step and its severity from the registered
    policy (``floor`` raises it, ``severity`` overrides it). Fix, explanation and docs link
    default to the registry entry's."""
    s = spec(fid)
    step = run.step_ms
    saving = max(0.0, min(saving_ms, step)) if step else 0.0
    share = saving / step if step else 0.0
    level = s.severity.grade(share)
    if floor is not None:
        level = max(level, floor, key=["info", "warning", "critical"].index)
    return Finding(
        id=fid,
        title=title,
        severity=s.severity.floored(severity or level, share),
        saving_ms_per_step=round(saving, 4),
        share_of_step=round(min(share, 1.0), 4),
        evidence={"mean_step_ms": step, **evidence},
        fix=s.fix() if fix is None else fix,
        explanation=s.explanation if explanation is None else explanation,
        doc_url=s.doc_url,
        where=where or [],
    )
