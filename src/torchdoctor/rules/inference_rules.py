"""Trace rules for inference engines and CUDA/HIP graphs (registry: ``catalog_inference.py``).

A capture trace (every analysed step holds a graph capture) gets only ``graph-capture``: its
launches were recorded, not run, so no host-bound or idle verdict applies. On an engine's
iterations the inference findings replace the generic ones they refine (a blocking copy per
decode step is ``sync-d2h-per-token``, not ``synchronous-copies``), and no fix advises
``torch.compile`` or CUDA graphs to a trace that already replays graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.breakdown import gap_causes
from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec
from torchdoctor.rules.trace_common import finding, grade
from torchdoctor.trace.arrays import median

if TYPE_CHECKING:  # the serving module is imported only by traces that have engine steps
    from torchdoctor.analysis.bandwidth import Bandwidth
    from torchdoctor.analysis.serving import ServingStep

InferenceRule = Callable[[TraceAnalysis], "Finding | None"]
_HOST = ("host_overhead", "input_pipeline")
_HOST_SYNC = ("host_overhead", "input_pipeline", "synchronization")
REPLACES: dict[str, tuple[str, ...]] = {
    "sync-d2h-per-token": ("synchronous-copies", "sync-stalls", "host-bound"),
    "eager-decode-launch-bound": ("host-bound", "input-pipeline"),
    "host-work-between-replays": ("host-bound",),
    "low-graph-coverage": ("host-bound",),
}
"""A fired inference finding drops the generic findings that describe the same time."""


def is_capture_trace(a: TraceAnalysis) -> bool:
    """Every analysed step holds a graph capture: start-up, no steady-state step."""
    return a.graphs is not None and bool(a.graphs.is_capture_trace)


def engine(a: TraceAnalysis) -> str:
    """The serving engine that wrote the trace ("unknown" when none is recognised)."""
    if a.serving is not None:
        return a.serving.engine
    from torchdoctor.trace.server_steps import detect_engine

    return detect_engine(a.table)


def graph_capture(a: TraceAnalysis) -> Finding | None:
    """The trace records graph capture: say what and how long, per graph."""
    g = a.graphs
    if g is None or not g.captures:
        return None
    costs = np.array([c.cost_ms for c in g.captures])
    labels = ", ".join(g.capture_labels)
    what = f" (batch size and mode: {labels})" if labels else ""
    evidence: dict[str, Any] = {
        "graphs_captured": len(g.captures),
        "capture_ms": round(g.capture_ms, 3),
        "capture_span_ms": round(g.capture_span_ms, 3),
        "median_capture_ms": round(median(costs), 3),
        "longest_capture_ms": round(float(costs.max()), 3),
        "instantiate_ms": round(sum(c.instantiate_ms for c in g.captures), 3),
        "recorded_launches": sum(c.recorded_launches for c in g.captures),
        "capture_labels": list(g.capture_labels),
    }
    s = spec("graph-capture")
    title = s.format_title(n=len(g.captures), what=what, ms=g.capture_ms)
    return finding(a, s.id, title, 0.0, "info", evidence, fix=s.fix(engine(a)))


def graph_kernels_not_recorded(a: TraceAnalysis) -> Finding | None:
    """Graph launches without any of their kernels: the GPU time inside them is not known."""
    g = a.graphs
    if g is None or not g.launches_without_kernels:
        return None
    ms = a.per_step_ms(a.not_recorded_ms)
    evidence = {
        "graph_launches": g.launch_count,
        "launches_without_kernels": g.launches_without_kernels,
        "graph_activities_recorded": g.graph_activity_count,
        "not_recorded_ms_per_step": round(ms, 3),
    }
    s = spec("graph-kernels-not-recorded")
    title = s.format_title(n=g.launch_count, missing=g.launches_without_kernels, ms=ms)
    return finding(a, s.id, title, 0.0, "warning", evidence, fix=s.fix(engine(a)))


def _steps(a: TraceAnalysis, want: Callable[[ServingStep], bool]) -> list[int]:
    if a.serving is None:
        return []
    return [i for i, s in enumerate(a.serving.steps) if want(s)]


def _idle(a: TraceAnalysis, idx: list[int], parts: tuple[str, ...]) -> float:
    return sum(a.per_step[i].idle_ms.get(p, 0.0) for i in idx for p in parts)


def _accounted(a: TraceAnalysis, idx: list[int]) -> float:
    assert a.serving is not None
    return sum(a.serving.steps[i].accounted_ms for i in idx)


def eager_decode_launch_bound(a: TraceAnalysis) -> Finding | None:
    """Decode steps without graph replay whose GPU waits for the CPU's launches."""
    idx = _steps(a, lambda s: s.kind in ("decode", "unknown") and s.graph_launches == 0)
    acc = _accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0 or not a.has_gpu:
        return None
    split = _host_splits(a, _HOST)
    host = sum(split[i][0] for i in idx)
    share = host / acc
    if share < th.HOST_WARN:
        return None
    each = a.launch.kernels_each_step
    kernels = sum(each[i] for i in idx if i < len(each)) / len(idx)
    assert a.serving is not None
    batch = a.serving.steps[idx[0]].batch_size
    evidence = {
        "decode_steps": len(idx),
        "host_late_idle_ms_per_decode_step": round(host / len(idx), 3),
        "share_of_decode_step": round(share, 4),
        "kernels_per_decode_step": round(kernels, 1),
        "median_kernel_us": a.launch.median_kernel_us,
        "median_launch_cost_us": a.launch.median_launch_cost_us,
        "engine": engine(a),
    }
    s = spec("eager-decode-launch-bound")
    decode = all(a.serving.steps[i].kind == "decode" for i in idx)
    title = s.format_title(
        what="decode" if decode else "inference", ms=host / len(idx), share=share, kernels=kernels
    )
    saving = a.per_step_ms(host)
    return finding(
        a, s.id, title, saving, grade(s.id, share), evidence, fix=s.fix(engine(a), batch)
    )


def _step_gaps(a: TraceAnalysis) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every idle gap of every step (its end and its step's index) with its causes, in one pass.

    Summed as host_overhead + input_pipeline (+ synchronization) the causes do not depend on
    which gap opens a step, so one call over all steps' gaps gives each step's exact sums.
    """
    act = a.activity
    busy = act.busy()
    g0s, g1s, idx = [], [], []
    for i, (lo, hi) in enumerate(zip(a.steps.starts_us, a.steps.ends_us, strict=True)):
        g0, g1 = iv.gaps(busy, float(lo), float(hi))
        g0s.append(g0)
        g1s.append(g1)
        idx.append(np.full(len(g0), i))
    if not g0s or not sum(len(g) for g in g0s):
        return np.zeros(0), np.zeros(0, dtype=np.int64), {}
    g0, g1 = np.concatenate(g0s), np.concatenate(g1s)
    return g1, np.concatenate(idx), gap_causes((g0, g1), act, float(a.steps.starts_us[0]))


def _ends_at_eager_kernel(a: TraceAnalysis, g1: np.ndarray) -> np.ndarray:
    """For gaps ending at ``g1``: the work that ends it is a kernel run outside any graph (a
    copy or memset is not: inputs and outputs cross the host boundary in any case)."""
    act = a.activity
    out = np.zeros(len(g1), dtype=bool)
    if a.graphs is None or len(a.graphs.owner) != len(act.rows):
        return out
    k = np.searchsorted(act.start_us, g1, side="left")
    ok = k < len(act.start_us)
    out[ok] = (a.graphs.owner[k[ok]] < 0) & (act.cls[k[ok]] <= 1)  # compute, communication
    return out


def _eager_host_ms(a: TraceAnalysis) -> float:
    """GPU idle waiting on the host, in gaps that end at eager (non-graph) kernels."""
    g1, _, causes = _step_gaps(a)
    if not len(g1):
        return 0.0
    eager = _ends_at_eager_kernel(a, g1)
    return float(sum(causes[p][eager].sum() for p in _HOST)) / 1e3


def low_graph_coverage(a: TraceAnalysis) -> Finding | None:
    """Graphs are replayed, but much device work runs eagerly beside them."""
    g = a.graphs
    if g is None or g.coverage is None or g.coverage >= th.GRAPH_COVERAGE_WARN:
        return None  # (None as well when some graphs' kernels are missing: share unknown)
    host = _eager_host_ms(a)
    share = host / a.accounted_ms if a.accounted_ms > 0 else 0.0
    ops = [o.name for o in g.eager_ops[:3]]
    attention = any("attention" in o.name.lower() for o in g.eager_ops[:3])
    evidence = {
        "graph_coverage": round(g.coverage, 4),
        "graph_gpu_ms_per_step": round(a.per_step_ms(g.graph_gpu_ms), 3),
        "eager_gpu_ms_per_step": round(a.per_step_ms(g.eager_gpu_ms), 3),
        "graph_launches": g.launch_count,
        "eager_ops": [
            {"op": o.name, "activities": o.activities, "gpu_ms": o.gpu_ms} for o in g.eager_ops
        ],
        "host_late_idle_before_eager_work_ms_per_step": round(a.per_step_ms(host), 3),
    }
    s = spec("low-graph-coverage")
    title = s.format_title(
        coverage=g.coverage, eager_ms=a.per_step_ms(g.eager_gpu_ms), ops=", ".join(ops)
    )
    return finding(
        a,
        s.id,
        title,
        a.per_step_ms(host),
        grade(s.id, share),
        evidence,
        fix=s.fix(engine(a), attention),
        where=ops,
    )


def _host_splits(
    a: TraceAnalysis, parts: tuple[str, ...] = _HOST_SYNC, skip_eager_kernels: bool = False
) -> list[tuple[float, float]]:
    """Per step: (idle of ``parts`` in gaps ending before the step's first blocking
    device-to-host copy returned, in gaps ending after it), ms; all "before" without such a
    copy. The gaps after it are the blocking copy's (the CPU could not queue work ahead).
    ``skip_eager_kernels`` leaves out the gaps before kernels run outside graphs (those are
    ``low-graph-coverage``'s)."""
    g1, idx, causes = _step_gaps(a)
    out = [(0.0, 0.0)] * len(a.steps)
    if not len(g1):
        return out
    host = np.sum([causes[p] for p in parts], axis=0)
    if skip_eager_kernels:
        host = np.where(_ends_at_eager_kernel(a, g1), 0.0, host)
    back = np.array(
        [
            _first_copy_return(a, float(lo), float(hi))
            for lo, hi in zip(a.steps.starts_us, a.steps.ends_us, strict=True)
        ]
    )
    after = g1 > back[idx]
    n = len(a.steps)
    before_ms = np.bincount(idx[~after], host[~after], minlength=n) / 1e3
    after_ms = np.bincount(idx[after], host[after], minlength=n) / 1e3
    return [(float(b), float(x)) for b, x in zip(before_ms, after_ms, strict=True)]


def _first_copy_return(a: TraceAnalysis, lo: float, hi: float) -> float:
    copies = a.serving.d2h_copies_us if a.serving is not None else ()
    mine = [back for t0, back in copies if lo <= t0 < hi]
    return min(mine) if mine else np.inf


def host_work_between_replays(a: TraceAnalysis) -> Finding | None:
    """Steps that replay graphs, with the GPU waiting for the engine's host work."""
    idx = _steps(a, lambda s: s.graph_launches > 0)
    acc = _accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0:
        return None
    split = _host_splits(a, _HOST, skip_eager_kernels=True)
    host = sum(split[i][0] for i in idx)
    share = host / acc
    if share < th.NOISE_FLOOR:
        return None
    assert a.serving is not None
    evidence = {
        "graph_steps": len(idx),
        "host_wait_ms_per_step": round(host / len(idx), 3),
        "share_of_step": round(share, 4),
        "between_steps_cpu_ms": list(a.serving.between_steps_ms[:16]),
        "engine": engine(a),
    }
    s = spec("host-work-between-replays")
    title = s.format_title(ms=host / len(idx), share=share)
    return finding(
        a, s.id, title, a.per_step_ms(host), grade(s.id, share), evidence, fix=s.fix(engine(a))
    )


def sync_d2h_per_token(a: TraceAnalysis) -> Finding | None:
    """Decode steps that read results back with a blocking copy before the next launch."""
    idx = _steps(a, lambda s: s.kind in ("decode", "mixed", "unknown") and s.blocking_d2h > 0)
    acc = _accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0:
        return None
    assert a.serving is not None
    split = _host_splits(a)
    stall = sum(split[i][1] for i in idx)
    share = stall / acc
    if share < th.NOISE_FLOOR:
        return None
    steps = [a.serving.steps[i] for i in idx]
    per_step = sum(s.blocking_d2h for s in steps) / len(steps)
    frame = a.serving.d2h_frames[0] if a.serving.d2h_frames else ""
    evidence = {
        "steps_with_copies": len(idx),
        "copies_per_step": round(per_step, 2),
        "cpu_held_ms_per_step": round(sum(s.cpu_blocked_ms for s in steps) / len(steps), 3),
        "gpu_idle_after_copy_ms_per_step": round(stall / len(idx), 3),
        "share_of_step": round(share, 4),
        "python_frames": list(a.serving.d2h_frames),
        "cpu_held_includes_not_recorded_work": a.not_recorded_ms > 0,
    }
    s = spec("sync-d2h-per-token")
    title = s.format_title(per_step=per_step, ms=stall / len(idx), share=share)
    return finding(
        a,
        s.id,
        title,
        a.per_step_ms(stall),
        grade(s.id, share),
        evidence,
        fix=s.fix(engine(a), frame, _overlap_scheduling(a)),
        where=list(a.serving.d2h_frames[:3]),
    )


def _overlap_scheduling(a: TraceAnalysis) -> bool:
    """The engine already overlaps scheduling with the GPU: SGLang's overlap scheduler resolves
    the previous batch's tokens on the device (``resolve_future_token_ids``)."""
    return any("resolve_future_token_ids" in n for n in a.table.names)


def prefill_chunk_size(a: TraceAnalysis) -> Finding | None:
    """Prefill steps too long for the decodes waiting on them, or too short to pay off."""
    idx = _steps(a, lambda s: s.kind in ("prefill", "mixed") and s.tokens is not None)
    if not idx:
        return None
    assert a.serving is not None
    steps = [a.serving.steps[i] for i in idx]
    ms = sum(s.accounted_ms for s in steps) / len(steps)
    tokens = round(sum(s.tokens or 0 for s in steps) / len(steps))
    evidence: dict[str, Any] = {
        "prefill_steps": len(steps),
        "tokens_per_step": tokens,
        "step_ms": round(ms, 3),
        "decode_requests_in_step": [s.decode_requests for s in steps][:8],
        "max_step_ms": float(th.PREFILL_STEP_MAX_MS),
    }
    s = spec("prefill-chunk-size")
    if ms > th.PREFILL_STEP_MAX_MS:
        target = max(512, _pow2_floor(tokens * th.PREFILL_STEP_MAX_MS / ms))
        evidence["suggested_tokens"] = target
        what = f"too large for interactive decode (about {target} tokens fit in {th.PREFILL_STEP_MAX_MS:.0f} ms)"
        fix = s.fix(engine(a), target, True)
    elif tokens < th.PREFILL_MIN_TOKENS and _host_share(a, idx) >= th.HOST_WARN:
        target = min(8192, _pow2_floor(8 * max(tokens, 1)))
        evidence["suggested_tokens"] = target
        what = "too small to amortise the step's fixed cost"
        fix = s.fix(engine(a), target, False)
    else:
        return None
    title = s.format_title(what=what, tokens=tokens, ms=ms)
    return finding(a, s.id, title, 0.0, "info", evidence, fix=fix)


def _host_share(a: TraceAnalysis, idx: list[int]) -> float:
    acc = _accounted(a, idx)
    return _idle(a, idx, _HOST_SYNC) / acc if acc > 0 else 0.0


def _pow2_floor(x: float) -> int:
    return 1 << max(int(np.floor(np.log2(max(x, 1.0)))), 0)


def memory_bound_decode(a: TraceAnalysis) -> Finding | None:
    """Decode GEMM/attention traffic against the device's memory bandwidth."""
    if a.serving is None:
        return None
    bw: Bandwidth | None = a.serving.bandwidth.get("decode")
    if bw is None or bw.share_of_peak is None or bw.peak_gb_per_s is None:
        return None
    n = sum(1 for st in a.serving.steps if st.kind == "decode")
    gap = max(0.0, 1.0 - bw.share_of_peak / th.DECODE_BANDWIDTH_TARGET)
    saving = a.per_step_ms(bw.kernel_ms * gap)
    share = saving / a.mean_step_ms if a.mean_step_ms > 0 else 0.0
    evidence = {
        "decode_steps": n,
        "bytes_moved_per_step": round(bw.bytes_moved / max(n, 1)),
        "kernel_ms_per_step": round(bw.kernel_ms / max(n, 1), 3),
        "covered_share_of_kernel_time": round(bw.covered_share, 4),
        "achieved_gb_per_s": round(bw.achieved_gb_per_s or 0.0, 1),
        "peak_gb_per_s": round(bw.peak_gb_per_s, 1),
        "share_of_peak": round(bw.share_of_peak, 4),
        "arithmetic_intensity_flop_per_byte": bw.arithmetic_intensity,
        "ridge_point_flop_per_byte": bw.ridge_point,
        "peak_source": bw.peak_source,
    }
    s = spec("memory-bound-decode")
    title = s.format_title(
        share=bw.share_of_peak,
        gb=bw.bytes_moved / max(n, 1) / 1e9,
        gbps=bw.achieved_gb_per_s or 0.0,
        peak=bw.peak_gb_per_s,
    )
    return finding(a, s.id, title, saving, grade(s.id, share), evidence, fix=s.fix(engine(a)))


INFERENCE_RULES: tuple[InferenceRule, ...] = (
    graph_capture,
    graph_kernels_not_recorded,
    eager_decode_launch_bound,
    low_graph_coverage,
    host_work_between_replays,
    sync_d2h_per_token,
    prefill_chunk_size,
    memory_bound_decode,
)


def inference_findings(a: TraceAnalysis) -> list[Finding]:
    """The inference findings that fire on ``a``."""
    return [f for f in (rule(a) for rule in INFERENCE_RULES) if f is not None]


def merge(a: TraceAnalysis, generic: list[Finding]) -> list[Finding]:
    """The generic findings plus the inference ones, less the generic ones they replace."""
    mine = inference_findings(a)
    dropped = {old for f in mine for old in REPLACES.get(f.id, ())}
    return [f for f in generic if f.id not in dropped] + mine


def capture_findings(a: TraceAnalysis) -> list[Finding]:
    """What a capture trace gets: the capture itself, and graph kernels it may lack."""
    keep = (graph_capture, graph_kernels_not_recorded)
    return [f for f in (rule(a) for rule in keep) if f is not None]
