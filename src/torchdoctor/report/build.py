"""Build a report from a trace file or a folder of per-rank traces."""

from __future__ import annotations

from pathlib import Path

from torchdoctor.analysis.bundle import TraceAnalysis, analyze_table
from torchdoctor.errors import TraceError
from torchdoctor.report.model import Report
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.registry import label
from torchdoctor.rules.trace_rules import evaluate
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.table import TraceTable


def analyze_path(
    path: str | Path, jobs: int | None = None, scheduler: str | None = None, dask: bool = False
) -> Report:
    """Analyse a trace file, every trace in a folder (one per rank, ``jobs`` at a time, on a
    Dask cluster with ``scheduler`` / ``dask``), or the trace(s) of a ``torchdoctor check`` run
    folder."""
    p = Path(path)
    if p.is_dir():
        run_traces = check_run_traces(p)
        if run_traces is not None:
            return analyze_path(run_traces, jobs, scheduler, dask)
        from torchdoctor.report.folder import analyze_folder

        return analyze_folder(p, jobs, scheduler, dask)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    return build_report(analyze_table(load_events(p)))


def load_events(path: Path) -> TraceTable:
    """Load a trace that has at least one event placed in time; anything else (a JSON list of
    numbers, an empty ``traceEvents``, only metadata) is not a trace: TraceError, one line."""
    table = load_trace(path)
    if not len(table):
        skipped = next((n for n in table.notes if n.startswith("skipped")), "")
        why = f" ({skipped})" if skipped else ""
        raise TraceError(f"{path}: no valid trace event{why}: not a torch.profiler trace")
    return table


def check_run_traces(folder: Path) -> Path | None:
    """The trace file or folder of rank traces inside a ``check`` run folder (one holding
    ``run.json``), or None when ``folder`` is not one. A run folder without a trace is an error."""
    if not (folder / "run.json").is_file():
        return None
    for candidate in (folder / "traces", folder / "trace.json.gz", folder / "trace.json"):
        if candidate.exists():
            return candidate
    raise TraceError(f"{folder}: a torchdoctor check run folder without a trace (see run.json)")


def build_report(a: TraceAnalysis, extra: list[Finding] | None = None) -> Report:
    """Run the rules on an analysis and assemble the report."""
    findings = rank_findings(evaluate(a) + list(extra or []))
    notes = [a.steps.note, *a.table.notes]
    return Report(a, findings, verdict(a, findings), notes=notes)


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
