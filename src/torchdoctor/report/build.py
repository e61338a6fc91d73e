"""Build a report from a trace file or a folder of per-rank traces."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.analysis.bundle import TraceAnalysis, analyze_table
from torchdoctor.errors import TraceError
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.rank_rules import RankRow, rank_rows, straggler
from torchdoctor.rules.registry import label
from torchdoctor.rules.trace_rules import evaluate
from torchdoctor.trace.load import find_rank_files, load_trace

SCHEMA_VERSION = 1
"""Bumped on any incompatible change to the JSON report (see docs/report-schema.md)."""


@dataclass(frozen=True)
class Report:
    """What ``torchdoctor analyze`` found: one trace's analysis (the lowest rank's for a folder),
    the findings ranked by saving, and per-rank rows for a folder of traces."""

    analysis: TraceAnalysis
    findings: list[Finding]
    verdict: str
    ranks: list[RankRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-able data (schema in docs/report-schema.md)."""
        from torchdoctor.report.serialize import report_dict

        return report_dict(self)


def analyze_path(path: str | Path) -> Report:
    """Analyse a trace file, or every trace in a folder (one per rank)."""
    p = Path(path)
    if p.is_dir():
        return _analyze_folder(p)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    return build_report(analyze_table(load_trace(p)))


def build_report(a: TraceAnalysis, extra: list[Finding] | None = None) -> Report:
    """Run the rules on an analysis and assemble the report."""
    findings = rank_findings(evaluate(a) + list(extra or []))
    notes = [a.steps.note, *a.table.notes]
    return Report(a, findings, verdict(a, findings), notes=notes)


def _analyze_folder(folder: Path) -> Report:
    analyses = []
    for f in find_rank_files(folder):
        analyses.append(analyze_table(load_trace(f)))
    ranks = [a.table.meta.rank for a in analyses]
    if all(r is not None for r in ranks) and len(set(ranks)) != len(ranks):
        raise TraceError(f"{folder}: two traces claim the same rank ({sorted(ranks)})")  # type: ignore[type-var]
    order = np.argsort([r if r is not None else i for i, r in enumerate(ranks)], kind="stable")
    analyses = [analyses[i] for i in order]
    rows = rank_rows(analyses)
    slow = straggler(analyses[0], rows)
    report = build_report(analyses[0], [slow] if slow else None)
    note = f"{len(rows)} rank traces; details below are for rank {rows[0].rank}"
    return Report(report.analysis, report.findings, report.verdict, rows, [note, *report.notes])


def verdict(a: TraceAnalysis, findings: list[Finding]) -> str:
    """One line: the step time, how busy the device was, and the most valuable fix."""
    t = a.total
    head = f"{a.n_steps} step{'s' if a.n_steps != 1 else ''}, {a.mean_step_ms:.1f} ms per step"
    if a.has_gpu:
        head += f"; GPU busy {t.share(t.gpu_busy_ms):.0%}"
    else:
        head += " (CPU only)"
    actionable = [f for f in findings if f.severity != "info" and f.saving_ms_per_step > 0]
    if not actionable:
        return f"{head}. No bottleneck worth fixing found."
    top = actionable[0]
    return (
        f"{head}. Fix first: {label(top.id)} (saves up to {top.saving_ms_per_step:.1f} ms per step, "
        f"{top.share_of_step:.0%})."
    )
