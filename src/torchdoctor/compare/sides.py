"""One side of a comparison, whatever it was: a trace, a folder of rank traces, a ``check`` run
folder or a ``tune`` results file. Everything is normalised to "per step" so sides with
different step counts compare."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np

from torchdoctor.compare.explain import contention_of
from torchdoctor.errors import TraceError, UserError
from torchdoctor.record import layout
from torchdoctor.record.folder import read_json, read_run
from torchdoctor.record.run import RunRecord
from torchdoctor.record.values import as_number

SideKind = Literal["trace", "ranks", "check-run", "tune"]


@dataclass(frozen=True)
class Side:
    """What compare needs from one side. Times in milliseconds; totals are per step."""

    path: str
    kind: SideKind
    step_ms: np.ndarray
    """One sample per step (the slowest rank's, for a folder of ranks)."""
    breakdown_ms: dict[str, float] = field(default_factory=dict)
    """Mean step split into parts (``busy:compute``, ``idle:data_loading``...)."""
    kernels: dict[str, tuple[str, float]] = field(default_factory=dict)
    """Kernel name -> (category, summed ms per step)."""
    operators: dict[str, float] = field(default_factory=dict)
    """CPU operator name -> summed (inclusive) CPU ms per step."""
    findings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Finding id -> its dict (title, saving...)."""
    gpu: str | None = None
    torch_version: str | None = None
    batch_size: int | None = None
    samples_per_step: float | None = None
    notes: list[str] = field(default_factory=list)
    warmup_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The warm-up steps' times (a ``check`` run folder), for the one-time cost."""
    one_time_s: float | None = None
    """A one-time cost the side reports whole (a ``tune`` pick's warm-up overhead)."""
    compile_s: float | None = None
    """torch.compile's compile time, when the side recorded it."""
    job_steps: int | None = None
    """The run's length when it ran to its end by itself (a completed ``check --full`` run)."""
    contention: str | None = None
    """Why this run's step times are inflated by other work on the CPU (a ``cpu-oversubscribed``
    finding, or the record's ``cpu`` counters), or None."""


def load_side(path: str) -> Side:
    """Recognise and load one side; a UserError (exit 2) when it is none of the four kinds."""
    from torchdoctor.inputs import input_path

    p = input_path(path, "file or folder", folder_ok=True)  # a FIFO would block the read
    if p.is_dir():
        if layout.is_run_folder(p):
            return _check_run(p)
        return _from_report(str(p), "ranks")
    if p.name.endswith(".json"):
        doc = _tune_doc(p)
        if doc is not None:
            return _tune(p, doc)
    return _from_report(str(p), "trace")


def _from_report(path: str, kind: SideKind) -> Side:
    from torchdoctor.commands.analyze.trace import analyze_path

    report = analyze_path(path)
    return from_report(path, kind, report)


def from_report(path: str, kind: SideKind, report: Any, step_ms: np.ndarray | None = None) -> Side:
    """A side from an analyser report (the primary rank's details, every rank's step times)."""
    a = report.analysis
    if a.n_steps == 0:
        raise TraceError(f"{path}: no steps found, nothing to compare")
    steps = a.steps.durations_ms if step_ms is None else step_ms
    notes = []
    if kind == "ranks" and step_ms is None:
        steps, note = _slowest_rank_steps(path, a)
        notes.append(note)
    gpus = sorted({str(d.get("name")) for d in a.table.meta.devices if d.get("name")})
    findings = {f.id: f.to_dict() for f in report.findings}
    return Side(
        path=path,
        kind=kind,
        step_ms=np.asarray(steps, dtype=np.float64),
        breakdown_ms=_breakdown(a),
        kernels=_kernels(a),
        operators=_operators(a),
        findings=findings,
        gpu=", ".join(gpus) or None,
        torch_version=_str_or_none(a.table.meta.top_level.get("pytorch_version")),
        notes=notes,
        contention=contention_of(findings, None),
    )


def _slowest_rank_steps(path: str, primary: Any) -> tuple[np.ndarray, str]:
    """Per step, the slowest rank's time (every rank waits for it at the next collective)."""
    from torchdoctor.analysis.bundle import analyze_table
    from torchdoctor.trace.load import find_rank_files, load_trace

    per_rank = [analyze_table(load_trace(f)).steps for f in find_rank_files(path)]
    numbers = [tuple(s.numbers) for s in per_rank]
    if len(set(numbers)) != 1:
        return primary.steps.durations_ms, "ranks saw different steps: step times of one rank"
    return (
        np.max([s.durations_ms for s in per_rank], axis=0),
        f"step time: the slowest of {len(per_rank)} ranks in each step",
    )


def _breakdown(a: Any) -> dict[str, float]:
    from torchdoctor.analysis.breakdown_terms import keyed

    t, n = a.total, max(a.n_steps, 1)
    return {k: v / n for k, v in keyed(t.busy_ms, t.idle_ms).items()}


def _kernels(a: Any) -> dict[str, tuple[str, float]]:
    """Every device activity in the analysed window, summed by name (not only the top N)."""
    from torchdoctor.analysis.kernel_names import kernel_category

    t, act = a.table, a.activity
    if not len(act.rows):
        return {}
    lo, hi = a.steps.window
    rows = act.rows[(act.start_us >= lo) & (act.start_us < hi)]
    sums = np.bincount(t.name[rows], weights=t.dur[rows], minlength=len(t.names))
    codes = np.flatnonzero(np.bincount(t.name[rows], minlength=len(t.names)))
    return {
        t.names[c]: (str(kernel_category(t.names[c].lower())), float(sums[c]) / 1000.0 / a.n_steps)
        for c in codes
    }


def _operators(a: Any) -> dict[str, float]:
    """Inclusive CPU ms per step by operator (nested calls of one name counted once)."""
    from torchdoctor.analysis.operators import total_cpu_ms_by_name

    totals = total_cpu_ms_by_name(a.table, a.steps)
    return {
        name: ms / a.n_steps
        for name, ms in totals.items()
        if not name.startswith("enumerate(DataLoader)#")  # data loading has its own line
    }


def _str_or_none(v: Any) -> str | None:
    return None if v is None else str(v)


def _dict(value: Any, where: str) -> dict[str, Any]:
    """``value`` if it is a JSON object (None counts as an empty one), else a UserError."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} is a {type(value).__name__}, not an object")
    return value


def _times(value: Any, where: str) -> np.ndarray:
    """A list of finite, non-negative numbers as float64; anything else is a UserError."""
    if value is None:
        return np.zeros(0)
    if not isinstance(value, list) or not all(_is_number(v) for v in value):
        raise UserError(f"{where} is not a list of numbers")
    arr = np.asarray(value, dtype=np.float64)
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise UserError(f"{where} holds a negative, infinite or NaN time")
    return arr


def _is_number(v: Any) -> TypeGuard[float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 1e300


def _check_run(folder: Path) -> Side:
    """A ``check`` run folder: the run's own step clock (many steps), the trace's details."""
    record = read_run(folder)  # rank 0's record under torchrun; its steps' shape checked
    step_ms = np.asarray(record.steps.script_step_ms[record.steps.warmup_steps :])
    trace = layout.traces_of(folder)
    if trace is not None:
        from torchdoctor.commands.analyze.trace import analyze_path

        base = from_report(
            str(folder), "check-run", analyze_path(trace), step_ms if len(step_ms) else None
        )
    elif len(step_ms):
        base = Side(str(folder), "check-run", step_ms, notes=["no trace in the run folder"])
    else:
        raise UserError(f"{folder}: the run recorded no steps and no trace")
    return _with_record(base, folder, record, step_ms)


def _with_record(base: Side, folder: Path, record: RunRecord, step_ms: np.ndarray) -> Side:
    from dataclasses import replace

    report = layout.report_json(folder)
    findings = base.findings
    if report.is_file():
        doc = _dict(read_json(report), str(report))
        findings = _findings(doc.get("findings"), str(report))
    batch: Any = next(  # as recorded (an int from the capture side)
        (
            d.batch_size
            for d in record.config.dataloaders
            if _is_number(d.batch_size) and d.batch_size > 0
        ),
        None,
    )
    all_ms = np.asarray(record.steps.script_step_ms)
    compile_s = record.compile.compile_s
    return replace(
        base,
        warmup_ms=all_ms[: record.steps.warmup_steps] if len(step_ms) else np.zeros(0),
        compile_s=float(compile_s) if compile_s else None,
        job_steps=len(all_ms) if record.completed and len(all_ms) else None,
        step_ms=step_ms if len(step_ms) else base.step_ms,
        findings=findings,
        gpu=(record.gpu.name if record.gpu else None) or base.gpu,
        torch_version=record.torch_version or base.torch_version,
        batch_size=batch,
        samples_per_step=float(batch) if batch else None,
        contention=contention_of(findings, record.cpu or None),
    )


def _findings(value: Any, where: str) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise UserError(f"{where}: 'findings' is not a list")
    return {f["id"]: f for f in value if isinstance(f, dict) and isinstance(f.get("id"), str)}


def _tune_doc(p: Path) -> dict[str, Any] | None:
    """The file's JSON if it is a ``tune --json`` result (small files only are read whole)."""
    if p.stat().st_size > 50_000_000:
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # then it is read as a trace, which says what is wrong with it
    return doc if isinstance(doc, dict) and "best" in doc and "ranked" in doc else None


def _tune(p: Path, doc: dict[str, Any]) -> Side:
    """A ``tune`` result: the picked configuration's step times."""
    best = _dict(doc.get("best"), f"{p}: 'best'")
    times = _times(best.get("step_times_s"), f"{p}: 'best.step_times_s'")
    median = best.get("median_step_s")
    notes = []
    if len(times):
        step_ms = times * 1000.0
    elif _is_number(median) and 0 < median < 1e9:
        step_ms = np.asarray([median * 1000.0])
        notes.append("tune result without per-step times: the median only, no noise estimate")
    else:
        raise UserError(f"{p}: the tune result has no timed pick")
    sps = best.get("samples_per_s")
    sps = sps if _is_number(sps) and sps > 0 else None
    med = float(np.median(step_ms)) / 1000.0
    ids = doc.get("finding_ids") or []
    if not isinstance(ids, list):
        raise UserError(f"{p}: 'finding_ids' is not a list")
    batch = _dict(best.get("assignment"), f"{p}: 'best.assignment'").get("batch_size")
    findings = {str(i): {"id": str(i), "title": str(i)} for i in ids}
    return Side(
        path=str(p),
        kind="tune",
        step_ms=step_ms,
        findings=findings,
        contention=contention_of(findings, None),
        batch_size=int(batch) if _is_number(batch) and batch > 0 else None,
        samples_per_step=sps * med if sps else None,
        notes=[f"tune pick: {_str_or_none(best.get('config')) or '?'}", *notes],
        one_time_s=as_number(best.get("warmup_overhead_s")),
        compile_s=as_number(best.get("compile_s")),
    )
