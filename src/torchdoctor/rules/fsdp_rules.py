"""FSDP's two communication costs, told apart: the parameter all-gather a unit waits for before
its forward or backward (fixed by prefetching), and the gradient reduce-scatter after its backward
(fixed by finer units and fewer reductions). Both read ``CommStats.by_kind``."""

from __future__ import annotations

from typing import Any

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec
from torchdoctor.rules.trace_common import finding, grade

GATHER = ("AllGather",)
REDUCTION = ("ReduceScatter", "AllReduce", "Reduce")


def _exposed(a: TraceAnalysis, kinds: tuple[str, ...]) -> tuple[float, float, float]:
    """Exposed ms per step, its share of the step, and the share of that kind hidden."""
    c = a.comm
    total = sum(c.by_kind.get(k, {}).get("comm_ms", 0.0) for k in kinds)
    exposed = c.exposed_ms_of(*kinds)
    ms = a.per_step_ms(exposed)
    share = ms / a.mean_step_ms if a.mean_step_ms else 0.0
    hidden = 1.0 - exposed / total if total > 0 else 0.0
    return ms, share, hidden


def _evidence(a: TraceAnalysis, kinds: tuple[str, ...], ms: float, hidden: float) -> dict[str, Any]:
    c = a.comm
    return {
        "collectives": {k: c.collectives.get(k, 0) for k in kinds if k in c.collectives},
        "comm_ms_per_step": round(
            a.per_step_ms(sum(c.by_kind.get(k, {}).get("comm_ms", 0.0) for k in kinds)), 3
        ),
        "exposed_ms_per_step": round(ms, 3),
        "overlap_share": round(hidden, 4),
        "on_cpu": not a.has_gpu,
        "backend": c.backend,
        "world_size": c.world_size,
    }


def exposed_all_gather(a: TraceAnalysis) -> Finding | None:
    """FSDP parameter all-gathers the step waits for (not prefetched under compute)."""
    if not a.comm.fsdp:
        return None
    ms, share, hidden = _exposed(a, GATHER)
    if share < th.EXPOSED_COMM_WARN:
        return None
    return finding(
        a,
        "exposed-all-gather",
        spec("exposed-all-gather").format_title(ms=ms, share=share, overlap=hidden),
        ms,
        grade("exposed-all-gather", share),
        _evidence(a, GATHER, ms, hidden),
        fix=spec("exposed-all-gather").fix(cpu=not a.has_gpu),
    )


def fsdp_gradient_reduction(a: TraceAnalysis) -> Finding | None:
    """Under FSDP, ``exposed-communication`` counts gradient reduction only (all-gather apart)."""
    ms, share, hidden = _exposed(a, REDUCTION)
    if share < th.EXPOSED_COMM_WARN:
        return None
    return finding(
        a,
        "exposed-communication",
        f"Exposed gradient reduction (FSDP): {ms:.1f} ms per step ({share:.0%}) of "
        f"reduce-scatter not overlapped with backward ({hidden:.0%} hidden)",
        ms,
        grade("exposed-communication", share),
        _evidence(a, REDUCTION, ms, hidden),
        fix=fx.fsdp_reduce_fix(cpu=not a.has_gpu),
        explanation="FSDP reduce-scatters each unit's gradients after its backward; it hides "
        "under the next unit's backward unless the units are coarse or it is the last one.",
    )
