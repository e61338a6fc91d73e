"""An inference engine's steps (vLLM, SGLang, a Hugging Face generate loop): eager decode
waiting for launches, host work between graph replays, a blocking copy per decode step, the
prefill chunk's size, and decode's memory bandwidth.

Each refines a generic finding on the same time (``FindingSpec.replaces``): on an engine's
steps ``analyze`` keeps the engine's wording and fix. The measures read the trace's engine
steps (``analysis/serving.py``); ``_engine.py`` is imported only by a trace that has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import inference_fixes as ifx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families.graphs import GRAPHS_DOC
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, Measured, SeverityPolicy, TraceRule, Variant

if TYPE_CHECKING:
    from torchdoctor.analysis.bandwidth import Bandwidth
    from torchdoctor.analysis.bundle import TraceAnalysis

ENGINE_DOC = "https://docs.vllm.ai/en/latest/configuration/optimization.html"

EAGER_DECODE = FindingSpec(
    id="eager-decode-launch-bound",
    label="eager decode (launch bound)",
    title="Eager {what} is launch bound: the GPU waits {ms:.1f} ms per step ({share:.0%}) "
    "for the CPU to launch {kernels:.0f} kernels; no CUDA graph replayed",
    severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
    threshold=th.HOST_WARN,
    fix=ifx.eager_decode_fix,
    explanation="A decode step runs the whole model for one token per request: hundreds of "
    "short kernels, each paying Python, dispatcher and launch cost. Replaying the step as a "
    "CUDA graph issues them with one launch.",
    doc_url=GRAPHS_DOC,
    knobs=("compile",),
    replaces=("host-bound", "input-pipeline"),
)


def eager_decode(a: TraceAnalysis) -> Measured | None:
    """Decode steps without graph replay: the share of their time the GPU waits for the CPU's
    launches."""
    if a.serving is None or not a.has_gpu:
        return None
    from torchdoctor.rules.families import _engine as e

    idx = e.steps(a, lambda s: s.kind in ("decode", "unknown") and s.graph_launches == 0)
    acc = e.accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0:
        return None
    split = e.host_splits(a, e.HOST)
    host = sum(split[i][0] for i in idx)
    share = host / acc
    each = a.launch.kernels_each_step
    kernels = sum(each[i] for i in idx if i < len(each)) / len(idx)
    decode = all(a.serving.steps[i].kind == "decode" for i in idx)
    return Measured(
        value=share,
        saving_ms=a.per_step_ms(host),
        share=share,
        title={
            "what": "decode" if decode else "inference",
            "ms": host / len(idx),
            "share": share,
            "kernels": kernels,
        },
        evidence={
            "decode_steps": len(idx),
            "host_late_idle_ms_per_decode_step": round(host / len(idx), 3),
            "share_of_decode_step": round(share, 4),
            "kernels_per_decode_step": round(kernels, 1),
            "median_kernel_us": a.launch.median_kernel_us,
            "median_launch_cost_us": a.launch.median_launch_cost_us,
            "engine": e.engine(a),
        },
        fix={"engine": e.engine(a), "batch_size": a.serving.steps[idx[0]].batch_size},
    )


BETWEEN_REPLAYS = FindingSpec(
    id="host-work-between-replays",
    label="host work between graph replays",
    title="Host work between graph replays: the GPU waits {ms:.1f} ms per step ({share:.0%}) "
    "for the engine's CPU work (scheduling, input preparation, sampling)",
    severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
    threshold=th.NOISE_FLOOR,
    fix=ifx.host_between_replays_fix,
    explanation="With the model in graphs, what is left on the CPU each iteration (the "
    "scheduler, building the batch's inputs, sampling, detokenising) runs while the GPU "
    "has nothing queued, unless the engine overlaps it with the previous iteration.",
    doc_url=GRAPHS_DOC,
    replaces=("host-bound",),
)


def between_replays(a: TraceAnalysis) -> Measured | None:
    """Steps that replay graphs: the share of their time the GPU waits for the engine's host
    work (gaps before kernels run outside graphs are ``low-graph-coverage``'s)."""
    if a.serving is None:
        return None
    from torchdoctor.rules.families import _engine as e

    idx = e.steps(a, lambda s: s.graph_launches > 0)
    acc = e.accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0:
        return None
    split = e.host_splits(a, e.HOST, skip_eager_kernels=True)
    host = sum(split[i][0] for i in idx)
    share = host / acc
    return Measured(
        value=share,
        saving_ms=a.per_step_ms(host),
        share=share,
        title={"ms": host / len(idx), "share": share},
        evidence={
            "graph_steps": len(idx),
            "host_wait_ms_per_step": round(host / len(idx), 3),
            "share_of_step": round(share, 4),
            "between_steps_cpu_ms": list(a.serving.between_steps_ms[:16]),
            "engine": e.engine(a),
        },
        fix={"engine": e.engine(a)},
    )


SYNC_D2H = FindingSpec(
    id="sync-d2h-per-token",
    label="a blocking device-to-host copy per step",
    title="Blocking device-to-host copy per decode step: {per_step:.4g} per step hold the "
    "CPU; the GPU then idles {ms:.2f} ms per step ({share:.0%}) before the next launch",
    severity=SeverityPolicy(th.SYNC_WARN, th.SYNC_CRITICAL),
    threshold=th.NOISE_FLOOR,
    fix=ifx.sync_d2h_fix,
    explanation="Reading sampled tokens back with a blocking copy (.item(), .tolist(), "
    ".cpu()) waits for all queued GPU work, so the CPU cannot queue the next step ahead: "
    "the GPU idles for the host's per-token work every step.",
    doc_url=f"{DOCS}/notes/cuda.html#asynchronous-execution",
    replaces=("synchronous-copies", "sync-stalls", "host-bound"),
)


def sync_d2h(a: TraceAnalysis) -> Measured | None:
    """Decode steps that read results back with a blocking copy: the share of their time the
    GPU idles after the copy, before the next launch."""
    if a.serving is None:
        return None
    from torchdoctor.rules.families import _engine as e

    idx = e.steps(a, lambda s: s.kind in ("decode", "mixed", "unknown") and s.blocking_d2h > 0)
    acc = e.accounted(a, idx) if idx else 0.0
    if not idx or acc <= 0:
        return None
    split = e.host_splits(a)
    stall = sum(split[i][1] for i in idx)
    share = stall / acc
    steps = [a.serving.steps[i] for i in idx]
    per_step = sum(s.blocking_d2h for s in steps) / len(steps)
    frame = a.serving.d2h_frames[0] if a.serving.d2h_frames else ""
    return Measured(
        value=share,
        saving_ms=a.per_step_ms(stall),
        share=share,
        title={"per_step": per_step, "ms": stall / len(idx), "share": share},
        evidence={
            "steps_with_copies": len(idx),
            "copies_per_step": round(per_step, 2),
            "cpu_held_ms_per_step": round(sum(s.cpu_blocked_ms for s in steps) / len(steps), 3),
            "gpu_idle_after_copy_ms_per_step": round(stall / len(idx), 3),
            "share_of_step": round(share, 4),
            "python_frames": list(a.serving.d2h_frames),
            "cpu_held_includes_not_recorded_work": a.not_recorded_ms > 0,
        },
        fix={"engine": e.engine(a), "frame": frame, "overlap": e.overlap_scheduling(a)},
        where=tuple(a.serving.d2h_frames[:3]),
    )


def _prefill_title(what: str) -> str:
    return f"Prefill chunk {what}: {{tokens}} tokens per step, {{ms:.1f}} ms per step"


PREFILL = FindingSpec(
    id="prefill-chunk-size",
    label="prefill chunk size",
    title=_prefill_title(
        "too large for interactive decode (about {target} tokens fit in {max_ms:.0f} ms)"
    ),
    severity=SeverityPolicy(fixed="info"),
    threshold=th.PREFILL_STEP_MAX_MS,
    fix=ifx.prefill_chunk_fix,
    explanation="A long prefill step delays every decode request batched with it or queued "
    "behind it (inter-token latency); a very short one is dominated by the fixed cost of a "
    "step. Chunked prefill sets the tokens per step between the two.",
    doc_url=ENGINE_DOC,
    variants=(("small", Variant(_prefill_title("too small to amortise the step's fixed cost"))),),
)


def prefill(a: TraceAnalysis) -> Measured | None:
    """Prefill steps: their mean time (over the spec's threshold fires: too long for the
    decodes waiting on them); or too few tokens per step for a step whose GPU waits on the
    host (judged here: the ``small`` wording)."""
    if a.serving is None:
        return None
    from torchdoctor.rules.families import _engine as e

    idx = e.steps(a, lambda s: s.kind in ("prefill", "mixed") and s.tokens is not None)
    if not idx:
        return None
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
    judged = variant = None
    if ms > th.PREFILL_STEP_MAX_MS:
        target, large = max(512, e.pow2_floor(tokens * th.PREFILL_STEP_MAX_MS / ms)), True
    elif tokens < th.PREFILL_MIN_TOKENS and e.host_share(a, idx) >= th.HOST_WARN:
        target, large = min(8192, e.pow2_floor(8 * max(tokens, 1))), False
        judged = variant = "small"
    else:
        return None
    return Measured(
        value=ms,
        title={
            "tokens": tokens,
            "ms": ms,
            "target": target,
            "max_ms": float(th.PREFILL_STEP_MAX_MS),
        },
        evidence={**evidence, "suggested_tokens": target},
        fix={"engine": e.engine(a), "tokens": target, "too_large": large},
        judged=judged,
        variant=variant,
    )


MEMORY_BOUND = FindingSpec(
    id="memory-bound-decode",
    label="decode below memory bandwidth",
    title="Decode runs at {share:.0%} of memory bandwidth: its GEMM/attention kernels move "
    "{gb:.2f} GB per step at {gbps:.0f} GB/s (peak {peak:.0f} GB/s)",
    probe="kernel",
    fix=ifx.memory_bound_decode_fix,
    explanation="Decode reads every weight and the KV cache once per step for one token "
    "per request, so it is limited by memory bandwidth, not FLOPs; MFU says little. The "
    "bytes come from the recorded shapes (each tensor read once, the output written once).",
    doc_url=ENGINE_DOC,
)


def memory_bound(a: TraceAnalysis) -> Measured | None:
    """Decode GEMM/attention traffic against the device's memory bandwidth; saving: the kernel
    time between the rate reached and ``DECODE_BANDWIDTH_TARGET`` of the peak."""
    if a.serving is None:
        return None
    bw: Bandwidth | None = a.serving.bandwidth.get("decode")
    if bw is None or bw.share_of_peak is None or bw.peak_gb_per_s is None:
        return None
    from torchdoctor.rules.families._engine import engine

    n = sum(1 for st in a.serving.steps if st.kind == "decode")
    gap = max(0.0, 1.0 - bw.share_of_peak / th.DECODE_BANDWIDTH_TARGET)
    saving = a.per_step_ms(bw.kernel_ms * gap)
    return Measured(
        value=bw.share_of_peak,
        saving_ms=saving,
        title={
            "share": bw.share_of_peak,
            "gb": bw.bytes_moved / max(n, 1) / 1e9,
            "gbps": bw.achieved_gb_per_s or 0.0,
            "peak": bw.peak_gb_per_s,
        },
        evidence={
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
        },
        fix={"engine": engine(a)},
    )


RULES = (
    TraceRule(EAGER_DECODE, eager_decode),
    TraceRule(BETWEEN_REPLAYS, between_replays),
    TraceRule(SYNC_D2H, sync_d2h),
    TraceRule(PREFILL, prefill),
    TraceRule(MEMORY_BOUND, memory_bound),
)
