"""Rules that read one trace's analysis and return findings with evidence, saving and fix."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.analysis.gpu_activity import SYNC_CALLS
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.device_rules import fp32_gemms, memory_pressure
from torchdoctor.rules.families import FAMILY_RULES
from torchdoctor.rules.finding import Finding, rank_findings
from torchdoctor.rules.fsdp_rules import exposed_all_gather, fsdp_gradient_reduction
from torchdoctor.rules.registry import spec
from torchdoctor.rules.spec import TraceRule
from torchdoctor.rules.trace_common import finding, grade
from torchdoctor.trace.arrays import distinct
from torchdoctor.trace.kinds import Kind

Rule = Callable[[TraceAnalysis], "Finding | None"]


def sync_stalls(a: TraceAnalysis) -> Finding | None:
    """The CPU blocks on the device (synchronize, .item(), blocking copies) and drains the queue."""
    if not a.has_gpu:
        return None
    ms = a.per_step_ms(a.total.idle_ms.get("synchronization", 0.0))
    share = ms / a.mean_step_ms if a.mean_step_ms else 0.0
    if share < th.SYNC_WARN or ms < th.SYNC_MIN_MS:
        return None
    calls = _count_names(a, lambda n: n in SYNC_CALLS, Kind.RUNTIME, Kind.DRIVER)
    items = _count_names(a, lambda n: n in ("aten::item", "aten::_local_scalar_dense"), Kind.CPU_OP)
    evidence = {
        "sync_idle_ms_per_step": round(ms, 3),
        "share_of_step": round(share, 4),
        "sync_calls": calls,
        "item_calls": items.get("aten::item", 0),
    }
    return finding(
        a,
        "sync-stalls",
        spec("sync-stalls").format_title(ms=ms, share=share),
        ms,
        grade("sync-stalls", share),
        evidence,
        where=sorted(calls, key=calls.__getitem__, reverse=True),
    )


def _count_names(a: TraceAnalysis, predicate: Any, *kinds: Kind) -> dict[str, int]:
    t = a.table
    lo, hi = a.steps.window
    rows = t.rows_named(predicate, *kinds)
    rows = rows[(t.ts[rows] >= lo) & (t.ts[rows] < hi)]
    codes, counts = np.unique(t.name[rows], return_counts=True)
    return {t.names[int(c)]: int(n) for c, n in zip(codes, counts, strict=True)}


def exposed_communication(a: TraceAnalysis) -> Finding | None:
    """Collectives the step waits for instead of overlapping them with backward compute."""
    c = a.comm
    if c.fsdp:  # all-gather is exposed-all-gather's; this one is gradient reduction
        return fsdp_gradient_reduction(a)
    if not a.has_gpu:
        return _cpu_communication(a)
    # GPU idle while the CPU waited inside a collective is communication too (never host time).
    waited = a.per_step_ms(a.total.idle_ms.get("collective_wait", 0.0))
    if c.comm_ms <= 0 and waited <= 0:
        return None
    ms = a.per_step_ms(c.exposed_ms) + waited
    share = ms / a.mean_step_ms if a.mean_step_ms else 0.0
    if share < th.EXPOSED_COMM_WARN:
        return None
    evidence = {
        "comm_ms_per_step": round(a.per_step_ms(c.comm_ms), 3),
        "exposed_comm_ms_per_step": round(ms, 3),
        "gpu_idle_in_cpu_collectives_ms_per_step": round(waited, 3),
        "overlap_share": round(c.overlap_share, 4),
        "collectives": c.collectives,
        "world_size": c.world_size,
    }
    return finding(
        a,
        "exposed-communication",
        spec("exposed-communication").format_title(ms=ms, share=share, overlap=c.overlap_share),
        ms,
        grade("exposed-communication", share),
        evidence,
    )


def _cpu_communication(a: TraceAnalysis) -> Finding | None:
    """CPU collectives (gloo) block the training thread: all of their time is exposed."""
    ms = a.per_step_ms(a.total.idle_ms.get("communication", 0.0))
    share = ms / a.mean_step_ms if a.mean_step_ms else 0.0
    if share < th.EXPOSED_COMM_WARN:
        return None
    evidence = {
        "cpu_collective_ms_per_step": round(ms, 3),
        "share_of_step": round(share, 4),
        "backend": a.table.meta.backend,
        "world_size": a.table.meta.world_size,
    }
    return finding(
        a,
        "exposed-communication",
        f"Exposed communication: the loop waits {ms:.1f} ms per step ({share:.0%}) in CPU "
        "collectives",
        ms,
        grade("exposed-communication", share),
        evidence,
        fix=spec("exposed-communication").fix(cpu=True),
        explanation="CPU collectives run on the training thread and wait for every rank, so "
        "this time is transfer plus waiting for the slowest rank.",
    )


def data_parallel(a: TraceAnalysis) -> Finding | None:
    """nn.DataParallel: one process drives several GPUs, scattering and gathering every step."""
    devices = distinct(a.table.device[a.activity.rows]) if a.has_gpu else np.zeros(0)
    dp_ops = _count_names(
        a, _is_data_parallel_op, Kind.CPU_OP, Kind.PYTHON_FUNCTION, Kind.USER_ANNOTATION
    )
    if len(devices) < 2 and not dp_ops:
        return None
    evidence = {"devices_in_one_process": [int(d) for d in devices], "data_parallel_ops": dp_ops}
    return finding(
        a,
        "data-parallel",
        spec("data-parallel").format_title(devices=len(devices)),
        a.mean_step_ms * th.DATA_PARALLEL_SHARE,  # the estimate check uses too
        grade("data-parallel", 0.0),
        evidence,
    )


def _is_data_parallel_op(name: str) -> bool:
    """Names only nn.DataParallel produces (DistributedDataParallel's contain "Distributed")."""
    if "Distributed" in name:
        return False
    return (
        name in ("DataParallel.forward", "nn.Module: DataParallel")
        or "nn/parallel/data_parallel.py" in name
        or any(k in name for k in ("ReduceAddCoalesced", "BroadcastBackward", "Gather.apply"))
    )


TRACE_RULES: tuple[Rule, ...] = (
    sync_stalls,
    exposed_communication,
    exposed_all_gather,
    data_parallel,
    fp32_gemms,
    memory_pressure,
)


def family_finding(rule: TraceRule, a: TraceAnalysis) -> Finding | None:
    """A family rule's measurement, judged and worded by its registry entry: the spec's
    threshold fires it, its title, severity policy and fix builder make the finding."""
    m = rule.measure(a)
    if m is None or not rule.fires(m):
        return None
    m, s = m.complete(), rule.spec
    return finding(
        a,
        s.id,
        s.format_title(**m.title),
        m.saving_ms,
        m.severity(s.severity),
        m.evidence,
        fix=s.fix(**m.fix),
        where=list(m.where),
    )


def _family_rules() -> tuple[Rule, ...]:
    return tuple(functools.partial(family_finding, r) for r in FAMILY_RULES)


def evaluate(a: TraceAnalysis, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    """Run the rules and rank what fired by estimated saving.

    A trace of CUDA-graph capture gets only the capture findings (its launches were recorded,
    not run); every other trace gets the inference findings too (``rules/inference_rules.py``).
    """
    rules = (*TRACE_RULES, *_family_rules()) if rules is None else rules
    found = [f for f in (rule(a) for rule in rules) if f is not None]
    if a.graphs is None and a.serving is None:
        return rank_findings(found)  # no inference rule applies: not even imported
    from torchdoctor.rules import inference_rules

    if inference_rules.is_capture_trace(a):
        return rank_findings(inference_rules.capture_findings(a))
    return rank_findings(inference_rules.merge(a, found))
