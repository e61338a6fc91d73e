"""One-line summaries of a snapshot for other reports (``check``, the runtime's OOM log)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchdoctor.errors import UserError
from torchdoctor.memory.analysis import BEFORE_HISTORY, analyze_snapshot
from torchdoctor.memory.model import MemoryReport
from torchdoctor.units import fmt_bytes


def headline_of(report: MemoryReport) -> dict[str, Any]:
    """Peak, top holders, OOM and fixes of the busiest device, as plain data plus one ``text`` line."""
    device = max(report.devices, key=lambda d: d.segments.reserved_bytes, default=None)
    out: dict[str, Any] = {"command": f"torchdoctor memory {report.path}"}
    if device is None:
        return {**out, "text": "the snapshot holds no segments"}
    parts = [f"reserved {fmt_bytes(device.segments.reserved_bytes)}"]
    h = device.history
    if h is not None:
        holders = [r for r in h.holders_at_peak if r.label != BEFORE_HISTORY][:3]
        out["peak_allocated_bytes"] = h.peak_allocated_bytes
        out["top_holders"] = [
            {"where": r.label, "kind": r.category, "bytes": r.live_bytes} for r in holders
        ]
        parts.append(f"peak allocated {fmt_bytes(h.peak_allocated_bytes)}")
        if holders:
            parts.append(
                "held by " + ", ".join(f"{r.label} {fmt_bytes(r.live_bytes)}" for r in holders)
            )
        if h.ooms:
            o = h.ooms[-1]
            out["oom"] = {
                "requested_bytes": o.requested_bytes,
                "device_free_bytes": o.device_free_bytes,
                "cached_unallocated_bytes": o.cached_unallocated_bytes,
            }
            parts.insert(
                0,
                f"OOM asking {fmt_bytes(o.requested_bytes)} with {fmt_bytes(o.device_free_bytes)} free "
                f"and {fmt_bytes(o.cached_unallocated_bytes)} cached but unallocated",
            )
    else:
        parts.append("no allocation history recorded")
    out["fragmentation_matters"] = device.fragmentation_matters
    out["fixes"] = [f.env for f in device.fixes]
    if device.fixes:
        parts.append(f"try {device.fixes[0].env}")
    return {**out, "text": "; ".join(parts) + f" (details: torchdoctor memory {report.path})"}


def snapshot_headline(path: str | Path) -> dict[str, Any]:
    """:func:`headline_of` for a file; never raises (a broken snapshot gives an ``error`` entry)."""
    try:
        return headline_of(analyze_snapshot(path))
    except (UserError, OSError, MemoryError, ValueError) as exc:
        return {
            "command": f"torchdoctor memory {path}",
            "error": str(exc),
            "text": f"snapshot unreadable: {exc}",
        }
