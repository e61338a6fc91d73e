"""Build a report from a trace file or a folder of per-rank traces."""

from __future__ import annotations

from pathlib import Path

from torchdoctor.analysis.bundle import analyze_table
from torchdoctor.analysis.kernels import KernelContext
from torchdoctor.errors import TraceError, UserError
from torchdoctor.record import layout
from torchdoctor.report.assemble import build_report
from torchdoctor.report.model import Report
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
        from torchdoctor.commands.analyze.ranks import analyze_folder

        return analyze_folder(p, jobs, scheduler, dask)
    if not p.exists():
        raise TraceError(f"{p}: no such file or directory")
    return build_report(analyze_table(load_events(p), run_context(p)))


def run_context(trace: Path) -> KernelContext | None:
    """The autocast dtype and TF32 state a ``check`` run recorded beside ``trace`` (its
    ``run.json`` in the same folder, or one up for ``traces/rankN``); None elsewhere or when the
    record cannot be read (the names and operators still decide)."""
    for folder in (trace.parent, trace.parent.parent):
        if layout.is_run_folder(folder):
            # imported here: a trace outside a run folder loads no run-record module
            from torchdoctor.record.folder import read_json
            from torchdoctor.record.run import RunRecord

            try:
                record = read_json(layout.run_file(folder))
            except UserError:
                return None
            if not isinstance(record, dict):
                return None
            return KernelContext.from_record(RunRecord.from_dict(record))
    return None


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
    if not layout.is_run_folder(folder):
        return None
    found = layout.traces_of(folder)
    if found is not None:
        return found
    raise TraceError(f"{folder}: a torchdoctor check run folder without a trace (see run.json)")
