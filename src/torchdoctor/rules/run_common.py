"""Shared pieces of the run-level rules: building a finding through the registry, and running
a run family rule (``rules/families/``: its spec judges and words what it measured)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from torchdoctor.record.run import RunRecord
from torchdoctor.rules.finding import Finding, FindingId, Severity
from torchdoctor.rules.registry import spec
from torchdoctor.rules.spec import Measured, RunRule


def make(
    run: RunRecord,
    fid: FindingId,
    title: str,
    saving_ms: float,
    evidence: dict[str, Any],
    fix: str | None = None,
    explanation: str | None = None,
    where: list[str] | None = None,
    severity: Severity | None = None,
) -> Finding:
    """A finding with its saving capped at the mean step and its severity from the registered
    policy (``severity`` overrides it). Fix, explanation and docs link
    default to the registry entry's."""
    s = spec(fid)
    step = run.step_ms
    saving = max(0.0, min(saving_ms, step)) if step else 0.0
    share = saving / step if step else 0.0
    level = s.severity.grade(share)
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


def family_findings(rule: RunRule, run: RunRecord) -> list[Finding]:
    """A run family rule's measurements, each judged and worded by its registry entry: the
    spec's threshold and gates fire it; its title, fix builder and severity policy make the
    finding, the severity graded on the saving's share of the mean step (capped at the step)
    and held between :attr:`~torchdoctor.rules.spec.Measured.least` and ``most``. A one-off
    cost (``Measured.once``) ranks by its cost spread over the steps it is paid for."""
    return [f for f in (_finding(rule, m, run) for m in rule.measurements(run)) if f]


def _finding(rule: RunRule, m: Measured, run: RunRecord) -> Finding | None:
    if not rule.fires(m):
        return None
    m, s = m.complete(), rule.spec
    title, fix, explanation = s.wording(m)
    saving = m.saving_ms
    if m.once is not None:
        from torchdoctor.rules.one_off import spread

        saving, steps, basis = spread(run, m.once)
    step = run.step_ms
    share = max(0.0, min(saving, step)) / step if step else 0.0
    f = make(
        run,
        s.id,
        title,
        saving,
        m.evidence,
        fix,
        explanation,
        where=list(m.where),
        severity=replace(m, share=share).severity(s.severity),
    )
    if m.once is None:
        return f
    from torchdoctor.rules.one_off import marked

    return marked(run, f, m.once, steps, basis)
