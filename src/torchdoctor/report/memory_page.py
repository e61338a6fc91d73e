"""``torchdoctor memory --html``: a :class:`MemoryReport` as the HTML report's page model.

This module only picks numbers and words; the page shell, the escaping and the SVG chart are the
HTML report's own (``torchdoctor.report.html``), so every string from the snapshot (file names,
function names) is escaped there like a trace's names are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchdoctor._version import __version__
from torchdoctor.memory.model import DeviceMemory, HolderRow, MemoryReport, OomReport, SeriesPoint
from torchdoctor.report.html_model import Page, Section, Series, Table, command_line, share
from torchdoctor.report.memory_text import DEFINITIONS
from torchdoctor.units import fmt_bytes

MIB = float(1 << 20)


def page_from_memory(
    report: MemoryReport, series: Mapping[int, Sequence[SeriesPoint]] | None = None
) -> Page:
    """Summary, then per device: memory over time, fragmentation with its fixes, the top holders
    at the peak (sortable) and each out-of-memory event."""
    series = series or {}
    page = Page(
        title="torchdoctor memory",
        verdict=_verdict(report),
        metadata=_metadata(report),
        notes=[*report.notes, DEFINITIONS],
        show_findings=False,
    )
    page.sections.append(_summary(report))
    for d in report.devices:
        page.sections += _device_sections(d, series.get(d.device, ()))
    return page


def _verdict(report: MemoryReport) -> str:
    from torchdoctor.memory.verdict import verdict_of

    return verdict_of(report).text


def _metadata(report: MemoryReport) -> list[tuple[str, str]]:
    s = report.settings
    conf = (s.conf or "(defaults)") if s.known else "not recorded in the snapshot"
    return [
        ("snapshot", report.path),
        ("file size", fmt_bytes(report.file_bytes)),
        ("reader", "streamed" if report.streamed else "read whole (restricted unpickler)"),
        ("PYTORCH_CUDA_ALLOC_CONF", conf),
        ("expandable segments", "on" if s.expandable_segments else "off"),
        ("torchdoctor", __version__),
        ("command", command_line()),
    ]


def _mib(n: int) -> float:
    return round(n / MIB, 2)


SUMMARY_ROWS = (
    "reserved MiB",
    "allocated MiB",
    "cached unallocated MiB",
    "free in partly used segments MiB",
    "largest free block MiB",
    "segments",
    "peak allocated MiB",
    "history entries",
    "out-of-memory events",
)
"""The summary's rows; one column per device, so many devices still fit the page's width."""


def _device_summary(d: DeviceMemory) -> list[float | int | None]:
    s, h = d.segments, d.history
    return [
        _mib(s.reserved_bytes),
        _mib(s.allocated_bytes),
        _mib(s.free_bytes),
        _mib(s.split_free_bytes),
        _mib(s.largest_free_block_bytes),
        s.segments,
        _mib(h.peak_allocated_bytes) if h else None,
        h.entries if h else None,
        len(h.ooms) if h else None,
    ]


def _summary(report: MemoryReport) -> Section:
    per_device = [_device_summary(d) for d in report.devices]
    rows: list[list[object]] = [
        [name, *(col[i] for col in per_device)] for i, name in enumerate(SUMMARY_ROWS)
    ]
    columns = ["quantity", *(f"GPU {d.device}" for d in report.devices)]
    table = Table("devices", "Per device", columns, rows)
    return Section("summary", "Summary", tables=[table])


def _device_sections(d: DeviceMemory, points: Sequence[SeriesPoint]) -> list[Section]:
    out = [_over_time(d, points), _fragmentation(d)]
    h = d.history
    if h is not None:
        out.append(
            Section(
                f"holders-gpu{d.device}",
                f"GPU {d.device}: who holds the memory at the peak",
                [
                    f"Live bytes at the peak ({fmt_bytes(h.peak_allocated_bytes)}) by the first "
                    "user frame of the allocating stack; click a column to sort."
                ],
                tables=[
                    _holders(f"holders-{d.device}", "Top holders at the peak", h.holders_at_peak)
                ],
            )
        )
        out += [_oom(d.device, i, o) for i, o in enumerate(h.ooms, 1)]
    return out


def _over_time(d: DeviceMemory, points: Sequence[SeriesPoint]) -> Section:
    sec = Section(f"time-gpu{d.device}", f"GPU {d.device}: memory over time")
    h = d.history
    if h is None or not points:
        sec.paragraphs.append(
            "No allocation history in this snapshot, so no chart: record it with "
            "torch.cuda.memory._record_memory_history() before the steps."
        )
        return sec
    t0 = points[0].time_us
    sec.chart = Series(
        f"GPU {d.device}",
        [(p.time_us - t0) / 1000.0 for p in points],
        {
            "allocated": [float(p.allocated_bytes) for p in points],
            "reserved": [float(p.reserved_bytes) for p in points],
        },
    )
    sec.paragraphs.append(
        f"Allocated and reserved bytes over the recorded history ({h.entries} entries, "
        f"{len(points)} points, each the highest allocated value it stands for). Peak allocated "
        f"{fmt_bytes(h.peak_allocated_bytes)} at +{(h.peak_time_us - h.first_time_us) / 1000:.1f} ms; "
        f"{fmt_bytes(h.baseline_allocated_bytes)} was allocated before the first entry; largest "
        f"request {fmt_bytes(h.largest_request_bytes)}."
    )
    if not h.consistent:
        sec.paragraphs.append(
            f"Warning: {h.unmatched_live_blocks} allocations live at the end of the history are "
            "not allocated blocks of the snapshot (history and segments disagree)."
        )
    return sec


def _fragmentation(d: DeviceMemory) -> Section:
    s = d.segments
    rows: list[list[object]] = [
        [
            c.size_class,
            c.segments,
            _mib(c.reserved_bytes),
            _mib(c.free_bytes),
            _mib(c.largest_free_block_bytes),
        ]
        for c in s.by_class
    ]
    table = Table(
        f"classes-{d.device}",
        "By size class",
        ["size class", "segments", "reserved MiB", "free MiB", "largest free block MiB"],
        rows,
    )
    if d.fixes:
        verdict = "Fragmentation matters here; fixes, to try in order:"
    elif d.fragmentation_matters:
        verdict = "Fragmentation matters, but the allocator settings that help are already on."
    else:
        verdict = (
            f"Fragmentation is low: {fmt_bytes(s.split_free_bytes)} free inside partly used "
            f"segments ({s.split_free_bytes / max(1, s.reserved_bytes):.0%} of reserved)."
        )
    summary = (
        f"Cached but unallocated {fmt_bytes(s.free_bytes)} of {fmt_bytes(s.reserved_bytes)} "
        f"reserved; {s.empty_segments} whole empty segments ({fmt_bytes(s.empty_segment_bytes)}, "
        f"released by torch.cuda.empty_cache()); largest free block "
        f"{fmt_bytes(s.largest_free_block_bytes)}."
    )
    return Section(
        f"fragmentation-gpu{d.device}",
        f"GPU {d.device}: fragmentation",
        [summary, verdict],
        fixes=[(f.env, f"why: {f.evidence}") for f in d.fixes],
        tables=[table],
    )


def _holders(table_id: str, title: str, rows: Sequence[HolderRow]) -> Table:
    return Table(
        table_id,
        title,
        ["holder (first user frame)", "kind", "live MiB", "blocks", "share of the peak"],
        [[r.label, r.category, _mib(r.live_bytes), r.blocks, share(r.share)] for r in rows],
    )


def _oom(device: int, i: int, o: OomReport) -> Section:
    text = (
        f"Requested {fmt_bytes(o.requested_bytes)}; the device had {fmt_bytes(o.device_free_bytes)} "
        f"free. Allocated {fmt_bytes(o.allocated_bytes)}, reserved {fmt_bytes(o.reserved_bytes)}, "
        f"of which {fmt_bytes(o.cached_unallocated_bytes)} cached but unallocated (fragmented)."
    )
    return Section(
        f"oom-gpu{device}-{i}",
        f"GPU {device}: out of memory #{i}",
        [text],
        tables=[_holders(f"oom-{device}-{i}", "Top holders at that moment", o.top_holders)],
    )
