"""Text and JSON for a :class:`MemoryReport` (the analysis never prints)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from torchdoctor.memory.model import DeviceHistory, DeviceMemory, HolderRow, MemoryReport, OomReport
from torchdoctor.report.layout import Column, TableText, lines
from torchdoctor.units import fmt_bytes

DEFINITIONS = (
    "terms: reserved = obtained from the driver (cudaMalloc); allocated = blocks owned by "
    "tensors; active = allocated plus blocks freed but still used by another stream; requested = "
    "what callers asked for before rounding; cached but unallocated = reserved - allocated "
    "(torch.cuda.empty_cache() returns whole empty segments; the free bytes inside partly used "
    "segments are the fragmented part); peak = the most allocated at once, replaying the "
    "recorded history; kind = from the allocating stack (optimizer step -> optimizer state, "
    "backward -> gradients, module forward -> activations, .to()/load_state_dict -> parameters)"
)
"""What the report's words mean, printed with it (a pip install has no docs folder)."""


def _holders(rows: tuple[HolderRow, ...], width: int) -> list[str]:
    columns = (
        Column("held"),
        Column("share"),
        Column("first user frame", right=False, flex="shorten"),
        Column("kind", right=False),
    )
    cells = tuple((fmt_bytes(r.live_bytes), f"{r.share:.1%}", r.label, r.category) for r in rows)
    return _indented(TableText(columns, cells), width, "   ")


def _indented(table: TableText, width: int, indent: str) -> list[str]:
    """The table's lines laid out to ``width`` less the indent, each line indented."""
    return [indent + line.plain for line in lines(table, width - len(indent))]


def _segments(d: DeviceMemory, width: int) -> list[str]:
    s = d.segments
    out = [
        f"  at the snapshot: reserved {fmt_bytes(s.reserved_bytes)}, allocated {fmt_bytes(s.allocated_bytes)}, "
        f"active {fmt_bytes(s.active_bytes)}, requested {fmt_bytes(s.requested_bytes)} ({s.segments} segments)",
        f"  cached but unallocated: {fmt_bytes(s.free_bytes)}"
        f" ({s.free_bytes / max(1, s.reserved_bytes):.0%} of reserved); whole empty segments "
        f"{s.empty_segments} ({fmt_bytes(s.empty_segment_bytes)}, released by torch.cuda.empty_cache()); "
        f"mostly empty segments {s.mostly_empty_segments} of {s.segments}",
    ]
    columns = (
        Column("pool", right=False, flex="shorten"),
        Column("segments"),
        Column("reserved"),
        Column("free"),
        Column("largest free block"),
    )
    cells = tuple(
        (
            c.size_class,
            str(c.segments),
            fmt_bytes(c.reserved_bytes),
            fmt_bytes(c.free_bytes),
            fmt_bytes(c.largest_free_block_bytes),
        )
        for c in s.by_class
    )
    return out + (_indented(TableText(columns, cells), width, "   ") if cells else [])


def _history(h: DeviceHistory, width: int) -> list[str]:
    span_ms = (h.last_time_us - h.first_time_us) / 1000
    actions = ", ".join(f"{k} {v}" for k, v in sorted(h.actions.items()))
    out = [
        f"  history: {h.entries} entries over {span_ms:.1f} ms ({actions})",
        f"  peak allocated: {fmt_bytes(h.peak_allocated_bytes)} at entry {h.peak_entry} "
        f"(+{(h.peak_time_us - h.first_time_us) / 1000:.1f} ms); "
        f"{fmt_bytes(h.baseline_allocated_bytes)} was allocated before the first entry; "
        f"largest request {fmt_bytes(h.largest_request_bytes)}",
    ]
    if not h.consistent:
        out.append(
            f"  warning: {h.unmatched_live_blocks} allocations live at the end of the history "
            "are not allocated blocks of the snapshot (history and segments disagree)"
        )
    cats = ", ".join(
        f"{k} {fmt_bytes(v)}"
        for k, v in sorted(h.categories_at_peak.items(), key=lambda kv: -kv[1])
    )
    out += [
        f"  by kind at the peak: {cats}",
        "  who holds the memory at the peak (first user frame):",
    ]
    return out + _holders(h.holders_at_peak, width)


def _oom(o: OomReport, width: int) -> list[str]:
    return [
        f"  OUT OF MEMORY: requested {fmt_bytes(o.requested_bytes)}, the device had "
        f"{fmt_bytes(o.device_free_bytes)} free; allocated {fmt_bytes(o.allocated_bytes)}, reserved "
        f"{fmt_bytes(o.reserved_bytes)}, of which {fmt_bytes(o.cached_unallocated_bytes)} cached but "
        "unallocated (fragmented)",
        "  top holders at that moment:",
        *_holders(o.top_holders, width),
    ]


def _device(d: DeviceMemory, width: int) -> list[str]:
    out = [f"device {d.device}", *_segments(d, width)]
    if d.history is not None:
        for o in d.history.ooms:
            out += _oom(o, width)
        out += _history(d.history, width)
    if d.fixes:
        out.append("  fragmentation matters; fixes (try in order):")
        for f in d.fixes:
            out += [f"    {f.env}", f"      why: {f.evidence}"]
    elif d.fragmentation_matters:
        out.append("  fragmentation matters, but the allocator settings that help are already on")
    else:
        s = d.segments
        out.append(
            f"  fragmentation: low ({fmt_bytes(s.split_free_bytes)} free inside partly used segments, "
            f"{s.split_free_bytes / max(1, s.reserved_bytes):.0%} of reserved; largest free block "
            f"{fmt_bytes(s.largest_free_block_bytes)})"
        )
    return out


def render_text(report: MemoryReport, width: int | None = None) -> str:
    """The report as text, its tables laid out to ``width`` columns (default: the terminal's,
    or 100 when the output is not a terminal)."""
    if width is None:
        from torchdoctor.report.console import text_width

        width = text_width()
    from torchdoctor.memory.verdict import verdict_of

    mode = "streamed" if report.streamed else "read whole"
    out = [
        f"Verdict: {verdict_of(report).text}",
        f"memory snapshot {report.path} ({fmt_bytes(report.file_bytes)}, {mode}, restricted unpickler)",
    ]
    out += [f"note: {n}" for n in report.notes]
    for d in report.devices:
        out += ["", *_device(d, width)]
    out += ["", *_wrapped(DEFINITIONS, width)]
    return "\n".join(out)


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, max(40, width), subsequent_indent="  ", break_on_hyphens=False)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: _plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "active_blocks"
        }
    if isinstance(obj, (list, tuple)):
        return [_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    return obj


def render_json(report: MemoryReport) -> str:
    from torchdoctor.memory.verdict import verdict_of

    return json.dumps({"verdict": _plain(verdict_of(report)), **_plain(report)}, indent=2)
