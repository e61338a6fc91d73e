"""What an HTML report shows, as plain data: built from a report, rendered by ``html.py``.

The builders here pick and shape numbers; they never format HTML. Every string may come from a
trace or a script, so the renderer escapes all of it.
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from torchdoctor._version import __version__
from torchdoctor.analysis.breakdown import BUSY_PARTS, CPU_PARTS, IDLE_PARTS

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis
    from torchdoctor.report.model import Report

MEMORY_POINTS = 1500
"""Points kept in the memory chart (the max of each bin, so peaks survive)."""


@dataclass(frozen=True)
class Num:
    """A number shown as the text report writes it (``1.25x [1.24-1.26]``, ``80.0``) that still
    sorts as the number."""

    value: float
    text: str


def share(v: float | None) -> Num | None:
    """A share of 1 as the text report prints it (``27.8%``, ``0.0091%``), sorting as the share."""
    if v is None:
        return None
    p = float(v) * 100
    if p == 0 or abs(p) >= 0.1:
        return Num(float(v), f"{p:.1f}%")
    return Num(float(v), f"{p:.{1 - math.floor(math.log10(abs(p)))}f}%")  # 2 digits, no e-05


@dataclass
class Table:
    """A sortable table: numbers stay numbers so the page sorts them as numbers."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    highlight: int | None = None
    """Row index to mark (the tune pick)."""
    caption: str = ""


@dataclass
class Bars:
    """Stacked bars: one per step (and the total), segments in ``parts`` order, milliseconds."""

    parts: list[str]
    labels: list[str]
    values_ms: list[list[float]]
    note: str = ""
    caption: str = (
        "Each bar is one step: device busy time by kind, then idle time by cause; the last bar "
        "is the mean step."
    )


@dataclass
class Series:
    """Memory over time: x in ms from the window start, y in bytes, one list per line."""

    device: str
    x_ms: list[float]
    lines: dict[str, list[float]]


@dataclass
class Section:
    """A titled block for pages other than analyze's (``memory``): prose, fixes, charts, tables."""

    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    fixes: list[tuple[str, str]] = field(default_factory=list)
    """(code to paste, why) pairs, shown with a copy button."""
    chart: Series | None = None
    tables: list[Table] = field(default_factory=list)


@dataclass
class Page:
    """Everything one report page shows; sections that are None or empty are left out."""

    title: str
    verdict: str
    metadata: list[tuple[str, str]]
    findings: list[dict[str, Any]] = field(default_factory=list)
    bars: Bars | None = None
    timeline: dict[str, Any] | None = None
    tables: list[Table] = field(default_factory=list)
    memory: Series | None = None
    memory_note: str = ""
    headline: list[str] = field(default_factory=list)
    """Extra summary lines under the verdict (tune's pick, compare's gate)."""
    notes: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    """Shown after the findings, in order."""
    show_findings: bool = True
    """False for pages that have no findings at all (``memory``), so no empty "Findings" heading."""


def command_line() -> str:
    """How this process was started, as a shell line."""
    return " ".join(shlex.quote(a) for a in ["torchdoctor", *sys.argv[1:]])


def page_from_report(report: Report, title: str = "torchdoctor analyze") -> Page:
    """The page for ``analyze``: verdict, findings, breakdown, timeline, tables, memory, ranks."""
    from torchdoctor.report.html_timeline import build_timeline

    a = report.analysis
    timeline = build_timeline(a)
    page = Page(
        title=title,
        verdict=report.verdict,
        metadata=trace_metadata(a),
        findings=[f.to_dict() for f in report.findings],
        bars=step_bars(a),
        timeline=timeline.to_dict() if timeline else None,
        tables=analysis_tables(a),
        notes=[n for n in report.notes if n] + (timeline.notes if timeline else []),
    )
    if timeline is not None and timeline.merged_events:
        page.notes.append(
            f"timeline: {timeline.merged_events} of {timeline.source_events} events merged "
            "into wider blocks (shorter than 1/4000 of the step)"
        )
    if report.ranks:
        page.tables.insert(0, rank_table(report))
    page.memory, page.memory_note = memory_series(a)
    return page


def trace_metadata(a: TraceAnalysis) -> list[tuple[str, str]]:
    """GPU, trace, steps, torchdoctor version and the command line."""
    meta = a.table.meta
    gpus = sorted({str(d.get("name")) for d in meta.devices if d.get("name")})
    rows = [
        ("GPU", ", ".join(gpus) or ("none (CPU only)" if not a.has_gpu else "not recorded")),
        ("trace", meta.path),
        ("steps", f"{a.n_steps} ({a.steps.source}), {a.mean_step_ms:.2f} ms mean"),
        ("events", f"{len(a.table):,}"),
    ]
    if meta.world_size:
        rows.append(("rank", f"{meta.rank} of {meta.world_size} ({meta.backend or '?'})"))
    torch_version = meta.top_level.get("pytorch_version") or meta.top_level.get("torch_version")
    rows.append(("torch version", str(torch_version) if torch_version else "not in the trace"))
    rows.append(("torchdoctor", __version__))
    rows.append(("command", command_line()))
    return rows


def step_bars(a: TraceAnalysis) -> Bars | None:
    """Per-step stacked bars (busy by kind, idle by cause) and the mean step."""
    if not a.per_step:
        return None
    if a.has_gpu:
        parts = [*(f"busy:{p}" for p in BUSY_PARTS), *(f"idle:{p}" for p in IDLE_PARTS)]
        if "not_recorded" in a.total.idle_ms:  # GPU work the trace does not hold
            parts.append("idle:not_recorded")
    else:
        parts = [f"cpu:{p}" for p in CPU_PARTS]

    def values(s: Any, scale: float = 1.0) -> list[float]:
        both = {**{f"busy:{k}": v for k, v in s.busy_ms.items()}}
        pre = "idle:" if a.has_gpu else "cpu:"
        both.update({f"{pre}{k}": v for k, v in s.idle_ms.items()})
        return [both.get(p, 0.0) * scale for p in parts]

    labels = [f"step {s.step}" for s in a.per_step] + ["mean"]
    vals = [values(s) for s in a.per_step] + [values(a.total, 1.0 / a.n_steps)]
    note = "" if a.has_gpu else "CPU-only trace: the step split by what the CPU was doing."
    return Bars(parts, labels, vals, note)


def analysis_tables(a: TraceAnalysis) -> list[Table]:
    """Top kernels and top operators."""
    out = []
    k = a.kernels
    if k is not None and k.top_kernels:
        out.append(
            Table(
                "kernels",
                "Top kernels (summed over the analysed steps)",
                [
                    "kernel",
                    "category",
                    "calls",
                    "total ms",
                    "mean us",
                    "share of GPU time",
                    "dtype",
                ],
                [
                    [
                        r.name,
                        r.category,
                        r.count,
                        r.total_ms,
                        r.mean_us,
                        share(r.share_of_gpu_time),
                        r.dtype,
                    ]
                    for r in k.top_kernels
                ],
            )
        )
    ops = a.operators
    if ops is not None and (ops.top_by_self_device or ops.top_by_self_cpu):
        out.append(_operator_table(ops, bool(a.has_gpu)))
    return out


def _operator_table(ops: Any, device: bool) -> Table:
    """The operator table; device columns only when the trace has device activity (a CPU-only
    run would show columns of zeros)."""
    rows = {r.name: r for r in [*ops.top_by_self_device, *ops.top_by_self_cpu]}
    if not device:
        return Table(
            "operators",
            "Top operators (by self CPU time)",
            ["operator", "calls", "self CPU ms", "total CPU ms"],
            [[r.name, r.calls, r.self_cpu_ms, r.total_cpu_ms] for r in rows.values()],
        )
    return Table(
        "operators",
        "Top operators (by self device time, then self CPU time)",
        ["operator", "calls", "self device ms", "total device ms", "self CPU ms", "total CPU ms"],
        [
            [r.name, r.calls, r.self_device_ms, r.total_device_ms, r.self_cpu_ms, r.total_cpu_ms]
            for r in rows.values()
        ],
    )


def rank_table(report: Report) -> Table:
    """One row per rank of a folder of traces."""
    return Table(
        "ranks",
        "Ranks",
        ["rank", "trace", "steps", "mean step ms", "GPU busy share", "exposed comm ms/step"],
        [
            [r.rank, r.path, r.steps, r.mean_step_ms, share(r.gpu_busy_share), r.exposed_comm_ms]
            for r in report.ranks
        ],
        caption=f"{len(report.ranks)} ranks; the sections above show rank {report.ranks[0].rank}",
    )


def memory_series(a: TraceAnalysis, points: int = MEMORY_POINTS) -> tuple[Series | None, str]:
    """Allocated and reserved bytes over the analysed window for the first CUDA device."""
    mem = a.table.memory
    note = getattr(a.memory, "note", "") or "no memory events in the trace"
    cuda = np.flatnonzero((mem.device_type == 1) & (mem.device_id >= 0))
    if not len(cuda) or not a.n_steps:
        return None, note
    dev = int(np.min(mem.device_id[cuda]))
    lo, hi = a.steps.window
    rows = cuda[(mem.device_id[cuda] == dev) & (mem.ts[cuda] >= lo) & (mem.ts[cuda] <= hi)]
    if len(rows) < 2:
        return None, "fewer than two memory events in the analysed steps"
    x = (mem.ts[rows] - lo) / 1000.0
    bins = np.minimum(((x / max(x[-1], 1e-9)) * (points - 1)).astype(np.int64), points - 1)
    lines = {}
    for key, y in _levels(mem, cuda[mem.device_id[cuda] == dev], rows).items():
        peak = np.full(points, -1.0)
        np.maximum.at(peak, bins, y)
        lines[key] = peak
    keep = np.unique(bins)
    xs = np.zeros(points)
    np.maximum.at(xs, bins, x)
    return (
        Series(
            f"GPU {dev}",
            [round(float(v), 4) for v in xs[keep]],
            {k: [float(v) for v in y[keep]] for k, y in lines.items()},
        ),
        "",
    )


def _levels(mem: Any, device_rows: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Allocated and reserved bytes at ``rows``: the allocator's totals when recorded, else
    (older traces) the running sum of allocation sizes since profiling started."""
    out = {}
    for key, col in (("allocated", mem.total_allocated), ("reserved", mem.total_reserved)):
        y = col[rows].astype(np.float64)
        if (y >= 0).any():
            out[key] = y
    if "allocated" not in out:
        running = np.cumsum(mem.nbytes[device_rows].astype(np.float64))
        level = running - min(float(running.min()), 0.0)
        pos = np.searchsorted(device_rows, rows)
        out["allocated (running sum of sizes)"] = level[pos]
    return out
