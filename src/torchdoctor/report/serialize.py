"""The JSON form of a report (versioned; documented in docs/report-schema.md)."""

from __future__ import annotations

from typing import Any

from torchdoctor._version import __version__
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.report.model import Report

SCHEMA_VERSION = 1
"""Bumped on any incompatible change to the JSON report (see docs/report-schema.md)."""


def _maybe(obj: Any) -> Any:
    return obj.to_dict() if obj is not None and hasattr(obj, "to_dict") else None


def report_dict(r: Report) -> dict[str, Any]:
    """Plain data for ``--json``: every analysis, every finding, and where the trace came from."""
    a = r.analysis
    meta = a.table.meta
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "torchdoctor", "version": __version__},
        "source": {
            "path": meta.path,
            "rank": meta.rank,
            "world_size": meta.world_size,
            "backend": meta.backend,
            "devices": [
                {
                    k: d.get(k)
                    for k in (
                        "id",
                        "name",
                        "computeMajor",
                        "computeMinor",
                        "totalGlobalMem",
                        "numSms",
                    )
                    if k in d
                }
                for d in meta.devices
            ],
            "events": len(a.table),
            "json_bytes": meta.json_bytes,
        },
        "verdict": r.verdict,
        "steps": {
            "source": a.steps.source,
            "count": a.n_steps,
            "numbers": list(a.steps.numbers),
            "mean_step_ms": a.mean_step_ms,
        },
        "breakdown": {
            "total": a.total.to_dict(),
            "per_step": [s.to_dict() for s in a.per_step],
            "labels": _part_labels(a),
        },
        "hta_compatible": _maybe(a.hta),
        "communication": a.comm.to_dict(),
        "kernels": _maybe(a.kernels),
        "launch": _maybe(a.launch),
        "operators": _maybe(a.operators),
        "memory": _maybe(a.memory),
        "dependency_waits": _maybe(a.waits),
        "graphs": _maybe(a.graphs),
        "serving": _maybe(a.serving),
        "findings": [f.to_dict() for f in r.findings],
        "ranks": [row.to_dict() for row in r.ranks],
        "cross_rank": _maybe(r.cross_rank),
        "notes": list(r.notes),
    }


def _part_labels(a: TraceAnalysis) -> dict[str, str]:
    """Each part the total holds, by its key (``busy:compute``, ``idle:data_loading``,
    ``cpu:other``) -> the label every command prints it with."""
    from torchdoctor.analysis.breakdown_terms import keyed, labels

    return labels(keyed(a.total.busy_ms, a.total.idle_ms))
