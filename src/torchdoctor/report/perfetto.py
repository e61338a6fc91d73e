"""``--export-trace``: the original trace plus a "torchdoctor" process, for ui.perfetto.dev.

The added process holds: a track of idle-cause spans (every device idle gap, split by cause as
the breakdown splits it), counter tracks of the per-step breakdown, one track per finding with a
slice over its evidence, and flow arrows from each finding to the events that caused it (the
blocking call, the late launch, the DataLoader wait...).

The original events are written back unchanged. The added slices are begin/end pairs (``ph``
B/E), counters (C), flows (s/f) and metadata (M): phases the analyser does not read (it reads
complete events and memory instants), so analysing the export gives the same report.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis._join import in_window, launch_of
from torchdoctor.analysis.breakdown import IDLE_PARTS, gap_causes
from torchdoctor.analysis.breakdown_terms import keyed, label
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.analysis.gpu_activity import DATALOADER_PREFIX, SYNC_CALLS
from torchdoctor.analysis.kernel_names import MATMUL_CATEGORIES, kernel_category
from torchdoctor.errors import OutputError, TraceError
from torchdoctor.rules import registry
from torchdoctor.rules.finding import Finding
from torchdoctor.trace.kinds import Kind

MAX_FLOWS = 20
"""Arrows per finding: the longest evidence events (more only clutters the view)."""
CAT = "torchdoctor"
IDLE_TID, FINDING_TID0 = 1, 10


def export_trace(a: TraceAnalysis, findings: list[Finding], out: str | Path) -> Path:
    """Write the trace at ``a.table.meta.path`` plus the torchdoctor process to ``out``
    (gzip when it ends in .gz). Returns the path written.

    The original's top-level values are copied as raw JSON text (never decoded into Python
    objects), so every event stays byte for byte what it was and a 1 GB trace costs its own size
    in memory, not ten times that.
    """
    src = Path(a.table.meta.path)
    top = _read_top_level(src)
    events = memoryview(top.get("traceEvents", b""))  # a view: the array is never copied
    if bytes(events[:1]) != b"[" or bytes(events[-1:]) != b"]":
        raise TraceError(f"{src}: no traceEvents list to extend")
    added = json.dumps(torchdoctor_events(a, findings), separators=(",", ":")).encode()
    p = Path(out)
    try:
        with gzip.open(p, "wb", compresslevel=6) if p.name.endswith(".gz") else p.open("wb") as fh:
            fh.write(b"{")
            for i, (key, raw) in enumerate(top.items()):
                fh.write((b"," if i else b"") + json.dumps(key).encode() + b":")
                if key != "traceEvents":
                    fh.write(bytes(raw))
                    continue
                empty = bytes(events[1:-1]).strip() == b"" if len(events) < 64 else False
                fh.write(events[:-1])
                fh.write((b"" if empty else b",") + added[1:])
            fh.write(b"}")
    except OSError as exc:
        raise OutputError(f"cannot write the trace to {p}: {exc.strerror or exc}") from None
    return p


def _read_top_level(src: Path) -> dict[str, Any]:
    """The trace's top-level keys with their values as raw JSON (msgspec.Raw), in file order."""
    import msgspec

    try:
        raw = src.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except (OSError, EOFError, msgspec.DecodeError) as exc:
        raise TraceError(f"{src}: cannot re-read the trace for export: {exc}") from None


def torchdoctor_events(a: TraceAnalysis, findings: list[Finding]) -> list[dict[str, Any]]:
    """The added process's events, in absolute trace time (microseconds)."""
    pid = _free_pid(a)
    base = a.table.base_us
    out = _metadata(pid, findings)
    out.extend(_idle_spans(a, pid, base))
    out.extend(_counters(a, pid, base))
    flow_id = 1
    for i, f in enumerate(findings):
        evs, flow_id = _finding_events(a, f, pid, FINDING_TID0 + i, flow_id)
        out.extend(evs)
    return out


def _free_pid(a: TraceAnalysis) -> int:
    nums = [p for p in a.table.pids if isinstance(p, int)]
    return max(nums, default=0) + 1


def _metadata(pid: int, findings: list[Finding]) -> list[dict[str, Any]]:
    def meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}

    out = [
        meta("process_name", 0, {"name": "torchdoctor"}),
        meta("process_sort_index", 0, {"sort_index": -1}),
        meta("thread_name", IDLE_TID, {"name": "GPU idle by cause"}),
    ]
    for i, f in enumerate(findings):
        out.append(meta("thread_name", FINDING_TID0 + i, {"name": f"finding {i + 1}: {f.id}"}))
    return out


def _slice(pid: int, tid: int, name: str, t0: float, t1: float, args: Any) -> list[dict[str, Any]]:
    begin = {"ph": "B", "cat": CAT, "name": name, "pid": pid, "tid": tid, "ts": t0, "args": args}
    return [begin, {"ph": "E", "cat": CAT, "pid": pid, "tid": tid, "ts": t1}]


def _idle_spans(a: TraceAnalysis, pid: int, base: float) -> list[dict[str, Any]]:
    act = a.activity
    if not len(act.rows) or not a.n_steps:
        return []
    out: list[dict[str, Any]] = []
    union = iv.union(act.start_us, act.end_us)
    for lo, hi in zip(a.steps.starts_us, a.steps.ends_us, strict=True):
        g0, g1 = iv.gaps(union, float(lo), float(hi))
        if not len(g0):
            continue
        parts, cursor = gap_causes((g0, g1), act, float(lo)), g0.copy()
        spans = []
        for cause in IDLE_PARTS:  # laid out in order inside each gap, as the timeline draws it
            for s, length in zip(cursor, parts[cause], strict=True):
                if length > 0:
                    spans.append((float(s), float(s + length), cause))
            cursor = cursor + parts[cause]
        for s, e, cause in sorted(spans):
            out.extend(_slice(pid, IDLE_TID, label(f"idle:{cause}"), base + s, base + e, {}))
    return out


def _counters(a: TraceAnalysis, pid: int, base: float) -> list[dict[str, Any]]:
    """One counter track per breakdown part: its milliseconds in each step, held over the step."""
    out = []
    for s, lo in zip(a.per_step, a.steps.starts_us, strict=True):
        for key, ms in keyed(s.busy_ms, s.idle_ms).items():
            out.append(
                {
                    "ph": "C",
                    "cat": CAT,
                    "name": f"{label(key)} (ms/step)",
                    "pid": pid,
                    "ts": base + float(lo),
                    "args": {"ms": round(ms, 6)},
                }
            )
    return out


def _finding_events(
    a: TraceAnalysis, f: Finding, pid: int, tid: int, flow_id: int
) -> tuple[list[dict[str, Any]], int]:
    t, base = a.table, a.table.base_us
    rows = _evidence_rows(a, f.id)
    rows = rows[np.argsort(-t.dur[rows], kind="stable")][:MAX_FLOWS] if len(rows) else rows
    if len(rows):
        t0, t1 = float(t.ts[rows].min()), float((t.ts[rows] + t.dur[rows]).max())
    else:
        t0, t1 = a.steps.window if a.n_steps else (0.0, float(t.end.max(initial=0.0)))
    args = {
        "id": f.id,
        "saving_ms_per_step": f.saving_ms_per_step,
        "fix": f.fix,
        "evidence": json.loads(json.dumps(f.evidence, default=str)),
    }
    out = _slice(pid, tid, f.title, base + t0, base + max(t1, t0 + 1e-3), args)
    for r in rows:
        common = {"cat": CAT, "name": f.id, "id": flow_id}
        out.insert(-1, {**common, "ph": "s", "pid": pid, "tid": tid, "ts": base + t0})
        out.append(
            {
                **common,
                "ph": "f",
                "bp": "e",
                "pid": t.pids[t.pid[r]],
                "tid": t.tids[t.tid[r]],
                "ts": base + float(t.ts[r]),
            }
        )
        flow_id += 1
    return out, flow_id


def _named(prefix: str | None = None, names: frozenset[str] | None = None) -> Callable[..., Any]:
    def rows(a: TraceAnalysis) -> np.ndarray:
        t = a.table
        pred = (lambda n: n.startswith(prefix)) if prefix else (lambda n: n in (names or ()))
        return t.rows_named(pred)

    return rows


def _activity(pick: Callable[[TraceAnalysis], np.ndarray]) -> Callable[..., Any]:
    return lambda a: a.activity.rows[pick(a)]


def _late_launches(a: TraceAnalysis) -> np.ndarray:
    """Launch calls of the work that ended a gap the host caused (the CPU was late)."""
    act = a.activity
    if not len(act.rows):
        return np.zeros(0, dtype=np.int64)
    union = iv.union(act.start_us, act.end_us)
    ends = []
    for lo, hi in zip(a.steps.starts_us, a.steps.ends_us, strict=True):
        g0, g1 = iv.gaps(union, float(lo), float(hi))
        if len(g0):
            ends.append(g1[gap_causes((g0, g1), act, float(lo))["host_overhead"] > 0])
    if not ends:
        return np.zeros(0, dtype=np.int64)
    k = np.searchsorted(act.start_us, np.concatenate(ends), side="left")
    k = k[k < len(act.rows)]
    launches = launch_of(a.table, act.rows[k])
    return launches[launches >= 0]


def _matmul_kernels(a: TraceAnalysis) -> np.ndarray:
    t, act = a.table, a.activity
    rows = act.rows[act.cls == 0]
    cats = {c: kernel_category(t.names[c].lower()) for c in np.unique(t.name[rows])}
    out: np.ndarray = rows[[cats[c] in MATMUL_CATEGORIES for c in t.name[rows]]]
    return out


EVIDENCE: dict[str, Callable[[TraceAnalysis], np.ndarray]] = {
    "data-loading-bound": _named(prefix=DATALOADER_PREFIX),
    "sync-stalls": _named(names=SYNC_CALLS),
    "synchronous-copies": _named(names=SYNC_CALLS),
    "host-bound": _late_launches,
    "low-gpu-utilization": _late_launches,
    "pageable-h2d-copies": _activity(
        lambda a: a.activity.pageable & (a.activity.memcpy_dir == "HtoD")
    ),
    "exposed-communication": _activity(lambda a: a.activity.cls == 1),
    "fp32-gemm-no-tensor-cores": _matmul_kernels,
}
"""The events each finding points its arrows at, by finding id (none: a slice without arrows).
A finding without an entry points at the events of a finding its registry entry names as an
alias (the same problem: the loader's settings at the DataLoader's calls, fp32 on a bf16 GPU at
the fp32 GEMMs)."""


def _evidence_rows(a: TraceAnalysis, finding_id: str) -> np.ndarray:
    # looked up by id (a trace finding's own family), never the whole registry: the export
    # must not import the run families
    aliases = registry.spec(finding_id).aliases if registry.registered(finding_id) else ()
    ids = (finding_id, *aliases)
    pick = next((EVIDENCE[i] for i in ids if i in EVIDENCE), None)
    if pick is None or not a.n_steps:
        return np.zeros(0, dtype=np.int64)
    rows = np.sort(np.asarray(pick(a), dtype=np.int64))
    rows = rows[a.table.kind[rows] != Kind.TRACE] if len(rows) else rows
    return in_window(a.table, a.steps, rows)
