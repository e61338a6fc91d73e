"""Shared pieces of the run-level rules: thresholds, the step time, and building a finding."""

from __future__ import annotations

from typing import Any

from torchdoctor.rules.finding import Finding, FindingId, Severity
from torchdoctor.rules.fixes import DOCS, RUN_DOCS

CRITICAL_SHARE = 0.25
"""A finding costing a quarter of the step or more is critical."""
WARNING_SHARE = 0.05
"""Below 5% of the step a finding is recorded as info: within run-to-run noise."""
DATA_WAIT_SHARE = 0.05
"""Data wait above 5% of the step is worth hiding behind workers."""
PAGEABLE_GBPS = 8.0
"""Host-to-device bandwidth from pageable memory (GB/s): the copy is synchronous at this rate."""
GEMM_SPEEDUP_SAVING = 0.5
"""Share of GEMM time saved by bf16 or TF32 tensor cores over fp32 (at least 2x faster)."""
GRAPH_BREAK_SHARE = 0.05
"""Estimated share of the step lost per distinct graph break (guards, a resume frame, and no
fusion across the break), capped at GRAPH_BREAK_MAX_SHARE."""
GRAPH_BREAK_MAX_SHARE = 0.5
DATA_PARALLEL_SHARE = 0.23
"""DataParallel re-replicates the model every step under the GIL; DDP is typically >= 1.3x
faster on one node, so about 23% of the step."""
TINY_OPS_PER_STEP = 100
"""A CPU step with at least this many top-level operators, most of them tiny, is overhead bound."""
TINY_OP_SAVING = 0.7
"""Share of tiny-op time and Python time between ops that fusing (torch.compile) removes."""


def run_step_ms(run: dict[str, Any]) -> float | None:
    steps = run.get("steps") or {}
    value = steps.get("mean_step_ms")
    if value is None and steps.get("step_ms"):
        value = sum(steps["step_ms"]) / len(steps["step_ms"])
    return float(value) if value else None


def severity_for(share: float, floor: Severity = "info") -> Severity:
    order: list[Severity] = ["info", "warning", "critical"]
    level: Severity = (
        "critical" if share >= CRITICAL_SHARE else "warning" if share >= WARNING_SHARE else "info"
    )
    return max(level, floor, key=order.index)


def make(
    run: dict[str, Any],
    fid: FindingId,
    title: str,
    saving_ms: float,
    evidence: dict[str, Any],
    fix: str,
    explanation: str,
    where: list[str] | None = None,
    floor: Severity = "info",
    severity: Severity | None = None,
) -> Finding:
    """A finding with its saving capped at the mean step and its severity from the share."""
    step = run_step_ms(run)
    saving = max(0.0, min(saving_ms, step)) if step else 0.0
    share = saving / step if step else 0.0
    return Finding(
        id=fid,
        title=title,
        severity=severity or severity_for(share, floor),
        saving_ms_per_step=round(saving, 4),
        share_of_step=round(min(share, 1.0), 4),
        evidence={"mean_step_ms": step, **evidence},
        fix=fix,
        explanation=explanation,
        doc_url=RUN_DOCS.get(fid, f"{DOCS}/index.html"),
        where=where or [],
    )


def measured_steps(run: dict[str, Any]) -> int:
    return int((run.get("steps") or {}).get("measured_steps") or 0)


# -- torch.compile ------------------------------------------------------------------------------
