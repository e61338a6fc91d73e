"""Assemble a report from one trace's analysis: ranked findings and the verdict line."""

from __future__ import annotations

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.report.model import Report
from torchdoctor.report.saving_text import saving_text
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.registry import label, spec
from torchdoctor.rules.trace_rules import evaluate

CLEAN_BILL = "No bottleneck worth fixing found."
"""The verdict's clean bill: nothing costs time and nothing is a risk."""
NO_TIME_BOTTLENECK = "No time bottleneck found."
"""The verdict when nothing costs time but a risk (memory growing, fp16 without a scaler) is
worth fixing: not a clean bill."""


def build_report(a: TraceAnalysis, extra: list[Finding] | None = None) -> Report:
    """Run the rules on an analysis and assemble the report."""
    findings = rank_findings(evaluate(a) + list(extra or []))
    notes = [a.steps.note, *a.table.notes]
    return Report(a, findings, verdict(a, findings), notes=notes)


def verdict(a: TraceAnalysis, findings: list[Finding], clean_step_ms: float | None = None) -> str:
    """One line: the step time, how busy the device was, and the most valuable fix.

    ``clean_step_ms``: the step as ``check`` timed it with no instrument armed; the line then
    gives it, the traced step beside it, and the GPU's busy share of the clean step."""
    if a.graphs is not None and a.graphs.is_capture_trace:
        from torchdoctor.report.inference_verdict import capture_verdict

        return capture_verdict(a)
    head = f"{a.n_steps} step{'s' if a.n_steps != 1 else ''}, {a.mean_step_ms:.1f} ms per step"
    busy = a.gpu_busy_share
    if clean_step_ms:
        head = (
            f"{a.n_steps} step{'s' if a.n_steps != 1 else ''}, {clean_step_ms:.1f} ms per step "
            f"un-instrumented ({a.mean_step_ms:.1f} ms under the profiler)"
        )
        busy = min(1.0, a.gpu_busy_share * a.mean_step_ms / clean_step_ms)
    if a.serving is not None:
        from torchdoctor.report.inference_verdict import serving_head

        head = serving_head(a) + head
    if a.not_recorded_ms > 0:
        head += (
            f" accounted for (+{a.per_step_ms(a.not_recorded_ms):.1f} ms behind GPU work the "
            "trace does not hold)"
        )
    if a.has_gpu:
        head += f"; GPU busy {busy:.0%}"
    else:
        head += " (CPU only)"
    if a.serving is not None or a.graphs is not None:
        from torchdoctor.report.inference_verdict import serving_tail

        head += serving_tail(a)
    actionable = [f for f in findings if f.severity != "info" and f.saving_ms_per_step > 0]
    if not actionable:
        # a risk that costs no time (memory growing every step, fp16 without a scaler) is no
        # clean bill: the line names it after the time verdict
        risks = [f for f in findings if f.severity != "info" and spec(f.id).severity.risk]
        if risks:  # never "no bottleneck worth fixing" beside something worth fixing
            return f"{head}. {NO_TIME_BOTTLENECK} But fix: {label(risks[0].id)} (a risk, not time)."
        return f"{head}. {CLEAN_BILL}"
    top = actionable[0]
    return f"{head}. Fix first: {label(top.id)} ({saving_text(top, short=True)})."
