"""One side of a comparison, whatever it was: a trace, a folder of rank traces, a ``check`` run
folder or a ``tune`` results file. Everything is normalised to "per step" so sides with
different step counts compare."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from torchdoctor.errors import TraceError, UserError

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


def load_side(path: str) -> Side:
    """Recognise and load one side; a UserError (exit 2) when it is none of the four kinds."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or directory")
    if p.is_dir():
        if (p / "run.json").is_file():
            return _check_run(p)
        return _from_report(str(p), "ranks")
    if p.name.endswith(".json"):
        doc = _tune_doc(p)
        if doc is not None:
            return _tune(p, doc)
    return _from_report(str(p), "trace")


def _from_report(path: str, kind: SideKind) -> Side:
    from torchdoctor.report.build import analyze_path

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
    return Side(
        path=path,
        kind=kind,
        step_ms=np.asarray(steps, dtype=np.float64),
        breakdown_ms=_breakdown(a),
        kernels=_kernels(a),
        operators=_operators(a),
        findings={f.id: f.to_dict() for f in report.findings},
        gpu=", ".join(gpus) or None,
        torch_version=_str_or_none(a.table.meta.top_level.get("pytorch_version")),
        notes=notes,
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
    t, n = a.total, max(a.n_steps, 1)
    out = {f"busy:{k}": v / n for k, v in t.busy_ms.items()}
    pre = "idle:" if t.busy_ms else "cpu:"
    out.update({f"{pre}{k}": v / n for k, v in t.idle_ms.items()})
    return out


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
    from torchdoctor.trace.kinds import Kind

    t = a.table
    lo, hi = a.steps.window
    rows = t.of_kind(Kind.CPU_OP)
    rows = rows[(t.ts[rows] >= lo) & (t.ts[rows] < hi)]
    if not len(rows):
        return {}
    sums = np.bincount(t.name[rows], weights=t.dur[rows], minlength=len(t.names))
    codes = np.unique(t.name[rows])
    skip = ("ProfilerStep#", "enumerate(DataLoader)#")
    return {
        t.names[c]: float(sums[c]) / 1000.0 / a.n_steps
        for c in codes
        if not t.names[c].startswith(skip)
    }


def _float_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _str_or_none(v: Any) -> str | None:
    return None if v is None else str(v)


def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: not readable JSON ({exc})") from None


def _check_run(folder: Path) -> Side:
    """A ``check`` run folder: the run's own step clock (many steps), the trace's details."""
    run = _read_json(folder / "run.json")
    record = run
    if "ranks" in run and isinstance(run["ranks"], dict):  # torchrun: rank 0's record
        record = _read_json(folder / run["ranks"].get("0", "ranks/rank0.json"))
    steps = record.get("steps") or {}
    warm = int(steps.get("warmup_steps") or 0)
    step_ms = np.asarray((steps.get("step_ms") or [])[warm:], dtype=np.float64)
    trace = folder / "trace.json.gz" if (folder / "trace.json.gz").is_file() else folder / "traces"
    if trace.exists():
        from torchdoctor.report.build import analyze_path

        base = from_report(
            str(folder), "check-run", analyze_path(trace), step_ms if len(step_ms) else None
        )
    elif len(step_ms):
        base = Side(str(folder), "check-run", step_ms, notes=["no trace in the run folder"])
    else:
        raise UserError(f"{folder}: the run recorded no steps and no trace")
    return _with_record(base, folder, record, step_ms)


def _with_record(base: Side, folder: Path, record: dict[str, Any], step_ms: np.ndarray) -> Side:
    from dataclasses import replace

    report = folder / "report.json"
    findings = base.findings
    if report.is_file():
        findings = {f["id"]: f for f in _read_json(report).get("findings", []) if "id" in f}
    gpu = ((record.get("gpu") or {}).get("device") or {}).get("name") or base.gpu
    loaders = (record.get("config") or {}).get("dataloaders") or []
    batch = next((d.get("batch_size") for d in loaders if d.get("batch_size")), None)
    steps = record.get("steps") or {}
    all_ms = np.asarray(steps.get("step_ms") or [], dtype=np.float64)
    warm = int(steps.get("warmup_steps") or 0)
    compile_s = (record.get("compile") or {}).get("compile_s")
    completed = (record.get("exit") or {}).get("status") == "completed"
    return replace(
        base,
        warmup_ms=all_ms[:warm] if len(step_ms) else np.zeros(0),
        compile_s=float(compile_s) if compile_s else None,
        job_steps=len(all_ms) if completed and len(all_ms) else None,
        step_ms=step_ms if len(step_ms) else base.step_ms,
        findings=findings,
        gpu=gpu,
        torch_version=record.get("torch_version") or base.torch_version,
        batch_size=batch,
        samples_per_step=float(batch) if batch else None,
    )


def _tune_doc(p: Path) -> dict[str, Any] | None:
    """The file's JSON if it is a ``tune --json`` result (small files only are read whole)."""
    if p.stat().st_size > 50_000_000:
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "best" in doc and "ranked" in doc else None


def _tune(p: Path, doc: dict[str, Any]) -> Side:
    """A ``tune`` result: the picked configuration's step times."""
    best = doc.get("best") or {}
    times = best.get("step_times_s")
    notes = []
    if times:
        step_ms = np.asarray(times, dtype=np.float64) * 1000.0
    elif best.get("median_step_s"):
        step_ms = np.asarray([best["median_step_s"] * 1000.0])
        notes.append("tune result without per-step times: the median only, no noise estimate")
    else:
        raise UserError(f"{p}: the tune result has no timed pick")
    sps = best.get("samples_per_s")
    med = float(np.median(step_ms)) / 1000.0
    return Side(
        path=str(p),
        kind="tune",
        step_ms=step_ms,
        findings={i: {"id": i, "title": i} for i in doc.get("finding_ids") or []},
        batch_size=(best.get("assignment") or {}).get("batch_size"),
        samples_per_step=sps * med if sps else None,
        notes=[f"tune pick: {best.get('config', '?')}", *notes],
        one_time_s=_float_or_none(best.get("warmup_overhead_s")),
        compile_s=_float_or_none(best.get("compile_s")),
    )
